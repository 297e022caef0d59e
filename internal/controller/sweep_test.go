package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TestSweepLabelsOnlySafeJobPodsHoldingTheFinalizer checks which pods the
// look at start labels: only those a SafeJob controls that hold the ledger
// finalizer without the name label, in the namespaces the operator
// watches. A pod another kind of owner controls, though it carries the
// ledger finalizer, is a stranger's and untouched, as is one whose
// finalizer is already released.
func TestSweepLabelsOnlySafeJobPodsHoldingTheFinalizer(t *testing.T) {
	sjRef := func(name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob",
			Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true)}}
	}
	pod := func(ns, name string, owners []metav1.OwnerReference, finalizer bool, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("pod-" + name),
			OwnerReferences: owners, Labels: labels}}
		if finalizer {
			p.Finalizers = []string{batchv1alpha1.LedgerFinalizer}
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("ns", "closed-0-0", sjRef("closed"), true, nil),
		pod("ns", "released-0-0", sjRef("released"), false, nil),
		pod("ns", "stranger", []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "closed",
			UID: "uid-job", Controller: ptr.To(true)}}, true, nil),
		pod("ns", "orphan", nil, true, nil),
		pod("elsewhere", "other-0-0", sjRef("other"), true, nil),
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	c := b.Build()
	r := &SafeJobReconciler{Client: c, APIReader: c, Namespaces: []string{"ns"}}
	n, err := r.sweepUnlabeled(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("labelled %d pods, want 1", n)
	}
	want := map[string]string{"closed-0-0": nameLabel("closed")}
	for _, p := range pods {
		got := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		label, has := got.Labels[batchv1alpha1.SafeJobNameLabel]
		if w, ok := want[p.Name]; ok != has || label != w {
			t.Errorf("pod %s/%s: name label %q (set: %v), want %q (set: %v)", p.Namespace, p.Name, label, has, w, ok)
		}
	}
}
