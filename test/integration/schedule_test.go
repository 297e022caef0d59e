package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/testutil"
)

// scheduleHarness drives a scheduled SafeJob with a fake clock.
type scheduleHarness struct {
	*harness
	clock  *testclock.FakeClock
	parent *batchv1alpha1.SafeJob
	// first is the first scheduled time after the parent's creation.
	first time.Time
}

var pokes atomic.Int64

func newScheduleHarness(t *testing.T) (*scheduleHarness, string) {
	t.Helper()
	h := newHarness(t, nil, false)
	return &scheduleHarness{harness: h, clock: testclock.NewFakeClock(time.Now())}, h.ns
}

// create creates the parent and works out its first scheduled time.
func (s *scheduleHarness) create(t *testing.T, parent *batchv1alpha1.SafeJob) {
	t.Helper()
	if err := k8s.Create(context.Background(), parent); err != nil {
		t.Fatal(err)
	}
	s.parent = parent
	sched, err := runs.ParseSchedule(*parent.Spec.Schedule, "")
	if err != nil {
		t.Fatal(err)
	}
	s.first = sched.Next(parent.CreationTimestamp.Time)
}

// at moves the fake clock to just after a scheduled time and makes the
// controller look at the parent again (a fake clock fires no timers).
func (s *scheduleHarness) at(t *testing.T, tick time.Time) {
	t.Helper()
	s.clock.SetTime(tick.Add(time.Second))
	s.poke(t)
}

func (s *scheduleHarness) poke(t *testing.T) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.safejob.dev/poke":"%d"}}}`, pokes.Add(1))
	err := k8s.Patch(context.Background(), s.parent, client.RawPatch("application/merge-patch+json", []byte(patch)))
	if err != nil {
		t.Fatalf("poking parent: %v", err)
	}
}

func (s *scheduleHarness) minute(k int) time.Time { return s.first.Add(time.Duration(k) * time.Minute) }

// pastFence moves the clock past the create fence of the run committed at
// minute k (s.at): no create of it can land any more, so its finalizer may
// be released and its absence trusted.
func (s *scheduleHarness) pastFence(t *testing.T, k int) {
	t.Helper()
	s.clock.SetTime(s.minute(k).Add(2*time.Second + ledger.DefaultFence.LostGrace()))
	s.poke(t)
}

func (s *scheduleHarness) runName(k int) string { return runs.Name(s.parent.Name, s.minute(k)) }

