package controller

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// sweepFixture is a fake API server holding pods, none with the name
// label, and the SafeJobs that live, whose pod patches fail while refuse
// says so for the pod of that name.
func sweepFixture(t *testing.T, pods []*corev1.Pod, live []*batchv1alpha1.SafeJob,
	refuse func(name string) bool) (*SafeJobReconciler, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*corev1.Pod); ok && refuse(obj.GetName()) {
				return apierrors.NewServiceUnavailable("refused by the test")
			}
			return c.Patch(ctx, obj, p, opts...)
		},
	})
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	for _, sj := range live {
		b = b.WithObjects(sj)
	}
	c := b.Build()
	return &SafeJobReconciler{Client: c, APIReader: c, Options: Options{Namespaces: []string{"ns"}}}, c
}

func sweptSafeJobRef(name, uid string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob",
		Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
}

// deleting marks p as being deleted (held by its finalizer).
func deleting(p *corev1.Pod) *corev1.Pod {
	p.DeletionTimestamp = ptr.To(metav1.Now())
	return p
}

func sweptPodFor(ns, name string, owners []metav1.OwnerReference, finalizer bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("pod-" + name),
		OwnerReferences: owners}}
	if finalizer {
		p.Finalizers = []string{batchv1alpha1.LedgerFinalizer}
	}
	return p
}

// TestSweepSettlesOnlySafeJobPodsHoldingTheFinalizer checks what the look at
// start does to each unlabelled pod: a pod whose SafeJob lives is labelled;
// one whose SafeJob is gone, or was replaced by another of its name, has
// its finalizer released and stays unlabelled (the new SafeJob never
// counts it); a pod another kind of owner controls, though it carries the
// ledger finalizer, or none, is a stranger's and untouched, as is one whose
// finalizer is already released or one outside the operator's namespaces.
// A pod it cannot settle is noted, and the pods after it are settled.
func TestSweepSettlesOnlySafeJobPodsHoldingTheFinalizer(t *testing.T) {
	pods := []*corev1.Pod{
		sweptPodFor("ns", "a-refused-0-0", sweptSafeJobRef("a-refused", "uid-a"), true),
		sweptPodFor("ns", "closed-0-0", sweptSafeJobRef("closed", "uid-closed"), true),
		deleting(sweptPodFor("ns", "deleting-0-0", sweptSafeJobRef("closed", "uid-closed"), true)),
		deleting(sweptPodFor("ns", "deleting-gone-0-0", sweptSafeJobRef("gone", "uid-gone"), true)),
		sweptPodFor("ns", "replaced-0-0", sweptSafeJobRef("replaced", "uid-old"), true),
		sweptPodFor("ns", "gone-0-0", sweptSafeJobRef("gone", "uid-gone"), true),
		sweptPodFor("ns", "released-0-0", sweptSafeJobRef("closed", "uid-closed"), false),
		sweptPodFor("ns", "stranger", []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "closed",
			UID: "uid-job", Controller: ptr.To(true)}}, true),
		sweptPodFor("ns", "orphan", nil, true),
		sweptPodFor("elsewhere", "other-0-0", sweptSafeJobRef("other", "uid-other"), true),
	}
	sj := func(name, uid string) *batchv1alpha1.SafeJob {
		return &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
	}
	live := []*batchv1alpha1.SafeJob{sj("a-refused", "uid-a"), sj("closed", "uid-closed"), sj("replaced", "uid-new"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "other", UID: "uid-other"}}}
	r, c := sweepFixture(t, pods, live, func(name string) bool { return name == "a-refused-0-0" })
	failed := map[types.UID]sweptPod{}
	n, err := r.sweepUnlabeled(context.Background(), failed)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 || len(failed) != 1 || failed["pod-a-refused-0-0"].pod.name != "a-refused-0-0" {
		t.Errorf("settled %d pods, failed %v; want 5 settled and a-refused-0-0 failed", n, failed)
	}
	type want struct {
		label     string // "": none
		finalizer bool
	}
	wants := map[string]want{
		"a-refused-0-0": {"", true},
		"closed-0-0":    {nameLabel("closed"), true},
		// Being deleted, held by the finalizer alone: labelled while its
		// SafeJob lives (released once its outcome is recorded), released
		// once the SafeJob is gone (and then deleted).
		"deleting-0-0":      {nameLabel("closed"), true},
		"deleting-gone-0-0": {"", false},
		"replaced-0-0":      {"", false},
		"gone-0-0":          {"", false},
		"released-0-0":      {"", false},
		"stranger":          {"", true},
		"orphan":            {"", true},
		"other-0-0":         {"", true},
	}
	for _, p := range pods {
		got := &corev1.Pod{}
		err := c.Get(context.Background(), client.ObjectKeyFromObject(p), got)
		if apierrors.IsNotFound(err) && p.DeletionTimestamp != nil {
			got = &corev1.Pod{} // deleted once its last finalizer went
		} else if err != nil {
			t.Fatal(err)
		}
		w := wants[p.Name]
		label := got.Labels[batchv1alpha1.SafeJobNameLabel]
		holds := slices.Contains(got.Finalizers, batchv1alpha1.LedgerFinalizer)
		if label != w.label || holds != w.finalizer {
			t.Errorf("pod %s/%s: name label %q, holding the finalizer %v; want %q, %v",
				p.Namespace, p.Name, label, holds, w.label, w.finalizer)
		}
	}
}

// TestSweepRetriesUntilSettled checks that the look at start lists again
// after a list that failed, and keeps trying a pod it could not label
// until it is labelled, by itself, before it returns.
func TestSweepRetriesUntilSettled(t *testing.T) {
	defer func(was time.Duration) { sweepRetry = was }(sweepRetry)
	sweepRetry = 10 * time.Millisecond
	var refusals, listFailures atomic.Int32
	refusals.Store(2)
	listFailures.Store(1)
	pods := []*corev1.Pod{sweptPodFor("ns", "closed-0-0", sweptSafeJobRef("closed", "uid-closed"), true)}
	live := []*batchv1alpha1.SafeJob{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "closed", UID: "uid-closed"}}}
	r, c := sweepFixture(t, pods, live, func(string) bool { return refusals.Add(-1) >= 0 })
	lists := 0
	r.APIReader = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			if listFailures.Add(-1) >= 0 {
				return apierrors.NewServiceUnavailable("refused by the test")
			}
			return c.List(ctx, list, opts...)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.runSweep(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("the sweep ended with %v, its context %v; want it done by itself", err, ctx.Err())
	}
	got := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pods[0]), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[batchv1alpha1.SafeJobNameLabel] != nameLabel("closed") || refusals.Load() >= 0 || lists != 2 {
		t.Errorf("name label %q, %d refusals left, %d lists; want %q after both refusals, and one list after the one that failed",
			got.Labels[batchv1alpha1.SafeJobNameLabel], refusals.Load(), lists, nameLabel("closed"))
	}
}
