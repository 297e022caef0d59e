package jobs

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// gateWorld is one queued SafeJob whose every plan is written back.
type gateWorld struct {
	t      *testing.T
	spec   batchv1alpha1.SafeJobSpec
	status batchv1alpha1.SafeJobStatus
	pods   []*corev1.Pod
}

func (w *gateWorld) decide(q *QueueGate) *Plan {
	w.t.Helper()
	plan, err := Decide(&Input{Name: "sj", Spec: &w.spec, Status: &w.status, Pods: w.pods, Now: t0, Queue: q,
		Uncreated: map[string]bool{"sj-0-0": true, "sj-1-0": true, "sj-1-1": true, "sj-2-0": true}})
	if err != nil {
		w.t.Fatal(err)
	}
	w.status = plan.Status
	return plan
}

// TestQueueGate walks a queued SafeJob through waiting, admission,
// eviction mid-way and re-admission: nothing launches before admission,
// evicted pods are recorded Evicted (never failures), completions stay.
func TestQueueGate(t *testing.T) {
	w := &gateWorld{t: t, spec: spec(2, 4)}
	waiting := &QueueGate{Reason: "Pending", Message: "LocalQueue team-a doesn't exist"}
	plan := w.decide(waiting)
	expectWaiting(t, plan, &w.status, waiting.Message)

	admitted := &QueueGate{Admitted: true, Message: "Admitted by ClusterQueue cq"}
	if plan = w.decide(admitted); len(plan.Append) != 2 || w.status.StartTime == nil || plan.Stopped {
		t.Fatalf("after admission: appended %v, startTime %v, stopped %v", plan.Append, w.status.StartTime, plan.Stopped)
	}
	// Pod 0 succeeds, pod 1 runs; then the Workload is evicted.
	w.pods = []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0), pod(1, 0)}
	w.decide(admitted) // records the success, launches index 2
	evicted := &QueueGate{Reason: "Preempted", Message: "Preempted to accommodate a higher priority Workload"}
	w.evictAndStop(evicted)
	// Re-admitted: it resumes where it was.
	w.pods = nil
	if plan = w.decide(admitted); len(plan.Append) != 2 || w.status.Succeeded != 1 {
		t.Fatalf("after re-admission: appended %v, succeeded %d; want two launches and the completion kept", plan.Append, w.status.Succeeded)
	}
}

// evictAndStop closes the gate on a SafeJob with pod sj-1-0 running and the
// launch of index 2 not created yet, and checks that it stops: the uncreated
// launch closed, the running pod committed Stopping, then deleted, then
// recorded Evicted with the queue's reason, never as a failure.
func (w *gateWorld) evictAndStop(evicted *QueueGate) {
	t := w.t
	t.Helper()
	plan := w.decide(evicted)
	// The uncreated launch of index 2 was never created: closed before it
	// starts. The running pod is stopped: first committed, then deleted.
	if len(plan.Append) != 2 || plan.Append[0].Pod != "sj-1-0" || plan.Append[0].Type != batchv1alpha1.EntryStopping ||
		plan.Append[1].Pod != "sj-2-0" || plan.Append[1].Type != batchv1alpha1.EntryEvicted || len(plan.Delete) != 0 || plan.Stopped {
		t.Fatalf("on eviction: appended %v, deleted %v, stopped %v; want sj-1-0 stopping and sj-2-0 closed",
			plan.Append, plan.Delete, plan.Stopped)
	}
	if plan = w.decide(evicted); len(plan.Append) != 0 || len(plan.Delete) != 1 || plan.Delete[0] != "sj-1-0" {
		t.Fatalf("Stopping observed: appended %v, deleted %v; want pod sj-1-0 deleted", plan.Append, plan.Delete)
	}
	// The deleted pod ends Failed: recorded Evicted with the queue's reason.
	p := withPhase(pod(1, 0), corev1.PodFailed, 143)
	p.DeletionTimestamp = &metav1.Time{Time: t0}
	w.pods = []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0), p}
	expectEvictedOnly(t, w.decide(evicted), &w.status)
	w.pods[1].Finalizers = nil
	if plan = w.decide(evicted); !plan.Stopped || w.status.Active != 0 {
		t.Fatalf("all pods terminal and released: stopped %v, active %d", plan.Stopped, w.status.Active)
	}
}