func (s *scheduleHarness) getParent(t *testing.T) *batchv1alpha1.SafeJob {
	t.Helper()
	p := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(s.parent), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// run returns the run, or nil when it does not exist.
func (s *scheduleHarness) run(t *testing.T, name string) *batchv1alpha1.SafeJob {
	t.Helper()
	run := &batchv1alpha1.SafeJob{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, run)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func (s *scheduleHarness) waitRun(t *testing.T, name string) *batchv1alpha1.SafeJob {
	t.Helper()
	var run *batchv1alpha1.SafeJob
	waitFor(t, 30*time.Second, "run "+name+" to exist", func() (bool, error) {
		run = s.run(t, name)
		return run != nil, nil
	})
	return run
}

func (s *scheduleHarness) waitGone(t *testing.T, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, "run "+name+" to be gone", func() (bool, error) { return s.run(t, name) == nil, nil })
}

// waitLedger waits until the parent's ledger holds an entry of the type for the run.
func (s *scheduleHarness) waitLedger(t *testing.T, typ batchv1alpha1.EntryType, run string) batchv1alpha1.LedgerEntry {
	t.Helper()
	var found batchv1alpha1.LedgerEntry
	defer func() {
		if t.Failed() {
			p := s.getParent(t)
			t.Logf("parent ledger: %+v\nconditions: %+v", p.Status.Ledger.Entries, p.Status.Conditions)
			if r := s.run(t, run); r != nil {
				t.Logf("run %s: finalizers %v deleting %v status %+v", run, r.Finalizers, r.DeletionTimestamp, r.Status.Conditions)
			}
		}
	}()
	waitFor(t, 30*time.Second, fmt.Sprintf("a %s entry for %s", typ, run), func() (bool, error) {
		for _, e := range s.getParent(t).Status.Ledger.Entries {
			if e.Type == typ && e.Run == run {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

func (s *scheduleHarness) waitCondition(t *testing.T, typ, reason, msgPart string) {
	t.Helper()
	var last *metav1.Condition
	defer func() {
		if t.Failed() {
			t.Logf("last %s condition: %+v", typ, last)
		}
	}()
	waitFor(t, 30*time.Second, fmt.Sprintf("condition %s reason %s mentioning %q", typ, reason, msgPart), func() (bool, error) {
		last = condition(s.getParent(t), typ)
		return last != nil && last.Reason == reason && strings.Contains(last.Message, msgPart), nil
	})
}

// runCreates counts, from the audit log, the creates of each run.
func (s *scheduleHarness) runCreates(t *testing.T) map[string]int {
	t.Helper()
	all, err := testutil.CreatesByNamespace(auditLog, "safejobs")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for name, n := range all[s.ns] {
		if name != s.parent.Name {
			out[name] = n
		}
	}
	return out
}

// checkOnce asserts that every run was created once and that the runs are
// exactly want.
func (s *scheduleHarness) checkOnce(t *testing.T, want ...string) {
	t.Helper()
	got := s.runCreates(t)
	for _, name := range want {
		if got[name] != 1 {
			t.Errorf("run %s created %d times, want once (audit log: %v)", name, got[name], got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("runs created %v, want exactly %v", got, want)
	}
	if s.watch.RunsSeen() < len(want) {
		t.Errorf("ledger watch checked I8 on %d runs, want %d", s.watch.RunsSeen(), len(want))
	}
	s.watch.Check(t)
}

func holdPodsOf(names ...string) func(*corev1.Pod) testutil.Fate {
	return func(pod *corev1.Pod) testutil.Fate {
		for _, r := range names {
			if pod.Labels[batchv1alpha1.SafeJobNameLabel] == r {
				return testutil.Fate{Hold: true}
			}
		}
		return testutil.Fate{}
	}
}

func (s *scheduleHarness) podsOf(t *testing.T, run string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(s.ns),
		client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: run}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// TestScheduleRunsEachTime: one run per scheduled time, carrying the
// parent's labels and job fields; a template edit applies to later runs.
// (Runs inheriting kueue.x-k8s.io/queue-name are covered with the real
// Kueue in the end-to-end suite.)
func TestScheduleRunsEachTime(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	parent := testutil.MakeSafeJob("tick", ns).Schedule("* * * * *").Completions(2).
		Label("team", "reports").Obj()
	parent.Spec.Template.Labels = map[string]string{"app": "report"}
	s.create(t, parent)

	var names []string
	for k := range 3 {
		if k == 1 {
			// The operator writes the parent's status meanwhile: the edit
			// is made again on the newer parent, as kubectl edit would be.
			if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				p := s.getParent(t)
				p.Spec.Template.Spec.Containers[0].Image = "registry.example/work:v2"
				return k8s.Update(context.Background(), p)
			}); err != nil {
				t.Fatalf("editing the template of a scheduled SafeJob: %v", err)
			}
		}
		s.at(t, s.minute(k))
		name := s.runName(k)
		names = append(names, name)
		s.waitLedger(t, batchv1alpha1.EntrySucceeded, name)
		s.checkRunMeta(t, name, k)
		s.pastFence(t, k)
		waitFor(t, 30*time.Second, "the run finalizer of "+name+" to be released", func() (bool, error) {
			run := s.run(t, name)
			return run != nil && len(run.Finalizers) == 0, nil
		})
	}
	p := s.getParent(t)
	if !p.Status.LastScheduleTime.Time.Equal(s.minute(2)) || p.Status.LastSuccessfulTime == nil || len(p.Status.ActiveRuns) != 0 {
		t.Errorf("parent status: lastScheduleTime %v lastSuccessfulTime %v activeRuns %v",
			p.Status.LastScheduleTime, p.Status.LastSuccessfulTime, p.Status.ActiveRuns)
	}
	s.checkOnce(t, names...)
}

// checkRunMeta checks what run k of TestScheduleRunsEachTime carries.
func (s *scheduleHarness) checkRunMeta(t *testing.T, name string, k int) {
	t.Helper()
	run := s.run(t, name)
	if run == nil {
		t.Fatalf("run %s gone", name)
	}
	if run.Labels["team"] != "reports" || run.Labels[batchv1alpha1.ParentLabel] != "tick" ||
		run.Annotations[batchv1alpha1.ScheduledTimeAnnotation] != s.minute(k).UTC().Format(time.RFC3339) {
		t.Errorf("run %s labels %v annotations %v", name, run.Labels, run.Annotations)
	}
	if run.Spec.Schedule != nil || run.Status.Succeeded != 2 || metav1.GetControllerOf(run).UID != s.parent.UID {
		t.Errorf("run %s: schedule %v, succeeded %d, owner %v", name, run.Spec.Schedule, run.Status.Succeeded, run.OwnerReferences)
	}
	if img, want := run.Spec.Template.Spec.Containers[0].Image, "registry.example/work:v2"; (k >= 1) != (img == want) {
		t.Errorf("run %s image %s (template edited before run 1)", name, img)
	}
	for _, pod := range s.podsOf(t, name) {
		if pod.Labels["app"] != "report" || pod.Annotations[batchv1alpha1.ParentLabel] != "tick" {
			t.Errorf("pod %s labels %v annotations %v: template labels and the parent are not carried", pod.Name, pod.Labels, pod.Annotations)
		}
	}
}

func isRunCreate(obj client.Object, verb string) bool {
	sj, ok := obj.(*batchv1alpha1.SafeJob)
	return ok && verb == "create" && sj.Annotations[batchv1alpha1.ParentLabel] != ""
}

// TestScheduleRestartBetweenCommitAndCreate stops the controller right
// before (or right after) it creates a run whose Scheduled entry is
// committed: the restarted controller creates it exactly once.
func TestScheduleRestartBetweenCommitAndCreate(t *testing.T) {
	t.Parallel()
	for name, passThrough := range map[string]bool{"before create": false, "after create": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, ns := newScheduleHarness(t)
			wrap, crashed := stopAfter(isRunCreate, passThrough)
			stop := startManager(t, ns, managerOptions{clock: s.clock, wrapClient: wrap})
			s.create(t, testutil.MakeSafeJob("restart", ns).Schedule("* * * * *").Obj())
			s.at(t, s.minute(0))
			awaitCrash(t, crashed)
			stop()
			p := s.getParent(t)
			if len(p.Status.Ledger.Entries) != 1 || p.Status.Ledger.Entries[0].Run != s.runName(0) {
				t.Fatalf("ledger before restart: %+v, want the Scheduled entry of %s", p.Status.Ledger.Entries, s.runName(0))
			}
			if exists := s.run(t, s.runName(0)) != nil; exists != passThrough {
				t.Fatalf("run exists before restart: %v", exists)
			}
			startManager(t, ns, managerOptions{clock: s.clock})
			s.poke(t)
			s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(0))
			s.checkOnce(t, s.runName(0))
		})
	}
}

// TestScheduleNoRerunAfterDeletion: with TTL 0 and history 0 a finished run
// is deleted at once; neither the same controller nor a restarted one ever
// creates it again.
func TestScheduleNoRerunAfterDeletion(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	stop := startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("ttl", ns).Schedule("* * * * *").TTLSecondsAfterFinished(0).HistoryLimits(0, 0).Obj())
	s.at(t, s.minute(0))
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(0))
	s.pastFence(t, 0)
	s.waitGone(t, s.runName(0))
	s.poke(t)
	stop()
	startManager(t, ns, managerOptions{clock: s.clock})
	s.poke(t)
	// The next time runs: by then the restarted controller has decided on
	// the parent, with the first run gone from the cluster.
	s.at(t, s.minute(1))
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(1))
	s.pastFence(t, 1)
	s.waitGone(t, s.runName(1))
	s.checkOnce(t, s.runName(0), s.runName(1))
}

