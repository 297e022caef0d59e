package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/release"
	"github.com/safejob/safejob/test/testutil"
)

func TestRunsToComplete(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		sj                   *batchv1alpha1.SafeJob
		wantCompletedIndexes string
	}{
		"nonindexed c5 p2": {sj: testutil.MakeSafeJob("plain", "").Completions(5).Parallelism(2).Obj()},
		"indexed c8 p3": {sj: testutil.MakeSafeJob("indexed", "").Completions(8).Parallelism(3).Indexed().Obj(),
			wantCompletedIndexes: "0-7"},
		// The operator caches SafeJobs without kubectl apply's copy of the
		// object; every write it makes keeps the server's.
		"applied by kubectl": {sj: applied(testutil.MakeSafeJob("applied", "").Completions(3).Parallelism(2).Obj())},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, false)
			startManager(t, h.ns, managerOptions{})
			sj := tc.sj
			sj.Namespace = h.ns
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatal(err)
			}
			got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
			if !conditionTrue(got, batchv1alpha1.ConditionComplete) {
				t.Fatalf("want Complete, got conditions %+v", got.Status.Conditions)
			}
			if got.Status.Succeeded != *sj.Spec.Completions {
				t.Errorf("succeeded %d, want %d", got.Status.Succeeded, *sj.Spec.Completions)
			}
			if diff := cmp.Diff(tc.wantCompletedIndexes, got.Status.CompletedIndexes); diff != "" {
				t.Errorf("completedIndexes (-want,+got):\n%s", diff)
			}
			if n := h.kubelet.MaxActive(); n > int(*sj.Spec.Parallelism) {
				t.Errorf("%d pods active at once, parallelism %d", n, *sj.Spec.Parallelism)
			}
			creates := h.finalCheck(t, got)
			if len(creates) != int(*sj.Spec.Completions) {
				t.Errorf("%d pods created, want %d", len(creates), *sj.Spec.Completions)
			}
			if diff := cmp.Diff(sj.Annotations, got.Annotations); diff != "" {
				t.Errorf("annotations on the server (-created,+now):\n%s", diff)
			}
		})
	}
}

// applied gives a SafeJob what `kubectl apply` leaves on it: its applied
// configuration in an annotation, beside the user's own.
func applied(sj *batchv1alpha1.SafeJob) *batchv1alpha1.SafeJob {
	raw, err := json.Marshal(sj)
	if err != nil {
		panic(err)
	}
	sj.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: string(raw), "team": "batch"}
	return sj
}

// TestWorkQueue: without completions a SafeJob is a batch/v1 work queue.
// Parallelism pods run; once one succeeds no pod starts and none is
// stopped, whatever parallelism says; it completes once every pod has
// ended, counting each success.
func TestWorkQueue(t *testing.T) {
	t.Parallel()
	first := func(p *corev1.Pod) testutil.Fate {
		if p.Labels[batchv1alpha1.CompletionIndexLabel] == "0" {
			return testutil.Fate{}
		}
		return testutil.Fate{Hold: true}
	}
	h := newHarness(t, first, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("wq", h.ns).WorkQueue().Parallelism(3).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	got := &batchv1alpha1.SafeJob{}
	waitFor(t, time.Minute, "the first success recorded", func() (bool, error) {
		err := k8s.Get(context.Background(), key, got)
		return err == nil && got.Status.Succeeded == 1, err
	})
	// The write that recorded the success is the one that would have
	// launched a replacement: nothing was launched, nothing stopped.
	if got.Status.Active != 2 || got.Status.Completions != "1/1 of 3" || conditionTrue(got, batchv1alpha1.ConditionComplete) {
		t.Fatalf("after the first success: active %d, completions %q, conditions %+v; want 2 running, \"1/1 of 3\", not complete",
			got.Status.Active, got.Status.Completions, got.Status.Conditions)
	}
	checkNoLaunchOrStop(t, got)
	// A lower parallelism after a success stops nothing (batch/v1).
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Parallelism = ptr.To[int32](1)
	if err := k8s.Patch(context.Background(), got, patch); err != nil {
		t.Fatal(err)
	}
	h.kubelet.SetFate(func(p *corev1.Pod) testutil.Fate {
		if p.Labels[batchv1alpha1.CompletionIndexLabel] == "2" {
			return testutil.Fate{Fail: true, ExitCode: 1}
		}
		return testutil.Fate{}
	})
	got = waitFinished(t, key, time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 2 || got.Status.Failed != 1 {
		t.Fatalf("want Complete with 2 succeeded and 1 failed, got %d/%d, conditions %+v",
			got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
	}
	if creates := h.finalCheck(t, got); len(creates) != 3 {
		t.Errorf("%d pods created, want 3", len(creates))
	}
}

// TestManagedByAnotherController: a SafeJob whose managedBy names another
// controller is left alone (no pod, no status write), as the batch/v1 Job
// controller leaves such Jobs; one managed by SafeJob by name runs.
func TestManagedByAnotherController(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	other := testutil.MakeSafeJob("other", h.ns).ManagedBy("example.com/other-controller").Obj()
	ours := testutil.MakeSafeJob("ours", h.ns).ManagedBy(batchv1alpha1.ControllerName).Obj()
	for _, sj := range []*batchv1alpha1.SafeJob{other, ours} {
		if err := k8s.Create(context.Background(), sj); err != nil {
			t.Fatal(err)
		}
	}
	if got := waitFinished(t, client.ObjectKeyFromObject(ours), time.Minute); !conditionTrue(got, batchv1alpha1.ConditionComplete) {
		t.Fatalf("the SafeJob managed by SafeJob by name: conditions %+v, want Complete", got.Status.Conditions)
	}
	got := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(other), got); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(h.ns),
		client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: "other"}); err != nil {
		t.Fatal(err)
	}
	if got.Status.Ledger.Seq != 0 || len(got.Status.Conditions) != 0 || len(pods.Items) != 0 {
		t.Errorf("the SafeJob managed elsewhere was touched: ledger seq %d, conditions %+v, %d pods",
			got.Status.Ledger.Seq, got.Status.Conditions, len(pods.Items))
	}
}

