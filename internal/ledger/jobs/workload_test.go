package jobs

import (
	"crypto/sha1" //nolint:gosec // recomputes Kueue's naming scheme
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

var wlNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const wlUID = types.UID("uid-1")

// wlJob is a queued SafeJob's spec and status.
type wlJob struct {
	spec   batchv1alpha1.SafeJobSpec
	status batchv1alpha1.SafeJobStatus
}

func job(par, completions int32) wlJob {
	return wlJob{spec: batchv1alpha1.SafeJobSpec{Parallelism: ptr.To(par), Completions: ptr.To(completions)}}
}

func (j wlJob) succeeded(n int32) wlJob { j.status.Succeeded = n; return j }

// active opens n launches in the ledger: their pods may run.
func (j wlJob) active(n int32) wlJob {
	var entries []batchv1alpha1.LedgerEntry
	for i := range n {
		entries = append(entries, launched(int64(i+1), i, 0))
	}
	j.status.Ledger = ledgerOf(entries...)
	return j
}
func (j wlJob) suspended() wlJob { j.spec.Suspend = ptr.To(true); return j }
func (j wlJob) finished(t string) wlJob {
	j.status.Conditions = append(j.status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: t, Message: "done"})
	return j
}

// wl builds a Workload of count pods controlled by uid, in LocalQueue team-a.
func wl(count int32, changes ...func(*kueue.Workload)) *kueue.Workload {
	w := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: "wl", Generation: 1, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: "sj", UID: wlUID, Controller: ptr.To(true)}}},
		Spec: kueue.WorkloadSpec{QueueName: "team-a", Active: ptr.To(true),
			PodSets: []kueue.PodSet{{Name: kueue.DefaultPodSetName, Count: count}}},
	}
	for _, c := range changes {
		c(w)
	}
	return w
}

func cond(typ string, s metav1.ConditionStatus, reason, msg string) func(*kueue.Workload) {
	return func(w *kueue.Workload) {
		meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg})
	}
}

// admitted gives the Workload quota for assigned pods (nil: no count in the assignment).
func admitted(assigned *int32) func(*kueue.Workload) {
	return func(w *kueue.Workload) {
		w.Status.Admission = &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
			Name: kueue.DefaultPodSetName, Count: assigned}}}
		cond(kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved", "Quota reserved in ClusterQueue cq")(w)
		cond(kueue.WorkloadAdmitted, metav1.ConditionTrue, "Admitted", "The workload is admitted")(w)
	}
}

func evicted(reason string) func(*kueue.Workload) {
	return cond(kueue.WorkloadEvicted, metav1.ConditionTrue, reason, "evicted: "+reason)
}

func deleting(w *kueue.Workload) { w.DeletionTimestamp = &metav1.Time{Time: wlNow} }

// inactive sets spec.active false, as Kueue or an admin deactivates a Workload.
func inactive(w *kueue.Workload) { w.Spec.Active = ptr.To(false) }

// markedSuspended is a Workload SafeJob deactivated for its suspend.
func markedSuspended(w *kueue.Workload) {
	inactive(w)
	metav1.SetMetaDataAnnotation(&w.ObjectMeta, SuspendedAnnotation, "true")
}

func input(j wlJob, w *kueue.Workload) *WorkloadInput {
	return &WorkloadInput{Served: true, Queue: "team-a", Spec: &j.spec, Status: &j.status, Workload: w, Now: wlNow}
}