// TestScheduleRemovedRunNeverRecreated: a run whose finalizer is stripped
// by hand and that is deleted before the parent recorded its outcome, while
// no controller runs, is never created again by the restarted controller,
// which never saw it: past its create window no create of it starts, and
// once a live read confirms it absent the parent records it Lost
// (Vanished: its UID was recorded in activeRuns) and goes on with the
// schedule.
func TestScheduleRemovedRunNeverRecreated(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	stop := startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("byhand", ns).Schedule("* * * * *").Obj())
	s.kubelet.SetFate(holdPodsOf(s.runName(0)))
	s.at(t, s.minute(0))
	run := s.waitRun(t, s.runName(0))
	waitFor(t, 30*time.Second, "activeRuns to carry the UID of run 0", func() (bool, error) {
		refs := s.getParent(t).Status.ActiveRuns
		return len(refs) == 1 && refs[0].UID == run.UID, nil
	})
	stop()

	run = s.run(t, s.runName(0))
	run.Finalizers = nil
	if err := k8s.Update(context.Background(), run); err != nil {
		t.Fatalf("stripping the run finalizer: %v", err)
	}
	if err := k8s.Delete(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	s.waitGone(t, s.runName(0))
	// The controller comes back once no create of run 0 can land any more.
	s.pastFence(t, 0)
	startManager(t, ns, managerOptions{clock: s.clock})
	s.poke(t)
	e := s.waitLedger(t, batchv1alpha1.EntryLost, s.runName(0))
	if e.Reason != runs.ReasonVanished {
		t.Errorf("run 0 recorded Lost with reason %q, want %q", e.Reason, runs.ReasonVanished)
	}
	s.at(t, s.minute(1))
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(1))
	var children batchv1alpha1.SafeJobList
	if err := k8s.List(context.Background(), &children, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, sj := range children.Items {
		if sj.Name == s.runName(0) {
			t.Errorf("run 0 exists again (UID %s, was %s)", sj.UID, run.UID)
		}
	}
	s.checkOnce(t, s.runName(0), s.runName(1))
}

