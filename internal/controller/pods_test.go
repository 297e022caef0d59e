package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

func TestNewPod(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns", UID: "uid-1"},
		Spec: batchv1alpha1.SafeJobSpec{
			CompletionMode: batchv1alpha1.IndexedCompletion,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					InitContainers: []corev1.Container{{Name: "init"}},
					Containers:     []corev1.Container{{Name: "main", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}},
			},
		},
	}
	pod := newPod(sj, ledger.PodRef{Name: "train-3-1", Index: 3, Attempt: 1})
	wantLabels := map[string]string{"app": "x", batchv1alpha1.SafeJobNameLabel: "train",
		batchv1alpha1.CompletionIndexLabel: "3", batchv1alpha1.AttemptLabel: "1", batchv1alpha1.ControllerUIDLabel: "uid-1"}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{batchv1alpha1.JobCompletionIndexAnnotation: "3"}, pod.Annotations); diff != "" {
		t.Errorf("annotations (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{batchv1alpha1.LedgerFinalizer}, pod.Finalizers); diff != "" {
		t.Errorf("finalizers (-want,+got):\n%s", diff)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != "uid-1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference %+v", ref)
	}
	wantEnv := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: batchv1alpha1.JobCompletionIndexEnv, Value: "3"}}
	if diff := cmp.Diff(wantEnv, pod.Spec.Containers[0].Env); diff != "" {
		t.Errorf("env (-want,+got):\n%s", diff)
	}
	if len(pod.Spec.InitContainers[0].Env) != 1 {
		t.Errorf("init container env %v", pod.Spec.InitContainers[0].Env)
	}
	if len(sj.Spec.Template.Spec.Containers[0].Env) != 1 || sj.Spec.Template.Labels[batchv1alpha1.AttemptLabel] != "" {
		t.Error("newPod modified the SafeJob's template")
	}

	sj.Spec.CompletionMode = batchv1alpha1.NonIndexedCompletion
	plain := newPod(sj, ledger.PodRef{Name: "train-0-0"})
	if _, ok := plain.Annotations[batchv1alpha1.JobCompletionIndexAnnotation]; ok || len(plain.Spec.Containers[0].Env) != 1 {
		t.Error("NonIndexed pod got the completion index annotation or env")
	}
}

func TestIndexPodOwner(t *testing.T) {
	owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{
		APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: "a", UID: "u", Controller: ptr.To(true)}}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "batch/v1", Kind: "Job", Name: "a", UID: "u", Controller: ptr.To(true)}}}}
	if diff := cmp.Diff([]string{"u"}, indexPodOwner(owned)); diff != "" {
		t.Errorf("owned (-want,+got):\n%s", diff)
	}
	if got := indexPodOwner(other); got != nil {
		t.Errorf("pod of a Job indexed as %v", got)
	}
}

func TestPodEventsBatchedOnlyForParallelSafeJobs(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	one := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "ns", UID: "u1"}}
	wide := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "wide", Namespace: "ns", UID: "u2"},
		Spec: batchv1alpha1.SafeJobSpec{Parallelism: ptr.To[int32](5)}}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(one, wide).Build()
	podOf := func(sj *batchv1alpha1.SafeJob) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sj.Name + "-0-0", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}}}
	}
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		batch     time.Duration
		wantReady int
	}{
		{"parallel SafeJob waits for the batch", podOf(wide), time.Hour, 0},
		{"one pod at a time is not batched", podOf(one), time.Hour, 1},
		{"batching off", podOf(wide), 0, 1},
		{"unknown SafeJob is not batched", podOf(&batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "u3"}}), time.Hour, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			h := &podHandler{tracker: newTracker(), cache: reader, batch: tc.batch}
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: tc.pod, ObjectNew: tc.pod}, q)
			if got := q.Len(); got != tc.wantReady {
				t.Errorf("requests ready at once = %d, want %d", got, tc.wantReady)
			}
		})
	}
}

func TestIndexActivePodOwner(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-1"}}
	pod := func(phase corev1.PodPhase, finalizer bool) *corev1.Pod {
		p := newPod(sj, ledger.PodRef{Name: "a-0-0"})
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
		if diff := cmp.Diff(tc.want, indexActivePodOwner(tc.pod)); diff != "" {
			t.Errorf("%s: index (-want,+got):\n%s", tc.name, diff)
		}
	}
	other := pod(corev1.PodRunning, true)
	other.OwnerReferences = nil
	if got := indexActivePodOwner(other); got != nil {
		t.Errorf("a pod no SafeJob controls is indexed under %v", got)
	}
}

// TestPodWritesShareProcessWideSlots checks that a pod write runs only
// while it holds one of the process-wide slots: with every slot taken
// elsewhere, a reconcile's writes wait, and are skipped with an error if
// the reconcile's context ends first.
func TestPodWritesShareProcessWideSlots(t *testing.T) {
	r := &SafeJobReconciler{podWrites: newSlots(2)}
	for range 2 {
		if !r.podWrites.acquire(context.Background()) {
			t.Fatal("acquire of a free slot failed")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var calls int
	done := make(chan error)
	go func() { done <- r.parallel(ctx, 5, func(int) { calls++ }) }()
	cancel()
	if err := <-done; err == nil {
		t.Error("parallel returned no error after its context ended with writes left")
	}
	if calls != 0 {
		t.Errorf("%d writes ran while every slot was held elsewhere", calls)
	}

	// One freed slot lets all the writes through, one after another.
	r.podWrites.release()
	var mu sync.Mutex
	err := r.parallel(context.Background(), 20, func(int) {
		mu.Lock()
		calls++
		mu.Unlock()
	})
	if err != nil || calls != 20 {
		t.Errorf("with one slot free: err %v, %d of 20 writes ran; want nil, 20", err, calls)
	}
}

func TestUnboundedPodWrites(t *testing.T) {
	r := &SafeJobReconciler{podWrites: newSlots(0)}
	// Every write waits for all the others to start: this returns only if
	// actWorkers writes can be in flight at once.
	var started sync.WaitGroup
	started.Add(actWorkers)
	if err := r.parallel(context.Background(), actWorkers, func(int) {
		started.Done()
		started.Wait()
	}); err != nil {
		t.Fatal(err)
	}
}