// TestDecideWorkloadGate: before the pods are decided, the gate they run
// under, how many of them, and whether a Workload is created.
func TestDecideWorkloadGate(t *testing.T) {
	cases := []struct {
		name      string
		in        *WorkloadInput
		admitted  bool
		reason    string // of a closed gate; "-" for no gate at all
		msg       string // part of the message
		maxActive int32
		create    int32 // count of the Workload to create, 0: none
	}{
		{name: "Kueue not installed", in: func() *WorkloadInput { in := input(job(1, 1), nil); in.Served = false; return in }(),
			reason: ReasonKueueMissing, msg: "install Kueue"},
		{name: "no Workload: create min(parallelism, completions)", in: input(job(2, 3), nil), reason: "-", create: 2},
		{name: "no Workload: create min(parallelism, completions left)", in: input(job(5, 3).succeeded(2), nil), reason: "-", create: 1},
		{name: "no Workload: at least one", in: input(job(3, 2).succeeded(2), nil), reason: "-", create: 1},
		{name: "no Workload while pods run: stop first", in: input(job(2, 3).active(1), nil), reason: ReasonWorkloadMissing},
		{name: "no Workload and finished: nothing", in: input(job(2, 3).finished(batchv1alpha1.ConditionComplete), nil), reason: "-"},
		{name: "every name taken", in: func() *WorkloadInput {
			in := input(job(2, 3), nil)
			in.NamesTaken = []string{"a", "b"}
			return in
		}(), reason: ReasonWorkloadNameTaken, msg: "(a, b)"},
		{name: "just created", in: func() *WorkloadInput {
			in := input(job(2, 3), wl(2))
			in.Created = true
			return in
		}(), reason: batchv1alpha1.ReasonQueued, msg: "Workload wl created in LocalQueue team-a"},
		{name: "being deleted", in: input(job(2, 3), wl(2, admitted(ptr.To[int32](2)), deleting)), reason: ReasonWorkloadDeleted},
		{name: "waiting", in: input(job(2, 3), wl(2)), reason: batchv1alpha1.ReasonQueued, msg: "waits in LocalQueue team-a"},
		{name: "inadmissible", in: input(job(2, 3), wl(2, cond(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending",
			"LocalQueue team-a doesn't exist"))), reason: batchv1alpha1.ReasonQueued, msg: "LocalQueue team-a doesn't exist"},
		{name: "quota reserved, checks pending", in: input(job(2, 3), wl(2, func(w *kueue.Workload) {
			admitted(ptr.To[int32](2))(w)
			cond(kueue.WorkloadAdmitted, metav1.ConditionFalse, "Pending", "checks")(w)
		})), reason: ReasonWaitingForChecks},
		{name: "admitted: as many pods as assigned", in: input(job(2, 3), wl(2, admitted(ptr.To[int32](2)))),
			admitted: true, msg: "admitted by ClusterQueue cq", maxActive: 2},
		{name: "admitted without an assigned count: the pod set's", in: input(job(2, 3), wl(2, admitted(nil))),
			admitted: true, maxActive: 2},
		{name: "admitted fewer than the pod set: the assignment caps", in: input(job(5, 6), wl(5, admitted(ptr.To[int32](2)))),
			admitted: true, maxActive: 2},
		{name: "parallelism raised while admitted: stop to queue again", in: input(job(5, 6), wl(2, admitted(ptr.To[int32](2)))),
			reason: ReasonWorkloadResized, msg: "needs 5 pods and Workload wl holds quota for 2"},
		{name: "completions raised while admitted: stop to queue again", in: input(job(2, 6).succeeded(2), wl(1, admitted(ptr.To[int32](1)))),
			reason: ReasonWorkloadResized, msg: "needs 2 pods and Workload wl holds quota for 1"},
		{name: "parallelism raised beyond the completions left: no more pods needed", in: input(job(5, 6).succeeded(4), wl(2, admitted(ptr.To[int32](2)))),
			admitted: true, maxActive: 2},
		{name: "parallelism lowered while admitted: runs on", in: input(job(1, 6), wl(2, admitted(ptr.To[int32](2)))),
			admitted: true, maxActive: 2},
		{name: "evicted: Kueue's reason, even when raised", in: input(job(5, 6), wl(2, admitted(ptr.To[int32](2)), evicted(kueue.WorkloadEvictedByPreemption))),
			reason: kueue.WorkloadEvictedByPreemption},
		{name: "deactivated by Kueue: its reason and how to resume", in: input(job(2, 3), wl(2, inactive,
			cond(kueue.WorkloadEvicted, metav1.ConditionTrue, "DeactivatedDueToAdmissionCheck", "The workload is deactivated due to check ac rejected"))),
			reason: "DeactivatedDueToAdmissionCheck", msg: "check ac rejected; the SafeJob stays stopped until Workload wl is activated again"},
		{name: "deactivated by an admin, admitted still: stopped before Kueue evicts", in: input(job(2, 3), wl(2, admitted(ptr.To[int32](2)), inactive)),
			reason: kueue.WorkloadDeactivated, msg: "activated again"},
		{name: "deactivated for suspend: Kueue's eviction", in: input(job(2, 3).suspended(), wl(2, markedSuspended, evicted(kueue.WorkloadDeactivated))),
			reason: kueue.WorkloadDeactivated, msg: "evicted: Deactivated"},
		{name: "finished early", in: input(job(2, 3), wl(2, admitted(ptr.To[int32](2)), cond(kueue.WorkloadFinished, metav1.ConditionTrue,
			"OwnerNotFound", "owner gone"))), reason: "OwnerNotFound", msg: "the Workload is finished: owner gone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := DecideWorkload(c.in)
			if got := p.Count; p.Create != (c.create > 0) || got != c.create {
				t.Errorf("create %v of %d, want %d", p.Create, got, c.create)
			}
			if c.reason == "-" {
				if p.Gate != nil {
					t.Errorf("gate %+v, want none", p.Gate)
				}
				return
			}
			if p.Gate == nil {
				t.Fatalf("no gate")
			}
			if p.Gate.Admitted != c.admitted || (!c.admitted && p.Gate.Reason != c.reason) || !strings.Contains(p.Gate.Message, c.msg) ||
				p.Gate.MaxActive != c.maxActive {
				t.Errorf("gate %+v, want admitted %v reason %q message with %q maxActive %d", p.Gate, c.admitted, c.reason, c.msg, c.maxActive)
			}
		})
	}
}