// TestScheduleNameTaken: the names of two runs are held by SafeJobs the
// parent does not control: a stranger's, and one left by an earlier parent
// of the same name (another UID). The parent never adopts, counts, deletes
// or releases them: once no create of its own can land, it records each
// run Lost (NameTaken) and goes on with the schedule.
func TestScheduleNameTaken(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	parent := testutil.MakeSafeJob("taken", ns).Schedule("* * * * *").ConcurrencyPolicy(batchv1alpha1.ForbidConcurrent).
		HistoryLimits(0, 0).Obj()
	s.create(t, parent)
	held := s.holdRunNames(t)

	for k := range 2 {
		s.at(t, s.minute(k))
		s.waitLedger(t, batchv1alpha1.EntryScheduled, s.runName(k))
		s.pastFence(t, k)
		e := s.waitLedger(t, batchv1alpha1.EntryLost, s.runName(k))
		if e.Reason != ledger.ReasonNameTaken {
			t.Errorf("run %d recorded Lost with reason %q, want %q", k, e.Reason, ledger.ReasonNameTaken)
		}
	}
	s.at(t, s.minute(2))
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(2))
	s.pastFence(t, 2)
	s.waitGone(t, s.runName(2)) // history 0: the parent's own run is pruned

	p := s.getParent(t)
	if st, err := runs.Replay(&p.Status.Ledger); err != nil || p.Status.LastSuccessfulTime == nil ||
		!p.Status.LastSuccessfulTime.After(s.minute(2)) || len(st.Open) != 0 {
		t.Errorf("parent status: lastSuccessfulTime %v, ledger %+v (%v)", p.Status.LastSuccessfulTime, p.Status.Ledger.Entries, err)
	}
	for name, was := range held {
		sj := s.run(t, name)
		if sj == nil || sj.UID != was.UID || sj.DeletionTimestamp != nil || !slices.Equal(sj.Finalizers, was.Finalizers) ||
			!equality.Semantic.DeepEqual(sj.OwnerReferences, was.OwnerReferences) {
			t.Errorf("%s was touched: %+v", name, sj.ObjectMeta)
		}
	}
	if got := s.runCreates(t); len(got) != 3 || got[s.runName(2)] != 1 {
		t.Errorf("SafeJob creates %v: want the two held names by the test and run 2 once", got)
	}
	s.watch.Check(t)
}

