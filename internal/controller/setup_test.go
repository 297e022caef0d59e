package controller

import (
	"context"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

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

// TestStripDefault: a cached Workload keeps what the operator reads of its
// pod sets (names, counts, topology requests), its metadata and status, but
// no pod template and no managedFields; any other object only loses its
// managedFields.
func TestStripDefault(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	topology := &kueue.PodSetTopologyRequest{Required: ptr.To("rack")}
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "batch"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kueue"}}},
		Spec: kueue.WorkloadSpec{QueueName: "q", PodSets: []kueue.PodSet{
			{Name: kueue.DefaultPodSetName, Count: 4, MinCount: ptr.To[int32](2), Template: tmpl, TopologyRequest: topology},
			{Name: "other", Count: 1, Template: tmpl}}},
		Status: kueue.WorkloadStatus{Conditions: []metav1.Condition{{Type: kueue.WorkloadAdmitted, Status: metav1.ConditionTrue}}},
	}
	want := wl.DeepCopy()
	want.ManagedFields = nil
	for i := range want.Spec.PodSets {
		want.Spec.PodSets[i].Template = corev1.PodTemplateSpec{}
	}
	out, err := stripDefault(wl)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("cached Workload (-want,+got):\n%s", diff)
	}
	lq := &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "q", Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "{}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}, Spec: kueue.LocalQueueSpec{ClusterQueue: "cq"}}
	wantLQ := lq.DeepCopy()
	wantLQ.ManagedFields = nil
	if out, err := stripDefault(lq); err != nil || !cmp.Equal(wantLQ, out) {
		t.Errorf("cached LocalQueue: %s, %v", cmp.Diff(wantLQ, out), err)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/a", Obj: wl}
	if out, err := stripDefault(tomb); err != nil || out != any(tomb) {
		t.Errorf("a tombstone came back as %v, %v", out, err)
	}
}

// BenchmarkCachedWorkload reports the heap a cached Workload holds (B/cached)
// with the template stripped and whole, for a Workload like those of the
// bench's W6: a SafeJob of one small pod, admitted and finished.
func BenchmarkCachedWorkload(b *testing.B) {
	raw, err := utiljson.Marshal(finishedWorkload())
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		transform func(any) (any, error)
	}{{"whole", stripManagedFields}, {"stripped", stripDefault}} {
		b.Run(tc.name, func(b *testing.B) {
			kept := make([]any, 0, b.N)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range b.N {
				wl := &kueue.Workload{}
				if err := utiljson.Unmarshal(raw, wl); err != nil {
					b.Fatal(err)
				}
				out, _ := tc.transform(wl)
				kept = append(kept, out)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "B/cached")
			runtime.KeepAlive(kept)
		})
	}
}

// finishedWorkload is a Workload as the operator writes it for the bench's
// one-pod SafeJobs of W6, once Kueue admitted it and the SafeJob finished.
func finishedWorkload() *kueue.Workload {
	now := metav1.Now()
	cond := func(typ, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: now, ObservedGeneration: 1}
	}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	return &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: "safejob-w6-00042-4f1c2", Namespace: "bench-w6", UID: "6c1d8a5e-2f7b-4e0c-9a63-0f1e2d3c4b5a",
			ResourceVersion: "123456", Generation: 1, CreationTimestamp: now,
			Labels:     map[string]string{JobUIDLabel: "0b9f3e1c-7d2a-4c5b-8e6f-1a2b3c4d5e6f"},
			Finalizers: []string{ResourceInUseFinalizer},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: "w6-00042",
				UID: "0b9f3e1c-7d2a-4c5b-8e6f-1a2b3c4d5e6f", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: kueue.WorkloadSpec{QueueName: "bench", Active: ptr.To(true), PodSets: []kueue.PodSet{{Name: kueue.DefaultPodSetName, Count: 1,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": "1s"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: cpu}}}}}}}},
		Status: kueue.WorkloadStatus{
			Admission: &kueue.Admission{ClusterQueue: "bench", PodSetAssignments: []kueue.PodSetAssignment{{Name: kueue.DefaultPodSetName,
				Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{corev1.ResourceCPU: "default"}, ResourceUsage: cpu, Count: ptr.To[int32](1)}}},
			Conditions: []metav1.Condition{
				cond(kueue.WorkloadQuotaReserved, "QuotaReserved", "Quota reserved in ClusterQueue bench"),
				cond(kueue.WorkloadAdmitted, "Admitted", "The workload is admitted"),
				cond(kueue.WorkloadPodsReady, "PodsReady", "All pods reached readiness and the workload is running"),
				cond(kueue.WorkloadFinished, "Succeeded", "SafeJob finished successfully")},
		},
	}
}