// TestDecideWorkloadSpec: suspend, the queue label and a larger pod set go
// to the Workload, the last two only while it holds no quota.
func TestDecideWorkloadSpec(t *testing.T) {
	otherQueue := func(in *WorkloadInput) *WorkloadInput { in.Queue = "team-b"; return in }
	reserved := admitted(ptr.To[int32](2))
	cases := []struct {
		name   string
		in     *WorkloadInput
		active bool
		marked bool // the updated Workload is marked deactivated for suspend
		queue  string
		count  int32 // 0: no spec update
		event  string
	}{
		{name: "in sync", in: input(job(2, 3), wl(2))},
		{name: "suspended", in: input(job(2, 3).suspended(), wl(2)), active: false, marked: true, queue: "team-a", count: 2},
		{name: "suspended, deactivated for it already", in: input(job(2, 3).suspended(), wl(2, markedSuspended))},
		{name: "resumed: the Workload it deactivated is activated", in: input(job(2, 3), wl(2, markedSuspended)),
			active: true, queue: "team-a", count: 2},
		{name: "deactivated by Kueue: never activated by SafeJob", in: input(job(2, 3), wl(2, inactive))},
		{name: "deactivated by Kueue while admitted: never activated by SafeJob", in: input(job(2, 3), wl(2, admitted(ptr.To[int32](2)), inactive,
			cond(kueue.WorkloadEvicted, metav1.ConditionTrue, "DeactivatedDueToRequeuingLimitExceeded", "requeued too often")))},
		{name: "suspended after Kueue deactivated it: not marked, stays Kueue's", in: input(job(2, 3).suspended(), wl(2, inactive))},
		{name: "activated by an admin while suspended: deactivated again", in: input(job(2, 3).suspended(), wl(2, func(w *kueue.Workload) {
			markedSuspended(w)
			w.Spec.Active = ptr.To(true)
		})), active: false, marked: true, queue: "team-a", count: 2},
		{name: "activated by an admin, then resumed: the stale mark goes", in: input(job(2, 3), wl(2, func(w *kueue.Workload) {
			markedSuspended(w)
			w.Spec.Active = ptr.To(true)
		})), active: true, queue: "team-a", count: 2},
		{name: "queue changed while waiting", in: otherQueue(input(job(2, 3), wl(2))), active: true, queue: "team-b", count: 2},
		{name: "queue changed while admitted: kept", in: otherQueue(input(job(2, 3), wl(2, reserved))), event: EventQueueChangeIgnored},
		{name: "suspended while admitted: queue kept", in: otherQueue(input(job(2, 3).suspended(), wl(2, reserved))),
			active: false, marked: true, queue: "team-a", count: 2},
		{name: "parallelism raised while waiting: the pod set grows", in: input(job(5, 6), wl(2)), active: true, queue: "team-a", count: 5},
		{name: "parallelism lowered while waiting: kept", in: input(job(1, 6), wl(2))},
		{name: "parallelism raised while admitted: no update", in: input(job(5, 6), wl(2, reserved))},
		{name: "parallelism raised after eviction, quota still held: no update",
			in: input(job(5, 6), wl(2, reserved, evicted(kueue.WorkloadEvictedByPreemption)))},
		{name: "parallelism raised after the quota was given back", in: input(job(5, 6), wl(2, evicted(kueue.WorkloadEvictedByPreemption),
			cond(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", "requeued"))), active: true, queue: "team-a", count: 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := DecideWorkload(c.in)
			switch {
			case c.count == 0 && p.Spec != nil:
				t.Errorf("spec updated to %+v, want no update", p.Spec)
			case c.count != 0 && p.Spec == nil:
				t.Errorf("no spec update, want active %v queue %s count %d", c.active, c.queue, c.count)
			case c.count != 0 && (ptr.Deref(p.Spec.Active, true) != c.active || string(p.Spec.QueueName) != c.queue ||
				p.Spec.PodSets[0].Count != c.count || p.MarkSuspended != c.marked):
				t.Errorf("spec active %v marked %v queue %s count %d, want %v %v %s %d", ptr.Deref(p.Spec.Active, true), p.MarkSuspended,
					p.Spec.QueueName, p.Spec.PodSets[0].Count, c.active, c.marked, c.queue, c.count)
			}
			if got := eventReason(p.Event); got != c.event {
				t.Errorf("event %q, want %q", got, c.event)
			}
			if c.in.Workload.Spec.PodSets[0].Count != 2 || string(c.in.Workload.Spec.QueueName) != "team-a" {
				t.Errorf("the input Workload was modified")
			}
		})
	}
}

// TestMinCount: the job-min-parallelism annotation becomes the pod set's
// minCount only when Kueue would take it: a whole number below the count.
func TestMinCount(t *testing.T) {
	for annotation, want := range map[string]*int32{
		"": nil, "2": ptr.To[int32](2), "1": ptr.To[int32](1), "4": ptr.To[int32](4), "5": nil, "0": nil, "-1": nil,
		"two": nil, "2.5": nil, "99999999999": nil,
	} {
		if got := MinCount(annotation, 5); !ptr.Equal(got, want) {
			t.Errorf("MinCount(%q, 5) = %v, want %v", annotation, ptr.Deref(got, -1), ptr.Deref(want, -1))
		}
	}
}

func eventReason(e *WorkloadEvent) string {
	if e == nil {
		return ""
	}
	return e.Reason
}

// settleWant is what DecideWorkload after the pods should do.
type settleWant struct {
	release, drop, gaveBack bool
	event                   string
	status                  bool              // a status write
	conds                   map[string]string // type -> "Status/Reason" after the write
	admission               bool              // the admission is kept
	reclaimable             int32
}

// TestDecideWorkloadSettle: after the pods are decided, what happens to the
// Workload: released, replaced, or its status brought up to date.
func TestDecideWorkloadSettle(t *testing.T) {
	running := func(ready, succeeded int32) *Plan {
		return &Plan{Status: batchv1alpha1.SafeJobStatus{Ready: ready, Succeeded: succeeded, Active: ready}}
	}
	stopped := &Plan{Stopped: true}
	finishedEarly := cond(kueue.WorkloadFinished, metav1.ConditionTrue, "OwnerNotFound", "owner gone")
	reserved := admitted(ptr.To[int32](2))
	podsReady := func(s metav1.ConditionStatus, reason string) func(*kueue.Workload) {
		return cond(kueue.WorkloadPodsReady, s, reason, "")
	}
	type want = settleWant
	cases := []struct {
		name string
		j    wlJob
		w    *kueue.Workload
		plan *Plan
		want want
	}{
		{name: "finished with the SafeJob: released", j: job(2, 3).finished(batchv1alpha1.ConditionComplete),
			w: wl(2, reserved, cond(kueue.WorkloadFinished, metav1.ConditionTrue, "Succeeded", "")), plan: &Plan{},
			want: want{release: true}},
		{name: "finished early, pods stopped: replaced", j: job(2, 3), w: wl(2, reserved, finishedEarly), plan: stopped,
			want: want{drop: true, event: EventWorkloadFinishedEarly}},
		{name: "finished early, pods running: wait", j: job(2, 3), w: wl(2, reserved, finishedEarly), plan: running(1, 0)},
		{name: "deleted, pods stopped: released", j: job(2, 3), w: wl(2, reserved, deleting), plan: stopped, want: want{release: true}},
		{name: "deleted, pods running: wait", j: job(2, 3), w: wl(2, reserved, deleting), plan: running(1, 0)},
		{name: "resized, pods running: wait", j: job(5, 6), w: wl(2, reserved), plan: running(2, 0)},
		{name: "resized, pods stopped: replaced", j: job(5, 6), w: wl(2, reserved), plan: stopped,
			want: want{drop: true, event: EventWorkloadResized}},
		{name: "the SafeJob completes: Finished", j: job(2, 3), w: wl(2, reserved), plan: &Plan{Status: job(2, 3).succeeded(3).
			finished(batchv1alpha1.ConditionComplete).status},
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadFinished: "True/" + kueue.WorkloadFinishedReasonSucceeded}}},
		{name: "the SafeJob fails: Finished", j: job(2, 3), w: wl(2, reserved), plan: &Plan{Status: job(2, 3).
			finished(batchv1alpha1.ConditionFailed).status},
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadFinished: "True/" + kueue.WorkloadFinishedReasonFailed}}},
		{name: "preempted, pods stopped: quota given back, requeued", j: job(2, 3),
			w: wl(2, reserved, evicted(kueue.WorkloadEvictedByPreemption)), plan: stopped,
			want: want{status: true, gaveBack: true, conds: map[string]string{
				kueue.WorkloadRequeued:      "True/" + kueue.WorkloadEvictedByPreemption,
				kueue.WorkloadQuotaReserved: "False/Pending", kueue.WorkloadAdmitted: "False/NoReservation"}}},
		{name: "deactivated, pods stopped: quota given back, not requeued", j: job(2, 3),
			w: wl(2, reserved, evicted(kueue.WorkloadDeactivated)), plan: stopped,
			want: want{status: true, gaveBack: true, conds: map[string]string{kueue.WorkloadRequeued: "False/" + kueue.WorkloadDeactivated}}},
		{name: "preempted, pods running: quota kept", j: job(2, 3), w: wl(2, reserved, evicted(kueue.WorkloadEvictedByPreemption)),
			plan: running(1, 0)},
		{name: "waiting: nothing", j: job(2, 3), w: wl(2), plan: &Plan{}},
		{name: "admitted, pods starting", j: job(2, 3), w: wl(2, reserved), plan: running(1, 0),
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadPodsReady: "False/WaitForStart"}}},
		{name: "admitted, all pods ready", j: job(2, 3), w: wl(2, reserved, podsReady(metav1.ConditionFalse, "WaitForStart")), plan: running(2, 0),
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadPodsReady: "True/Started"}}},
		{name: "admitted, a ready pod failed", j: job(2, 3), w: wl(2, reserved, podsReady(metav1.ConditionTrue, "Started")), plan: running(1, 0),
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadPodsReady: "False/WaitForRecovery"}}},
		{name: "admitted, recovered", j: job(2, 3), w: wl(2, reserved, podsReady(metav1.ConditionFalse, "WaitForRecovery")), plan: running(2, 0),
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadPodsReady: "True/Recovered"}}},
		{name: "admitted, unchanged: no write", j: job(2, 3), w: wl(2, reserved, podsReady(metav1.ConditionTrue, "Started")), plan: running(2, 0)},
		{name: "admitted, one completion left: one pod reclaimable", j: job(2, 3), w: wl(2, reserved, podsReady(metav1.ConditionTrue, "Started")),
			plan: running(1, 2), want: want{status: true, admission: true, reclaimable: 1}},
		{name: "partially admitted, the admitted pods ready: PodsReady", j: job(5, 10), w: wl(5, admitted(ptr.To[int32](2)),
			podsReady(metav1.ConditionFalse, "WaitForStart")), plan: running(2, 0),
			want: want{status: true, admission: true, conds: map[string]string{kueue.WorkloadPodsReady: "True/Started"}}},
		{name: "partially admitted, more completions left than pods admitted: none reclaimable", j: job(5, 10),
			w: wl(5, admitted(ptr.To[int32](2)), podsReady(metav1.ConditionTrue, "Started")), plan: running(2, 7)},
		{name: "partially admitted, one completion left: one of the two admitted reclaimable", j: job(5, 10),
			w: wl(5, admitted(ptr.To[int32](2)), podsReady(metav1.ConditionTrue, "Started")), plan: running(1, 9),
			want: want{status: true, admission: true, reclaimable: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := input(c.j, c.w)
			in.Decided = c.plan
			before := c.w.DeepCopy()
			p := DecideWorkload(in)
			if p.Release != c.want.release || p.Drop != c.want.drop || p.GaveBack != c.want.gaveBack || eventReason(p.Event) != c.want.event {
				t.Errorf("release %v drop %v gaveBack %v event %q, want %v %v %v %q", p.Release, p.Drop, p.GaveBack,
					eventReason(p.Event), c.want.release, c.want.drop, c.want.gaveBack, c.want.event)
			}
			if p.Gate != nil || p.Create || p.Spec != nil {
				t.Errorf("after the pods: gate %v create %v spec %v", p.Gate, p.Create, p.Spec)
			}
			if (p.Status != nil) != c.want.status {
				t.Fatalf("status write %v, want %v", p.Status != nil, c.want.status)
			}
			if p.Status != nil {
				checkSettledStatus(t, p.Status, c.want)
			}
			if !sameStatus(&before.Status, &c.w.Status) {
				t.Errorf("the input Workload was modified")
			}
		})
	}
}