// holdRunNames creates, under the names of the parent's runs 0 and 1,
// finished SafeJobs it does not control: a stranger's, and one controlled by
// an earlier parent of the same name. Both carry the run finalizer.
func (s *scheduleHarness) holdRunNames(t *testing.T) map[string]*batchv1alpha1.SafeJob {
	t.Helper()
	stranger := testutil.MakeSafeJob(s.runName(0), s.ns).Obj()
	stranger.Finalizers = []string{batchv1alpha1.RunFinalizer}
	leftover := testutil.MakeSafeJob(s.runName(1), s.ns).Obj()
	leftover.Finalizers = []string{batchv1alpha1.RunFinalizer}
	leftover.OwnerReferences = []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob",
		Name: s.parent.Name, UID: "0a1b2c3d-earlier-parent", Controller: ptr.To(true)}}
	held := map[string]*batchv1alpha1.SafeJob{}
	for _, sj := range []*batchv1alpha1.SafeJob{stranger, leftover} {
		if err := k8s.Create(context.Background(), sj); err != nil {
			t.Fatal(err)
		}
		held[sj.Name] = sj
		waitFinished(t, client.ObjectKeyFromObject(sj), 30*time.Second) // finished: tempting to count and prune
	}
	return held
}

// TestScheduleForbid: no run starts while an earlier run, or a pod of it,
// is still running, also after a restart once the run is gone; the due time
// runs once they are gone.
func TestScheduleForbid(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	stop := startManager(t, ns, managerOptions{clock: s.clock})
	parent := testutil.MakeSafeJob("forbid", ns).Schedule("* * * * *").ConcurrencyPolicy(batchv1alpha1.ForbidConcurrent).Obj()
	s.create(t, parent)
	s.kubelet.SetFate(holdPodsOf(s.runName(0)))
	s.at(t, s.minute(0))
	waitFor(t, 30*time.Second, "run 0's pod to run", func() (bool, error) {
		pods := s.podsOf(t, s.runName(0))
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning, nil
	})
	s.at(t, s.minute(1))
	s.waitCondition(t, batchv1alpha1.ConditionScheduling, batchv1alpha1.ReasonWaitingForRun, s.runName(0))

	// The user deletes run 0: its outcome is recorded and it goes, but its
	// pod still runs (pod garbage collection is slow): still no new run.
	if err := k8s.Delete(context.Background(), s.run(t, s.runName(0))); err != nil {
		t.Fatal(err)
	}
	s.waitLedger(t, batchv1alpha1.EntryEvicted, s.runName(0))
	s.waitGone(t, s.runName(0))
	s.poke(t)
	s.waitCondition(t, batchv1alpha1.ConditionScheduling, batchv1alpha1.ReasonWaitingForRun, s.runName(0))
	if s.run(t, s.runName(1)) != nil {
		t.Fatal("run 1 started while a pod of run 0 was still running")
	}
	// A restarted controller knows the pod is run 0's from the UID the
	// ledger recorded: the next time waits too.
	stop()
	startManager(t, ns, managerOptions{clock: s.clock})
	s.at(t, s.minute(2))
	s.waitCondition(t, batchv1alpha1.ConditionScheduling, batchv1alpha1.ReasonWaitingForRun,
		s.minute(2).UTC().Format(time.RFC3339))
	if s.run(t, s.runName(2)) != nil {
		t.Fatal("run 2 started after a restart while a pod of run 0 was still running")
	}
	// The pod goes: the time that is due runs, the one before it counted missed.
	for _, pod := range s.podsOf(t, s.runName(0)) {
		if err := k8s.Delete(context.Background(), &pod); err != nil {
			t.Fatal(err)
		}
	}
	if e := s.waitLedger(t, batchv1alpha1.EntryScheduled, s.runName(2)); e.Missed != 1 {
		t.Errorf("run 2 scheduled with %d missed, want 1 (minute 1)", e.Missed)
	}
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(2))
	s.checkOnce(t, s.runName(0), s.runName(2))
}