func expectWaiting(t *testing.T, plan *Plan, status *batchv1alpha1.SafeJobStatus, msg string) {
	t.Helper()
	if len(plan.Append) != 0 || status.StartTime != nil {
		t.Fatalf("launched before admission: %v, startTime %v", plan.Append, status.StartTime)
	}
	if c := meta.FindStatusCondition(status.Conditions, batchv1alpha1.ConditionAdmitted); c == nil ||
		c.Status != metav1.ConditionFalse || c.Message != msg {
		t.Fatalf("Admitted condition %+v, want False saying why", c)
	}
	if meta.FindStatusCondition(status.Conditions, batchv1alpha1.ConditionSuspended) != nil {
		t.Error("a waiting SafeJob is reported Suspended")
	}
	if !plan.Stopped {
		t.Error("a SafeJob that never ran is not reported stopped")
	}
}

func expectEvictedOnly(t *testing.T, plan *Plan, status *batchv1alpha1.SafeJobStatus) {
	t.Helper()
	for _, e := range plan.Append {
		if e.Type != batchv1alpha1.EntryEvicted || e.Reason != "Preempted" {
			t.Errorf("entry %s %s (%s) on eviction, want Evicted (Preempted)", e.Type, e.Pod, e.Reason)
		}
	}
	if len(plan.Append) == 0 || status.Failed != 0 || status.Succeeded != 1 {
		t.Fatalf("after eviction: %d entries, failed %d, succeeded %d", len(plan.Append), status.Failed, status.Succeeded)
	}
}

// TestFence: a launch's pod is created only within the create window of
// its ledger time; its absence (or a stranger holding its name) is trusted
// only LostGrace after it, which outlasts any create that may still land.
func TestFence(t *testing.T) {
	s := spec(1, 1)
	f := ledger.Fence{CreateWindow: 10 * time.Second, CreateTimeout: 4 * time.Second}
	if f.LostGrace() <= f.CreateWindow+f.CreateTimeout {
		t.Fatalf("LostGrace %s does not outlast window %s plus timeout %s", f.LostGrace(), f.CreateWindow, f.CreateTimeout)
	}
	status := &batchv1alpha1.SafeJobStatus{Ledger: ledgerOf(launched(1, 0, 0))}
	in := func(after time.Duration) *Input {
		return &Input{Name: "sj", Spec: &s, Status: status.DeepCopy(), Now: t0.Add(after), Fence: f,
			Uncreated: map[string]bool{"sj-0-0": true}}
	}
	if plan := decide(t, in(f.CreateWindow-time.Millisecond)); len(plan.Create) != 1 {
		t.Errorf("within the window: creates %v, want sj-0-0", plan.Create)
	}
	if plan := decide(t, in(f.CreateWindow)); len(plan.Create) != 0 || len(plan.Append) != 0 {
		t.Errorf("window passed: creates %v, appends %v; want neither", plan.Create, plan.Append)
	}
	// Not uncreated here (another process committed it, or this one restarted).
	late := in(f.LostGrace() - time.Second)
	late.Uncreated = nil
	refs, wait, err := Unaccounted(late)
	if err != nil || len(refs) != 0 || wait != time.Second {
		t.Fatalf("a second before LostGrace: unaccounted %v, wait %s, err %v; want none for 1s", refs, wait, err)
	}
	late.Now = t0.Add(f.LostGrace())
	if refs, _, _ = Unaccounted(late); len(refs) != 1 {
		t.Fatalf("at LostGrace: unaccounted %v, want sj-0-0 read live", refs)
	}
	// The live read found a stranger's pod under the name: Lost (NameTaken),
	// never counted, and the index runs again under a new name.
	late.Taken = map[string]bool{"sj-0-0": true}
	late.Pods = nil
	plan := decide(t, late)
	want := []batchv1alpha1.LedgerEntry{outcome(2, batchv1alpha1.EntryLost, 0, 0, ledger.ReasonNameTaken), launched(3, 0, 1)}
	if diff := cmp.Diff(want, plan.Append, cmpopts.IgnoreFields(batchv1alpha1.LedgerEntry{}, "Time")); diff != "" {
		t.Errorf("name taken: appends (-want +got):\n%s", diff)
	}
	if plan.Status.Succeeded != 0 || plan.Status.Failed != 0 {
		t.Errorf("name taken counted: succeeded %d failed %d", plan.Status.Succeeded, plan.Status.Failed)
	}
}

func decide(t *testing.T, in *Input) *Plan {
	t.Helper()
	plan, err := Decide(in)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return plan
}