// checkNoLaunchOrStop fails on a replacement launch or a Stopping entry in
// the listed ledger.
func checkNoLaunchOrStop(t *testing.T, sj *batchv1alpha1.SafeJob) {
	t.Helper()
	for _, e := range sj.Status.Ledger.Entries {
		if e.Type == batchv1alpha1.EntryStopping || (e.Type == batchv1alpha1.EntryLaunched && e.Attempt > 0) {
			t.Errorf("after the first success the ledger holds %s %s", e.Type, e.Pod)
		}
	}
}

// TestReleaseKeepsOtherFinalizers: the operator removes its ledger
// finalizer from each pod it recorded and leaves another's in place, the
// other's listed first so that the ledger's is not where it was created.
func TestReleaseKeepsOtherFinalizers(t *testing.T) {
	t.Parallel()
	const other = "example.com/keep"
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	ctx := context.Background()
	sj := testutil.MakeSafeJob("keep", h.ns).Completions(2).Parallelism(2).Obj()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	running := waitRunningPods(t, h.ns, 2)
	both := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"finalizers":[%q,%q]}}`,
		other, batchv1alpha1.LedgerFinalizer))
	for i := range running {
		pod := &running[i]
		if err := k8s.Patch(ctx, pod, both); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // the namespace's pods can go once the test is done
			_ = k8s.Patch(context.Background(), pod, dropFinalizers)
		})
	}
	h.kubelet.SetFate(succeed)
	if got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute); !conditionTrue(got, batchv1alpha1.ConditionComplete) {
		t.Fatalf("want Complete, got conditions %+v", got.Status.Conditions)
	}
	var pods corev1.PodList
	waitFor(t, 30*time.Second, "the ledger finalizer released from both pods", func() (bool, error) {
		if err := k8s.List(ctx, &pods, client.InNamespace(h.ns)); err != nil {
			return false, err
		}
		for _, pod := range pods.Items {
			if slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
				return false, nil
			}
		}
		return len(pods.Items) == 2, nil
	})
	for _, pod := range pods.Items {
		if !slices.Equal(pod.Finalizers, []string{other}) {
			t.Errorf("pod %s has finalizers %v, want only %s", pod.Name, pod.Finalizers, other)
		}
	}
}

// TestReleaseOnlyUnderItsUID checks the pod writes the operator sends by
// name against a pod that took the name of the one it read: the release
// patch, carrying the UID of the pod read, and a delete under that UID are
// refused, and the new pod keeps its finalizers; the release of the pod
// itself removes the ledger finalizer alone. The operator takes the refusal
// of its release for a pod gone (it looks for an invalid metadata.uid).
func TestReleaseOnlyUnderItsUID(t *testing.T) {
	t.Parallel()
	const other = "example.com/keep"
	ctx := context.Background()
	ns := newNamespace(t)
	newPod := func() *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken",
			Finalizers: []string{other, batchv1alpha1.LedgerFinalizer}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := k8s.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // the namespace's pods can go once the test is done
			_ = k8s.Patch(context.Background(), pod, dropFinalizers)
		})
		return pod
	}
	read := newPod()
	if err := k8s.Patch(ctx, read, dropFinalizers); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, read, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the pod read gone", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(read), &corev1.Pod{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	taken := newPod()

	err := k8s.Patch(ctx, taken.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, release.PodPatch(read.UID)))
	if !apierrors.IsInvalid(err) || !hasCause(err, "metadata.uid") {
		t.Errorf("release of the pod read sent to the pod that took its name: got %v, want invalid metadata.uid", err)
	}
	err = k8s.Delete(ctx, taken.DeepCopy(), client.Preconditions{UID: &read.UID})
	if !apierrors.IsConflict(err) {
		t.Errorf("delete under the UID of the pod read: got %v, want a conflict", err)
	}
	got := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(taken), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != taken.UID || got.DeletionTimestamp != nil || !slices.Equal(got.Finalizers, taken.Finalizers) {
		t.Errorf("the pod that took the name was changed: uid %s (was %s), deleted %v, finalizers %v (were %v)",
			got.UID, taken.UID, got.DeletionTimestamp, got.Finalizers, taken.Finalizers)
	}

	if err := k8s.Patch(ctx, got, client.RawPatch(types.StrategicMergePatchType, release.PodPatch(taken.UID))); err != nil {
		t.Fatalf("release of the pod under its own UID: %v", err)
	}
	if !slices.Equal(got.Finalizers, []string{other}) {
		t.Errorf("after its release the pod has finalizers %v, want only %s", got.Finalizers, other)
	}
}

// dropFinalizers empties an object's finalizers, whoever's they are.
var dropFinalizers = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))

// hasCause reports whether an API error names field among its causes.
func hasCause(err error, field string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	return slices.ContainsFunc(status.Status().Details.Causes, func(c metav1.StatusCause) bool { return c.Field == field })
}
