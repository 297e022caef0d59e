package jobs

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TestDecideDispatched: what a manager cluster's SafeJob does with its
// Workload while MultiKueue runs it on a worker.
func TestDecideDispatched(t *testing.T) {
	reserved := admitted(ptr.To[int32](2))
	finished := func(reason string) func(*kueue.Workload) {
		return cond(kueue.WorkloadFinished, metav1.ConditionTrue, reason, "done")
	}
	remoteRunning := job(2, 3)
	remoteRunning.status.Active = 1
	type want struct {
		create         int32
		release, drop  bool
		spec, gaveBack bool
		specActive     bool
		event          string
	}
	cases := map[string]struct {
		in   *WorkloadInput
		want want
	}{
		"no Workload: created":                    {in: input(job(2, 3), nil), want: want{create: 2}},
		"no Workload, completions left: the rest": {in: input(job(2, 3).succeeded(2), nil), want: want{create: 1}},
		"no Workload, finished: never again":      {in: input(job(2, 3).finished(batchv1alpha1.ConditionComplete), nil)},
		"no Workload, names taken: nothing": {in: func() *WorkloadInput {
			in := input(job(2, 3), nil)
			in.NamesTaken = []string{"a", "b"}
			return in
		}()},
		"waiting: nothing":           {in: input(job(2, 3), wl(2))},
		"admitted: nothing":          {in: input(job(2, 3), wl(2, reserved))},
		"suspended: deactivated":     {in: input(job(2, 3).suspended(), wl(2)), want: want{spec: true}},
		"deactivated by Kueue: kept": {in: input(job(2, 3), wl(2, inactive))},
		"finished by the worker: released, kept": {in: input(job(2, 3), wl(2, reserved, finished(kueue.WorkloadFinishedReasonSucceeded))),
			want: want{release: true}},
		"finished, SafeJob failed: released": {in: input(job(2, 3).finished(batchv1alpha1.ConditionFailed), wl(2, finished("Failed"))),
			want: want{release: true}},
		"finished as an orphan before any result: replaced": {in: input(job(2, 3), wl(2, finished("OwnerNotFound"))),
			want: want{drop: true, event: EventWorkloadFinishedEarly}},
		"deleted: released": {in: input(job(2, 3), wl(2, reserved, deleting)), want: want{release: true}},
		"evicted, the worker still runs a pod: quota kept": {in: input(remoteRunning, wl(2, reserved,
			evicted(kueue.WorkloadEvictedByPreemption)))},
		"evicted, the worker runs none: quota given back": {in: input(job(2, 3), wl(2, reserved,
			evicted(kueue.WorkloadEvictedByPreemption))), want: want{gaveBack: true}},
		"evicted as the worker was lost: quota given back whatever its last status": {in: input(remoteRunning, wl(2, reserved,
			evicted(kueue.WorkloadEvictedByAdmissionCheck))), want: want{gaveBack: true}},
		"Kueue not served: nothing": {in: func() *WorkloadInput {
			in := input(job(2, 3), nil)
			in.Served = false
			return in
		}()},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := DecideDispatched(c.in)
			got := want{release: p.Release, drop: p.Drop, spec: p.Spec != nil, gaveBack: p.GaveBack, event: eventReason(p.Event)}
			if p.Create {
				got.create = p.Count
			}
			if p.Spec != nil {
				got.specActive = ptr.Deref(p.Spec.Active, true)
			}
			if got != c.want {
				t.Errorf("plan %+v, want %+v", got, c.want)
			}
			if p.Gate != nil {
				t.Errorf("gate %+v: no pod runs on the manager", p.Gate)
			}
			if p.GaveBack && (p.Status == nil || p.Status.Admission != nil) {
				t.Errorf("quota given back without a status clearing the admission: %+v", p.Status)
			}
		})
	}
}

// TestDecideWorkloadPrebuilt: a worker cluster's copy runs only under the
// Workload MultiKueue made for it, and never creates, replaces or changes one.
func TestDecideWorkloadPrebuilt(t *testing.T) {
	prebuilt := func(in *WorkloadInput) *WorkloadInput { in.Prebuilt = "wl"; return in }
	reserved := admitted(ptr.To[int32](2))
	if p := DecideWorkload(prebuilt(input(job(2, 3), nil))); p.Create || p.Gate == nil || p.Gate.Reason != ReasonWaitingForPrebuilt {
		t.Errorf("no Workload yet: create %v gate %+v; want no create, waiting", p.Create, p.Gate)
	}
	taken := prebuilt(input(job(2, 3), nil))
	taken.NamesTaken = []string{"wl"}
	if p := DecideWorkload(taken); p.Create || p.Gate == nil || p.Gate.Reason != ReasonWorkloadNameTaken {
		t.Errorf("controlled by another: create %v gate %+v; want no create, refused", p.Create, p.Gate)
	}
	if p := DecideWorkload(prebuilt(input(job(2, 3), wl(2, reserved)))); !p.Gate.Admitted || p.Spec != nil {
		t.Errorf("admitted: gate %+v spec %+v; want admitted, no spec change", p.Gate, p.Spec)
	}
	for name, in := range map[string]*WorkloadInput{
		"suspended":                prebuilt(input(job(2, 3).suspended(), wl(2))),
		"queue changed":            func() *WorkloadInput { in := prebuilt(input(job(2, 3), wl(2))); in.Queue = "team-b"; return in }(),
		"parallelism raised":       prebuilt(input(job(5, 6), wl(2))),
		"deactivated, unsuspended": prebuilt(input(job(2, 3), wl(2, markedSuspended))),
	} {
		if p := DecideWorkload(in); p.Spec != nil {
			t.Errorf("%s: spec changed to %+v; MultiKueue's Workload must stay as made", name, p.Spec)
		}
	}
	stopped := &Plan{Stopped: true}
	for name, w := range map[string]*kueue.Workload{
		"finished early": wl(2, reserved, cond(kueue.WorkloadFinished, metav1.ConditionTrue, "OwnerNotFound", "gone")),
		"resized":        wl(1, admitted(ptr.To[int32](1))),
	} {
		in := prebuilt(input(job(2, 3), w))
		in.Decided = stopped
		if p := DecideWorkload(in); p.Drop {
			t.Errorf("%s: Workload dropped; a copy never replaces MultiKueue's Workload", name)
		}
	}
}