// TestScheduleForbidIgnoresStrangerPods: a running pod that the parent's
// runs do not control, labelled and annotated as a pod of its first run,
// never holds back a Forbid parent: its runs start on time and the
// stranger's pod is left alone. (A real run's pod still holds it back:
// TestScheduleForbid.)
func TestScheduleForbidIgnoresStrangerPods(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	s.kubelet.SetFate(func(p *corev1.Pod) testutil.Fate { return testutil.Fate{Hold: metav1.GetControllerOf(p) == nil} })
	startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("lookalike", ns).Schedule("* * * * *").ConcurrencyPolicy(batchv1alpha1.ForbidConcurrent).Obj())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lookalike-pod", Namespace: ns,
			Labels:      map[string]string{batchv1alpha1.ParentLabel: s.parent.Name, batchv1alpha1.SafeJobNameLabel: s.runName(0)},
			Annotations: map[string]string{batchv1alpha1.ParentLabel: s.parent.Name}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating the stranger's pod: %v", err)
	}
	pod = waitPodPhase(t, client.ObjectKeyFromObject(pod), corev1.PodRunning)

	for k := range 2 {
		s.at(t, s.minute(k))
		s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(k))
	}
	got := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != pod.UID || got.DeletionTimestamp != nil || len(got.Finalizers) != 0 || got.Status.Phase != corev1.PodRunning {
		t.Errorf("the stranger's pod was touched: %+v %s", got.ObjectMeta, got.Status.Phase)
	}
	s.checkOnce(t, s.runName(0), s.runName(1))
}

// TestScheduleReplace: the earlier run is deleted and the new run starts
// only once the earlier run's pods are gone.
func TestScheduleReplace(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("replace", ns).Schedule("* * * * *").ConcurrencyPolicy(batchv1alpha1.ReplaceConcurrent).Obj())
	s.kubelet.SetFate(holdPodsOf(s.runName(0)))
	s.at(t, s.minute(0))
	waitFor(t, 30*time.Second, "run 0's pod to run", func() (bool, error) {
		pods := s.podsOf(t, s.runName(0))
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning, nil
	})
	s.at(t, s.minute(1))
	e := s.waitLedger(t, batchv1alpha1.EntryEvicted, s.runName(0))
	if e.Reason != runs.ReasonReplaced {
		t.Errorf("run 0 closed with reason %q, want %q", e.Reason, runs.ReasonReplaced)
	}
	s.waitGone(t, s.runName(0))
	s.waitCondition(t, batchv1alpha1.ConditionScheduling, batchv1alpha1.ReasonWaitingForRun, s.runName(0))
	if s.run(t, s.runName(1)) != nil {
		t.Fatal("run 1 started while the pod of the replaced run 0 was still running")
	}
	for _, pod := range s.podsOf(t, s.runName(0)) {
		if err := k8s.Delete(context.Background(), &pod); err != nil {
			t.Fatal(err)
		}
	}
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(1))
	s.checkOnce(t, s.runName(0), s.runName(1))
}

