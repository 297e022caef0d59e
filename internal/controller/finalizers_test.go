package controller

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TestReleaseAllLeavesSuccessorsPods: a cache behind the API server (or a
// second operator process) shows SafeJob "etl" deleting after it is gone
// and another SafeJob of that name runs. Releasing what the deleted one
// held must not touch the pods of the one that lives: only the pods it
// created lose the ledger finalizer, and a pod only labelled with the live
// one's UID (its controller reference removed by hand) is released too.
func TestReleaseAllLeavesSuccessorsPods(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, batchv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	safeJob := func(uid types.UID) *batchv1alpha1.SafeJob {
		return &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "ns", UID: uid}}
	}
	podOf := func(sj *batchv1alpha1.SafeJob, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name),
			Labels:          map[string]string{batchv1alpha1.SafeJobNameLabel: "etl"},
			Finalizers:      []string{batchv1alpha1.LedgerFinalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}}}
	}
	gone, successor := safeJob("old"), safeJob("new")
	// A pod the successor created whose controller reference was removed
	// by hand: a stranger's to it, whose outcome it never records.
	unowned := podOf(successor, "etl-0-2")
	unowned.OwnerReferences = nil
	unowned.Labels[batchv1alpha1.ControllerUIDLabel] = string(successor.UID)
	deleting := gone.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	deleting.Finalizers = []string{"example.com/hold"}
	for _, tc := range []struct {
		name string
		live *batchv1alpha1.SafeJob // nil: none of that name
		kept []string               // pods that keep the ledger finalizer
	}{
		{"a successor lives", successor, []string{"etl-0-1"}},
		{"still deleting", deleting, nil},
		{"gone, no successor", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := fake.NewClientBuilder().WithScheme(scheme).
				WithObjects(deleting.DeepCopy(), podOf(gone, "etl-0-0"), podOf(successor, "etl-0-1"), unowned.DeepCopy()).Build()
			live := fake.NewClientBuilder().WithScheme(scheme)
			if tc.live != nil {
				live = live.WithObjects(tc.live.DeepCopy())
			}
			r := &SafeJobReconciler{Client: cached, APIReader: live.Build(), tracker: newTracker()}
			if err := r.releaseDeleted(context.Background(), deleting); err != nil {
				t.Fatal(err)
			}
			var pods corev1.PodList
			if err := cached.List(context.Background(), &pods, client.InNamespace("ns")); err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, pod := range pods.Items {
				if slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
					kept = append(kept, pod.Name)
				}
			}
			if !slices.Equal(kept, tc.kept) {
				t.Errorf("pods keeping the ledger finalizer: %v, want %v", kept, tc.kept)
			}
		})
	}
}

// TestRelabelNoted checks that the pods noted as having left the cache get
// the SafeJob name label back, as the pod was created with it, and that a
// patch that fails leaves the pod noted for the next reconcile.
func TestRelabelNoted(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "etl"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl-0-0", Namespace: "ns", UID: "p1",
		Labels: map[string]string{"app": "x"}, Finalizers: []string{batchv1alpha1.LedgerFinalizer}}}
	for _, tc := range []struct {
		name      string
		refuse    error
		wantLabel string
		wantNoted int
	}{
		{"put back", nil, "etl", 0},
		{"refused, tried again", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "etl-0-0", errors.New("webhook")), "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod.DeepCopy()).
				WithInterceptorFuncs(interceptor.Funcs{
					Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
						if tc.refuse != nil {
							return tc.refuse
						}
						return c.Patch(ctx, obj, patch, opts...)
					},
				}).Build()
			r := &SafeJobReconciler{Client: c, tracker: newTracker()}
			r.tracker.sawUnlabeled(key, unlabeledPod{name: pod.Name, uid: pod.UID})
			if err := r.relabelNoted(context.Background(), key); (err != nil) != (tc.refuse != nil) {
				t.Fatalf("relabelNoted: %v", err)
			}
			got := &corev1.Pod{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if got.Labels[batchv1alpha1.SafeJobNameLabel] != tc.wantLabel || got.Labels["app"] != "x" {
				t.Errorf("labels %v, want the name label %q beside the others", got.Labels, tc.wantLabel)
			}
			if noted := r.tracker.takeUnlabeled(key); len(noted) != tc.wantNoted {
				t.Errorf("still noted: %v, want %d", noted, tc.wantNoted)
			}
		})
	}
}

// TestPodsOfAnotherVersionStayOwned: a pod whose controller reference names
// SafeJob under another version of the group (created by a build that spoke
// it) is its SafeJob's, not a stray: releasing orphans of that name leaves
// its finalizer in place until its outcome is recorded.
func TestPodsOfAnotherVersionStayOwned(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, batchv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "ns", UID: "live"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl-0-0", Namespace: "ns", UID: "p0",
		Labels:     map[string]string{batchv1alpha1.SafeJobNameLabel: "etl"},
		Finalizers: []string{batchv1alpha1.LedgerFinalizer},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj,
			schema.GroupVersionKind{Group: batchv1alpha1.GroupVersion.Group, Version: "v1beta1", Kind: "SafeJob"})}}}
	if ownerless(pod) {
		t.Fatal("a pod controlled by a SafeJob under another version is ownerless")
	}
	if got := creatorUID(pod); got != sj.UID {
		t.Errorf("creatorUID = %q, want %q", got, sj.UID)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sj.DeepCopy(), pod.DeepCopy()).Build()
	r := &SafeJobReconciler{Client: c, APIReader: c, tracker: newTracker()}
	if err := r.releasePods(context.Background(), types.NamespacedName{Namespace: "ns", Name: "etl"}, allPodsBut(sj.UID)); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Finalizers, batchv1alpha1.LedgerFinalizer) {
		t.Error("the ledger finalizer of a live SafeJob's pod was released")
	}
}
