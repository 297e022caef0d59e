package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// shortFence keeps the ownership tests short: a name held by a stranger is
// recorded Lost LostGrace (here 9s) after its launch. The rule is the
// operator's; only the durations differ.
var shortFence = ledger.Fence{CreateWindow: 2 * time.Second, CreateTimeout: 2 * time.Second}

// ownershipFence is shortFence with room for a loaded machine, for tests
// that count launches: a launch's time has second precision and its pod is
// created only once the commit is seen, so shortFence's window can close
// before the create and the launch goes Lost for want of time, not for
// the name. A name held by a stranger is recorded Lost after 12s.
var ownershipFence = ledger.Fence{CreateWindow: 5 * time.Second, CreateTimeout: 2 * time.Second}

// strangerPod creates a pod that no SafeJob controls under a name a SafeJob
// will launch, labelled as a SafeJob's pod would be (as one left behind by
// an earlier SafeJob of the same name after an orphaning delete).
func strangerPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			batchv1alpha1.SafeJobNameLabel: "etl", batchv1alpha1.CompletionIndexLabel: "0", batchv1alpha1.AttemptLabel: "0",
			batchv1alpha1.ControllerUIDLabel: "0a1b2c3d-old-safejob",
		}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatalf("creating stranger pod %s: %v", name, err)
	}
	return pod
}

// waitPodPhase waits for a pod to reach a phase and returns it.
func waitPodPhase(t *testing.T, key client.ObjectKey, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	waitFor(t, 30*time.Second, "pod "+key.Name+" "+string(phase), func() (bool, error) {
		err := k8s.Get(context.Background(), key, pod)
		return err == nil && pod.Status.Phase == phase, client.IgnoreNotFound(err)
	})
	return pod
}

// TestStrangerPodNeverCounts: a pod the SafeJob does not control holds the
// name of its first launch (here a Succeeded one, as an orphaned pod of an
// earlier SafeJob of the same name is). It is never counted, deleted or
// touched: the launch is recorded Lost (NameTaken) and the index runs again
// under a new name. A stranger that never finishes does not wedge the
// SafeJob either.
func TestStrangerPodNeverCounts(t *testing.T) {
	t.Parallel()
	holdStrangers := func(p *corev1.Pod) testutil.Fate {
		return testutil.Fate{Hold: metav1.GetControllerOf(p) == nil && p.Name == jobs.PodName("etl-held", 0, 0)}
	}
	h := newHarness(t, holdStrangers, false)
	done := strangerPod(t, h.ns, jobs.PodName("etl", 0, 0))
	running := strangerPod(t, h.ns, jobs.PodName("etl-held", 0, 0))
	done = waitPodPhase(t, client.ObjectKeyFromObject(done), corev1.PodSucceeded)
	running = waitPodPhase(t, client.ObjectKeyFromObject(running), corev1.PodRunning)
	startManager(t, h.ns, managerOptions{fence: ownershipFence})

	for _, name := range []string{"etl", "etl-held"} {
		sj := testutil.MakeSafeJob(name, h.ns).BackoffLimit(0).Obj()
		if err := k8s.Create(context.Background(), sj); err != nil {
			t.Fatal(err)
		}
		got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
		if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 || got.Status.Failed != 0 {
			t.Fatalf("%s: want Complete with 1 succeeded and 0 failed, got %d/%d and %+v",
				name, got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
		}
		creates := h.finalCheck(t, got)
		taken, own := jobs.PodName(name, 0, 0), jobs.PodName(name, 0, 1)
		// The audit log counts successful creates: the stranger's own, and
		// the SafeJob's under the next name.
		if creates[own] != 1 || creates[taken] != 1 {
			t.Errorf("%s: creates %v, want %s and %s (the stranger's) created once each", name, creates, own, taken)
		}
		if n := countEntries(got, batchv1alpha1.EntryLost); n != 1 {
			t.Errorf("%s: %d Lost entries, want 1 (the name taken)", name, n)
		}
		waitForEvent(t, h.ns, name, "PodLost")
	}
	for _, before := range []*corev1.Pod{done, running} {
		after := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(before), after); err != nil {
			t.Fatalf("stranger pod %s: %v", before.Name, err)
		}
		if after.ResourceVersion != before.ResourceVersion || after.DeletionTimestamp != nil || len(after.Finalizers) != 0 {
			t.Errorf("stranger pod %s was touched: resourceVersion %s -> %s, deleting %v, finalizers %v",
				before.Name, before.ResourceVersion, after.ResourceVersion, after.DeletionTimestamp != nil, after.Finalizers)
		}
	}
}