// TestScheduleTooManyActiveRuns: under Allow, runs that never finish (here
// at parallelism 0) pile up to runs.MaxOpen. The next due times do not
// start: they are reported (Scheduling TooManyActiveRuns, MissedRuns, an
// event) and, once a run finishes and scheduling resumes, counted missed.
func TestScheduleTooManyActiveRuns(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("pileup", ns).Schedule("* * * * *").Parallelism(0).Obj())
	var names []string
	for k := range runs.MaxOpen {
		s.at(t, s.minute(k))
		s.waitRun(t, s.runName(k)) // created before the clock moves on past its create window
		names = append(names, s.runName(k))
	}
	capped := runs.MaxOpen
	s.at(t, s.minute(capped))
	s.waitCondition(t, batchv1alpha1.ConditionScheduling, batchv1alpha1.ReasonTooManyActiveRuns,
		s.minute(capped).UTC().Format(time.RFC3339))
	s.waitCondition(t, batchv1alpha1.ConditionMissedRuns, batchv1alpha1.ReasonMissedSchedule, "1 scheduled time(s)")
	waitForEvent(t, ns, s.parent.Name, batchv1alpha1.ReasonTooManyActiveRuns)
	s.at(t, s.minute(capped+1))
	s.waitCondition(t, batchv1alpha1.ConditionMissedRuns, batchv1alpha1.ReasonMissedSchedule, "2 scheduled time(s)")
	p := s.getParent(t)
	if st, err := runs.Replay(&p.Status.Ledger); err != nil || len(st.Open) != capped || len(p.Status.ActiveRuns) != capped {
		t.Fatalf("at the cap: ledger %v (%v), %d active runs; want %d open", st, err, len(p.Status.ActiveRuns), capped)
	}

	// Run 0 finishes: the due time starts, the one before it counted missed.
	patch := []byte(`{"spec":{"parallelism":1}}`)
	if err := k8s.Patch(context.Background(), s.run(t, s.runName(0)), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(0))
	if e := s.waitLedger(t, batchv1alpha1.EntryScheduled, s.runName(capped+1)); e.Missed != 1 {
		t.Errorf("run %d scheduled with %d missed, want 1", capped+1, e.Missed)
	}
	s.waitRun(t, s.runName(capped+1))
	s.waitCondition(t, batchv1alpha1.ConditionScheduling, batchv1alpha1.ReasonScheduled, "")
	if got := s.getParent(t).Status.MissedRuns; got != 1 {
		t.Errorf("missedRuns = %d, want 1", got)
	}
	s.checkOnce(t, append(names, s.runName(capped+1))...)
}

// TestScheduleTooManyMissed: three hours of a per-minute schedule missed at
// once: the most recent time runs, the rest is counted and reported.
func TestScheduleTooManyMissed(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("missed", ns).Schedule("* * * * *").Obj())
	s.at(t, s.minute(180))
	e := s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(180))
	if e.Run != s.runName(180) {
		t.Fatalf("ran %s, want the most recent time %s", e.Run, s.runName(180))
	}
	s.waitCondition(t, batchv1alpha1.ConditionMissedRuns, batchv1alpha1.ReasonTooManyMissedTimes, "180 scheduled time(s)")
	waitForEvent(t, ns, "missed", batchv1alpha1.ReasonTooManyMissedTimes)
	if got := s.getParent(t).Status.MissedRuns; got != 180 {
		t.Errorf("missedRuns = %d, want 180", got)
	}
	// The next time is on time again.
	s.at(t, s.minute(181))
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, s.runName(181))
	s.waitCondition(t, batchv1alpha1.ConditionMissedRuns, batchv1alpha1.ReasonNoMissedRuns, s.runName(181))
	s.checkOnce(t, s.runName(180), s.runName(181))
}

// TestScheduleParentDeleted: once the parent is gone, its runs are released
// when deleted (as the garbage collector does), and nothing else is created.
func TestScheduleParentDeleted(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	s.create(t, testutil.MakeSafeJob("gone", ns).Schedule("* * * * *").Obj())
	s.kubelet.SetFate(holdPodsOf(s.runName(0)))
	s.at(t, s.minute(0))
	run := s.waitRun(t, s.runName(0))
	if err := k8s.Delete(context.Background(), s.parent); err != nil {
		t.Fatal(err)
	}
	s.clock.SetTime(s.minute(1).Add(time.Second))
	if err := k8s.Delete(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	s.waitGone(t, s.runName(0))
	s.checkOnce(t, s.runName(0))
}
