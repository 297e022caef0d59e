package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// dropNameLabel removes the SafeJob name label, which the operator's pod
// cache selects on, from a pod.
var dropNameLabel = client.RawPatch(types.MergePatchType,
	fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, batchv1alpha1.SafeJobNameLabel))

// TestPodNameLabelRemoved removes the SafeJob name label from its running
// pods, one while the operator runs and one while it is stopped. Without
// the label no event of a pod reaches the operator: its outcome would wait
// and its ledger finalizer would stay. The operator puts the label back (on
// the pod's watch event leaving its cache, and on the live read of a
// launch it cannot see after a restart), records both pods' success once
// each, and releases both finalizers.
func TestPodNameLabelRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, hold, false)
	// The default fence first: a live read of a launch it cannot see is
	// due only 30 s after the launch (LostGrace), so a label back within
	// half that came from the pod's event leaving the cache.
	stop := startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("unlabeled", h.ns).Completions(2).Parallelism(2).Obj()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	pods := waitRunningPods(t, h.ns, 2)
	first, second := &pods[0], &pods[1]
	want := first.Labels[batchv1alpha1.SafeJobNameLabel]

	if err := k8s.Patch(ctx, first, dropNameLabel); err != nil {
		t.Fatal(err)
	}
	waitLabel(t, first, want, ledger.DefaultFence.LostGrace()/2)

	stop()
	if err := k8s.Patch(ctx, second, dropNameLabel); err != nil {
		t.Fatal(err)
	}
	h.kubelet.SetFate(succeed)
	waitPodPhase(t, client.ObjectKeyFromObject(second), corev1.PodSucceeded)
	// Restarted, the operator never sees the pod's event: the live read
	// of its open launch finds it (due within shortFence's grace).
	startManager(t, h.ns, managerOptions{fence: shortFence})
	waitLabel(t, second, want, 30*time.Second)

	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 2 || got.Status.Failed != 0 {
		t.Fatalf("want Complete with 2 succeeded, got %d succeeded, %d failed, conditions %+v",
			got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
	}
	if _, holding, err := testutil.WaitForRelease(k8s, h.ns); err != nil {
		t.Fatalf("pods still holding the ledger finalizer: %v (%v)", holding, err)
	}
	creates := h.finalCheck(t, got)
	for _, pod := range []*corev1.Pod{first, second} {
		if creates[pod.Name] != 1 {
			t.Errorf("pod %s created %d times, want once", pod.Name, creates[pod.Name])
		}
	}
}

// TestUnlabeledClosedPodReleasedAfterRestart removes the name label from a
// pod whose success is recorded but whose ledger finalizer is not released
// yet (every release refused), while no operator runs. No live read looks
// at a closed launch, and no event of the pod reaches the cache: only the
// look for unlabelled pods a process makes when it starts finds it. The
// restarted operator labels it and releases its finalizer, and the
// SafeJob's one success stays one.
func TestUnlabeledClosedPodReleasedAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, succeed, false)
	rc := &refusingReleases{}
	rc.refuse.Store(true)
	stop := startManager(t, h.ns, managerOptions{wrapClient: func(c client.Client, _ context.CancelFunc) client.Client {
		rc.Client = c
		return rc
	}})
	sj := testutil.MakeSafeJob("unlabeled-closed", h.ns).Obj()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 {
		t.Fatalf("want Complete with 1 succeeded, got %d succeeded, %+v", got.Status.Succeeded, got.Status.Conditions)
	}
	waitFor(t, 30*time.Second, "a finalizer release refused", func() (bool, error) { return rc.refused.Load() > 0, nil })
	stop()

	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: jobs.PodName(sj.Name, 0, 0)}, pod); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
		t.Fatalf("pod %s released while every release was refused: finalizers %v", pod.Name, pod.Finalizers)
	}
	want := pod.Labels[batchv1alpha1.SafeJobNameLabel]
	if err := k8s.Patch(ctx, pod, dropNameLabel); err != nil {
		t.Fatal(err)
	}
	startManager(t, h.ns, managerOptions{})
	waitLabel(t, pod, want, 30*time.Second)
	if _, holding, err := testutil.WaitForRelease(k8s, h.ns); err != nil {
		t.Fatalf("pods still holding the ledger finalizer: %v (%v)", holding, err)
	}
	final := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sj), final); err != nil {
		t.Fatal(err)
	}
	if final.Status.Succeeded != 1 {
		t.Errorf("%d succeeded after the restart, want 1", final.Status.Succeeded)
	}
	h.finalCheck(t, final)
}

// waitLabel waits up to timeout until the pod (the same one: its UID)
// carries the SafeJob name label with this value.
func waitLabel(t *testing.T, pod *corev1.Pod, want string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "the name label back on "+pod.Name, func() (bool, error) {
		got := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
			return false, err
		}
		if got.UID != pod.UID {
			return false, fmt.Errorf("pod %s replaced: uid %s, was %s", pod.Name, got.UID, pod.UID)
		}
		return got.Labels[batchv1alpha1.SafeJobNameLabel] == want, nil
	})
}

// TestPodOrphanedByHand removes the controller reference from a running pod
// of a SafeJob that lives on. The pod is a stranger's from then on: its
// launch is recorded Lost (NameTaken, never counted), its index runs again
// under the next attempt, and its ledger finalizer, which no outcome will
// ever release, is released as batch/v1 releases an orphan's. The SafeJob
// completes with one success.
func TestPodOrphanedByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{fence: ownershipFence})
	sj := testutil.MakeSafeJob("orphaned-by-hand", h.ns).BackoffLimit(0).Obj()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	first := &corev1.Pod{}
	waitFor(t, 30*time.Second, "a running pod", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: h.ns, Name: jobs.PodName(sj.Name, 0, 0)}, first)
		return err == nil && first.Status.Phase == corev1.PodRunning, client.IgnoreNotFound(err)
	})
	if err := k8s.Patch(ctx, first, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`))); err != nil {
		t.Fatal(err)
	}
	h.kubelet.SetFate(func(p *corev1.Pod) testutil.Fate { return testutil.Fate{Hold: p.UID == first.UID} })
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 || got.Status.Failed != 0 {
		t.Fatalf("want Complete with 1 succeeded, got %d succeeded, %d failed, conditions %+v",
			got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
	}
	if n := countEntries(got, batchv1alpha1.EntryLost); n != 1 {
		t.Errorf("%d Lost entries, want 1 (the pod orphaned)", n)
	}
	if _, holding, err := testutil.WaitForRelease(k8s, h.ns); err != nil {
		t.Fatalf("pods still holding the ledger finalizer: %v (%v)", holding, err)
	}
	after := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(first), after); err != nil {
		t.Fatal(err)
	}
	if after.UID != first.UID || after.DeletionTimestamp != nil || after.Status.Phase != corev1.PodRunning {
		t.Errorf("the orphaned pod was deleted or replaced: uid %s (was %s), deleting %v, phase %s",
			after.UID, first.UID, after.DeletionTimestamp != nil, after.Status.Phase)
	}
}

// waitRunningPods waits until the namespace holds n pods, all running, and
// returns them.
func waitRunningPods(t *testing.T, ns string, n int) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	waitFor(t, 30*time.Second, fmt.Sprintf("%d running pods", n), func() (bool, error) {
		if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return false, err
		}
		running := 0
		for i := range pods.Items {
			if pods.Items[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == n && len(pods.Items) == n, nil
	})
	return pods.Items
}