// checkSettledStatus checks the Workload status a settle wrote: its
// conditions, whether the admission is kept, and the reclaimable pods.
func checkSettledStatus(t *testing.T, status *kueue.WorkloadStatus, want settleWant) {
	t.Helper()
	for typ, w := range want.conds {
		got := meta.FindStatusCondition(status.Conditions, typ)
		if got == nil || string(got.Status)+"/"+got.Reason != w || got.ObservedGeneration != 1 {
			t.Errorf("condition %s = %+v, want %s", typ, got, w)
		}
	}
	if (status.Admission != nil) != want.admission {
		t.Errorf("admission %v, want kept %v", status.Admission, want.admission)
	}
	var n int32
	for _, rp := range status.ReclaimablePods {
		n += rp.Count
	}
	if n != want.reclaimable {
		t.Errorf("reclaimable %+v, want %d", status.ReclaimablePods, want.reclaimable)
	}
}

// TestDecideWorkloadSettleNoPodsReady: told that Kueue does not wait for
// pods ready, a settle never writes PodsReady, as Kueue's Job integration
// then does not: a change of ready pods alone writes nothing, a PodsReady
// set before is left as it is, and reclaimablePods and Finished are still
// written.
func TestDecideWorkloadSettleNoPodsReady(t *testing.T) {
	reserved := admitted(ptr.To[int32](2))
	running := func(ready, succeeded int32) *Plan {
		return &Plan{Status: batchv1alpha1.SafeJobStatus{Ready: ready, Succeeded: succeeded, Active: ready}}
	}
	readyBefore := cond(kueue.WorkloadPodsReady, metav1.ConditionTrue, "Started", "")
	cases := []struct {
		name string
		w    *kueue.Workload
		plan *Plan
		want settleWant
	}{
		{name: "admitted, pods starting: no write", w: wl(2, reserved), plan: running(1, 0)},
		{name: "admitted, all pods ready: no write", w: wl(2, reserved), plan: running(2, 0)},
		{name: "a ready pod failed: PodsReady left as it was", w: wl(2, reserved, readyBefore), plan: running(1, 0)},
		{name: "one completion left: one pod reclaimable", w: wl(2, reserved), plan: running(1, 2),
			want: settleWant{status: true, admission: true, reclaimable: 1}},
		{name: "the SafeJob completes: Finished", w: wl(2, reserved), plan: &Plan{Status: job(2, 3).succeeded(3).
			finished(batchv1alpha1.ConditionComplete).status},
			want: settleWant{status: true, admission: true, conds: map[string]string{kueue.WorkloadFinished: "True/" + kueue.WorkloadFinishedReasonSucceeded}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := input(job(2, 3), c.w)
			in.Decided, in.NoPodsReady = c.plan, true
			p := DecideWorkload(in)
			if (p.Status != nil) != c.want.status {
				t.Fatalf("status write %v, want %v", p.Status != nil, c.want.status)
			}
			if p.Status == nil {
				return
			}
			checkSettledStatus(t, p.Status, c.want)
			if got, was := meta.FindStatusCondition(p.Status.Conditions, kueue.WorkloadPodsReady),
				meta.FindStatusCondition(c.w.Status.Conditions, kueue.WorkloadPodsReady); !reflect.DeepEqual(got, was) {
				t.Errorf("PodsReady %+v, want it left as %+v", got, was)
			}
		})
	}
}

