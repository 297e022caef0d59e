package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

func TestIndexPodOwner(t *testing.T) {
	owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{
		APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: "a", UID: "u", Controller: ptr.To(true)}}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "batch/v1", Kind: "Job", Name: "a", UID: "u", Controller: ptr.To(true)}}}}
	if diff := cmp.Diff([]string{"u"}, indexController(owned)); diff != "" {
		t.Errorf("owned (-want,+got):\n%s", diff)
	}
	if got := indexController(other); got != nil {
		t.Errorf("pod of a Job indexed as %v", got)
	}
}

func TestIndexActivePodOwner(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-1"}}
	pod := func(phase corev1.PodPhase, finalizer bool) *corev1.Pod {
		p := newPod(sj, jobs.PodRef{Name: "a-0-0"})
		p.Status.Phase = phase
		if !finalizer {
			p.Finalizers = nil
		}
		return p
	}
	cases := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"running", pod(corev1.PodRunning, true), []string{"uid-1"}},
		{"running, finalizer stripped", pod(corev1.PodRunning, false), []string{"uid-1"}},
		{"succeeded, not yet released", pod(corev1.PodSucceeded, true), []string{"uid-1"}},
		{"failed, not yet released", pod(corev1.PodFailed, true), []string{"uid-1"}},
		{"succeeded and released", pod(corev1.PodSucceeded, false), nil},
		{"failed and released", pod(corev1.PodFailed, false), nil},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, indexActivePodController(tc.pod)); diff != "" {
			t.Errorf("%s: index (-want,+got):\n%s", tc.name, diff)
		}
	}
	other := pod(corev1.PodRunning, true)
	other.OwnerReferences = nil
	if got := indexActivePodController(other); got != nil {
		t.Errorf("a pod no SafeJob controls is indexed under %v", got)
	}
}

// TestPodsOf checks the pods a reconcile reads: its SafeJob's pods in its
// namespace that can still change its decision, not a settled pod, not
// another SafeJob's, and not a pod of another namespace that names the
// SafeJob's UID as its controller.
func TestPodsOf(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-1"}}
	other := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "uid-2"}}
	running := newPod(sj, jobs.PodRef{Name: "a-0-0"})
	ended := newPod(sj, jobs.PodRef{Name: "a-1-0"})
	ended.Status.Phase = corev1.PodSucceeded
	settledPod := newPod(sj, jobs.PodRef{Name: "a-2-0"})
	settledPod.Status.Phase, settledPod.Finalizers = corev1.PodSucceeded, nil
	elsewhere := newPod(sj, jobs.PodRef{Name: "a-3-0"})
	elsewhere.Namespace = "stranger"
	others := newPod(other, jobs.PodRef{Name: "b-0-0"})
	r := &SafeJobReconciler{pods: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{activePodsIndex: indexActivePods})}
	for _, p := range []*corev1.Pod{running, ended, settledPod, elsewhere, others} {
		if err := r.pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := r.podsOf(context.Background(), sj.Namespace, sj.UID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"ns/a-0-0", "ns/a-1-0"}, names); diff != "" {
		t.Errorf("pods of %s (-want,+got):\n%s", sj.Name, diff)
	}
}

// TestStripForCache: a cached SafeJob or pod keeps every annotation but
// kubectl apply's copy of the object, and no managedFields.
func TestStripForCache(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "a",
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: `{"kind":"SafeJob"}`, "team": "batch"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := stripForCache(sj)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*batchv1alpha1.SafeJob)
	if diff := cmp.Diff(map[string]string{"team": "batch"}, got.Annotations); diff != "" {
		t.Errorf("annotations (-want,+got):\n%s", diff)
	}
	if got.ManagedFields != nil {
		t.Errorf("managedFields kept: %v", got.ManagedFields)
	}
	u := &unstructured.Unstructured{}
	u.SetAnnotations(map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "team": "batch"})
	if _, err := stripForCache(u); err != nil || len(u.GetAnnotations()) != 1 {
		t.Errorf("unstructured object: annotations %v, %v", u.GetAnnotations(), err)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/a", Obj: sj}
	if out, err := stripForCache(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone came back as %v, %v", out, err)
	}
}
