package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

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

// TestBindOnlyUpdateNotQueued checks that an update that only binds a pod to
// a node queues no reconcile of its SafeJob, and that any other change
// made with it, or any other update, still does.
func TestBindOnlyUpdateNotQueued(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "ns", UID: "u1"}}
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "one-0-0", Namespace: "ns", ResourceVersion: "1",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	bound := func(change func(p *corev1.Pod)) *corev1.Pod {
		p := pending.DeepCopy()
		p.ResourceVersion, p.Spec.NodeName = "2", "node-1"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		if change != nil {
			change(p)
		}
		return p
	}
	unschedulable := pending.DeepCopy()
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable}}
	for _, tc := range []struct {
		name     string
		old, new *corev1.Pod
		want     int
	}{
		{"bound to a node", pending, bound(nil), 0},
		{"bound after the scheduler had refused it", unschedulable, bound(nil), 0},
		{"bound and running at once", pending, bound(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), 1},
		{"bound with another condition", pending, bound(func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
		}), 1},
		{"bound and labelled", pending, bound(func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }), 1},
		{"bound and being deleted", pending, bound(func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }), 1},
		{"refused by the scheduler", pending, unschedulable, 1},
		{"running on its node", bound(nil), bound(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			h := &podHandler{tracker: newTracker()}
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}, q)
			if got := q.Len(); got != tc.want {
				t.Errorf("reconciles queued = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestOwnReleaseNotQueued checks that the update that only takes the ledger
// finalizer off a terminal pod this process released queues nothing and
// keeps no last state of the pod, and that a release by anyone else, one
// whose failure was seen, one of another SafeJob of the same name, or any
// other change made with it still queues the SafeJob and keeps the pod's
// last state.
func TestOwnReleaseNotQueued(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "ns", UID: "u1"}}
	key := types.NamespacedName{Namespace: "ns", Name: "one"}
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "one-0-0", Namespace: "ns", ResourceVersion: "1",
		Finalizers:      []string{batchv1alpha1.LedgerFinalizer},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	freed := func(change func(p *corev1.Pod)) *corev1.Pod {
		p := held.DeepCopy()
		p.ResourceVersion, p.Finalizers = "2", nil
		if change != nil {
			change(p)
		}
		return p
	}
	running := held.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	for _, tc := range []struct {
		name     string
		released func(tr *tracker)
		old, new *corev1.Pod
		want     int  // reconciles queued
		keeps    bool // the pod's last state kept
	}{
		{"released here", func(tr *tracker) { tr.released(key, "u1", "one-0-0", time.Now()) }, held, freed(nil), 0, false},
		{"released here, another finalizer kept", func(tr *tracker) { tr.released(key, "u1", "one-0-0", time.Now()) },
			withFinalizers(held, batchv1alpha1.LedgerFinalizer, "x.io/keep"), withFinalizers(freed(nil), "x.io/keep"), 0, false},
		{"released by someone else", func(*tracker) {}, held, freed(nil), 1, true},
		{"release seen failing", func(tr *tracker) {
			tr.released(key, "u1", "one-0-0", time.Now())
			tr.releaseFailed(key, "u1", "one-0-0", errors.New("refused"))
		}, held, freed(nil), 1, true},
		// The tracker holds the earlier SafeJob, so it keeps no pod of the new one.
		{"released for an earlier SafeJob of the name", func(tr *tracker) { tr.released(key, "u0", "one-0-0", time.Now()) }, held, freed(nil), 1, false},
		{"released and labelled", func(tr *tracker) { tr.released(key, "u1", "one-0-0", time.Now()) }, held,
			freed(func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }), 1, true},
		{"released and being deleted", func(tr *tracker) { tr.released(key, "u1", "one-0-0", time.Now()) }, held,
			freed(func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }), 1, true},
		{"released while it ends", func(tr *tracker) { tr.released(key, "u1", "one-0-0", time.Now()) }, running, freed(nil), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			tr := newTracker()
			tc.released(tr)
			h := &podHandler{tracker: tr}
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}, q)
			if got := q.Len(); got != tc.want {
				t.Errorf("reconciles queued = %d, want %d", got, tc.want)
			}
			if _, kept := tr.lastSeen(key, "u1")["one-0-0"]; kept != tc.keeps {
				t.Errorf("last state kept = %v, want %v", kept, tc.keeps)
			}
		})
	}
}

func withFinalizers(pod *corev1.Pod, finalizers ...string) *corev1.Pod {
	p := pod.DeepCopy()
	p.Finalizers = finalizers
	return p
}