// TestDecideWorkloadSettleNoWorkload: without a Workload nothing is done.
func TestDecideWorkloadSettleNoWorkload(t *testing.T) {
	in := input(job(2, 3), nil)
	in.Decided = &Plan{Stopped: true}
	if p := DecideWorkload(in); *p != (WorkloadPlan{}) {
		t.Errorf("plan %+v, want nothing", p)
	}
}

// TestWorkloadNames: the first name is Kueue's; the second differs, is
// derived from the UID and, like the first, fits a name.
func TestWorkloadNames(t *testing.T) {
	sum := sha1.Sum([]byte("SafeJob\nbatch.safejob.dev\nmy-job\nuid-1")) //nolint:gosec // Kueue's naming scheme
	names := WorkloadNames("my-job", "uid-1")
	if len(names) != 2 || names[0] != "safejob-my-job-"+hex.EncodeToString(sum[:])[:5] {
		t.Fatalf("names %v, want Kueue's name first", names)
	}
	if names[1] == names[0] || !strings.HasPrefix(names[1], "safejob-my-job-") {
		t.Errorf("second name %q", names[1])
	}
	if other := WorkloadNames("my-job", "uid-2"); other[0] == names[0] || other[1] == names[1] {
		t.Errorf("names of another UID %v equal %v", other, names)
	}
	for _, n := range WorkloadNames(strings.Repeat("a", 253), "uid-1") {
		if len(n) > 253 {
			t.Errorf("name of %d characters", len(n))
		}
	}
}