// TestQuickResumeNeverChargesStoppedPods: a suspended SafeJob is resumed
// while its stopped pod is still terminating, and that pod then exits 1.
// batch/v1 never counts a pod it stops; neither does SafeJob: with
// backoffLimit 0 the SafeJob must not fail, and it completes with failed 0.
func TestQuickResumeNeverChargesStoppedPods(t *testing.T) {
	t.Parallel()
	terminating := testutil.Fate{Hold: true, OnDelete: &testutil.Fate{Hold: true}}
	h := newHarness(t, func(*corev1.Pod) testutil.Fate { return terminating }, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("quick", h.ns).BackoffLimit(0).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	first := jobs.PodName("quick", 0, 0)
	waitPodPhase(t, client.ObjectKey{Namespace: h.ns, Name: first}, corev1.PodRunning)
	setSuspend(t, key, true)
	waitFor(t, 30*time.Second, "the stopped pod to be terminating", func() (bool, error) {
		pod := &corev1.Pod{}
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: first}, pod)
		return err == nil && pod.DeletionTimestamp != nil, err
	})
	setSuspend(t, key, false)
	waitFor(t, 30*time.Second, "the resume to be recorded", func() (bool, error) {
		got := &batchv1alpha1.SafeJob{}
		err := k8s.Get(context.Background(), key, got)
		c := condition(got, batchv1alpha1.ConditionSuspended)
		return err == nil && c != nil && c.Status == metav1.ConditionFalse, err
	})
	// The stopped pod exits 1; the next pod succeeds.
	h.kubelet.SetFate(func(p *corev1.Pod) testutil.Fate {
		return testutil.Fate{OnDelete: &testutil.Fate{Fail: true, ExitCode: 1}}
	})
	got := waitFinished(t, key, time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Failed != 0 || got.Status.Succeeded != 1 {
		t.Fatalf("want Complete with succeeded 1 and failed 0, got %d/%d and %+v",
			got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
	}
	if n := countEntries(got, batchv1alpha1.EntryEvicted); n != 1 {
		t.Errorf("%d Evicted entries, want 1 (the stopped pod)", n)
	}
	h.finalCheck(t, got)
}

// TestFailingSafeJobCountsStoppedPods: pods deleted because the SafeJob is
// failing count as failed, as batch/v1 counts them in status.failed: here
// index 0 fails with backoffLimitPerIndex 0 and maxFailedIndexes 0, and the
// three other running pods are stopped.
func TestFailingSafeJobCountsStoppedPods(t *testing.T) {
	t.Parallel()
	// Every pod runs until all four are ready; then index 0 fails.
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("maxfailed", h.ns).Indexed().Completions(4).Parallelism(4).Obj()
	sj.Spec.BackoffLimitPerIndex = ptr.To[int32](0)
	sj.Spec.MaxFailedIndexes = ptr.To[int32](0)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	waitFor(t, 30*time.Second, "four ready pods", func() (bool, error) {
		got := &batchv1alpha1.SafeJob{}
		err := k8s.Get(context.Background(), key, got)
		return err == nil && got.Status.Ready == 4, err
	})
	h.kubelet.SetFate(func(p *corev1.Pod) testutil.Fate {
		if p.Labels[batchv1alpha1.CompletionIndexLabel] == "0" {
			return testutil.Fate{Fail: true, ExitCode: 1}
		}
		return testutil.Fate{Hold: true}
	})
	got := waitFinished(t, key, time.Minute)
	c := condition(got, batchv1alpha1.ConditionFailed)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != batchv1alpha1.ReasonMaxFailedIndexesExceeded {
		t.Fatalf("want Failed with MaxFailedIndexesExceeded, got %+v", got.Status.Conditions)
	}
	if got.Status.Failed != 4 || (got.Status.Active != 0 || openLaunches(t, got) != 0) {
		t.Errorf("failed %d active %d, want 4 and 0 (the failed pod and the three stopped with it)", got.Status.Failed, got.Status.Active)
	}
	h.finalCheck(t, got)
}