// TestOwnWorkload: only a Workload the SafeJob's UID controls counts; one
// it does not control is neither used nor dropped, whatever its name.
func TestOwnWorkload(t *testing.T) {
	names := WorkloadNames("sj", wlUID)
	named := func(name string, uid types.UID, changes ...func(*kueue.Workload)) *kueue.Workload {
		w := wl(1, changes...)
		w.Name = name
		switch uid {
		case "":
			w.OwnerReferences = nil
		default:
			w.OwnerReferences[0].UID = uid
		}
		return w
	}
	notController := named(names[0], wlUID)
	notController.OwnerReferences[0].Controller = nil
	cases := []struct {
		name      string
		list      []*kueue.Workload
		own       string
		drop      []string
		uidForAll types.UID
	}{
		{name: "none", list: nil},
		{name: "the first name", list: []*kueue.Workload{named(names[0], wlUID)}, own: names[0]},
		{name: "the second name", list: []*kueue.Workload{named(names[1], wlUID)}, own: names[1]},
		{name: "another SafeJob's at the first name: not used, not dropped", list: []*kueue.Workload{named(names[0], "uid-old")}},
		{name: "nobody's at the first name, ours at the second", list: []*kueue.Workload{named(names[0], ""), named(names[1], wlUID)}, own: names[1]},
		{name: "owned but not controlled: not ours", list: []*kueue.Workload{notController}},
		{name: "ours under another name: dropped", list: []*kueue.Workload{named("other", wlUID), named(names[0], wlUID)},
			own: names[0], drop: []string{"other"}},
		{name: "both names: the first kept", list: []*kueue.Workload{named(names[1], wlUID), named(names[0], wlUID)},
			own: names[0], drop: []string{names[1]}},
		{name: "both names: the admitted one kept", list: []*kueue.Workload{named(names[0], wlUID), named(names[1], wlUID, admitted(nil))},
			own: names[1], drop: []string{names[0]}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			own, drop := OwnWorkload(wlUID, names, c.list)
			got := ""
			if own != nil {
				got = own.Name
			}
			var dropped []string
			for _, w := range drop {
				dropped = append(dropped, w.Name)
			}
			if got != c.own || strings.Join(dropped, ",") != strings.Join(c.drop, ",") {
				t.Errorf("own %q drop %v, want %q %v", got, dropped, c.own, c.drop)
			}
		})
	}
	if own, drop := OwnWorkload("", names, []*kueue.Workload{named(names[0], "")}); own != nil || drop != nil {
		t.Errorf("without a UID: own %v drop %v", own, drop)
	}
}
