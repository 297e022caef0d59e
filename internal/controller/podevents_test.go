package controller

import (
	"context"
	"slices"
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

// testQueue is a work queue for a handler under test, shut down with the test.
func testQueue(t *testing.T) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	return q
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
			q := testQueue(t)
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
			q := testQueue(t)
			h := &podHandler{tracker: newTracker()}
			h.Update(context.Background(), event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}, q)
			if got := q.Len(); got != tc.want {
				t.Errorf("reconciles queued = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestStartedAndRan: a pod frees its launch-window place once it no longer
// waits for a kubelet, and sizes the window only if a kubelet started it.
func TestStartedAndRan(t *testing.T) {
	unschedulable := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}
	for name, tc := range map[string]struct {
		phase        corev1.PodPhase
		deleting     bool
		conditions   []corev1.PodCondition
		started, ran bool
	}{
		"pending":                 {phase: corev1.PodPending},
		"pending, scheduled":      {phase: corev1.PodPending, conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
		"pending, not yet placed": {phase: corev1.PodPending, conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}},
		"pending, unschedulable":  {phase: corev1.PodPending, conditions: []corev1.PodCondition{unschedulable}, started: true},
		"pending, being deleted":  {phase: corev1.PodPending, deleting: true, started: true},
		"running":                 {phase: corev1.PodRunning, started: true, ran: true},
		"succeeded":               {phase: corev1.PodSucceeded, started: true, ran: true},
		"failed":                  {phase: corev1.PodFailed, started: true, ran: true},
		"running, being deleted":  {phase: corev1.PodRunning, deleting: true, started: true, ran: true},
	} {
		pod := &corev1.Pod{Status: corev1.PodStatus{Phase: tc.phase, Conditions: tc.conditions}}
		if tc.deleting {
			pod.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		if got := started(pod); got != tc.started {
			t.Errorf("%s: started %t, want %t", name, got, tc.started)
		}
		if got := ran(pod); got != tc.ran {
			t.Errorf("%s: ran %t, want %t", name, got, tc.ran)
		}
	}
}

// TestStrayPodQueuedOnCreate checks that a pod holding the ledger finalizer
// with no SafeJob controlling it is queued for release when the cache first
// sees it (after a restart, say), not only on a later update.
func TestStrayPodQueuedOnCreate(t *testing.T) {
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl-0-0", Namespace: "ns",
		Labels:     map[string]string{batchv1alpha1.SafeJobNameLabel: "etl"},
		Finalizers: []string{batchv1alpha1.LedgerFinalizer}}}
	released := stray.DeepCopy()
	released.Finalizers = nil
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		wantStray bool
	}{
		{"orphan holding the finalizer", stray, true},
		{"orphan without it", released, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := testQueue(t)
			h := &podHandler{tracker: newTracker()}
			h.Create(context.Background(), event.CreateEvent{Object: tc.pod}, q)
			key := types.NamespacedName{Namespace: "ns", Name: "etl"}
			if got := h.tracker.takeOwnerless(key); got != tc.wantStray {
				t.Errorf("stray noted = %v, want %v", got, tc.wantStray)
			}
			if got := q.Len(); got != map[bool]int{true: 1}[tc.wantStray] {
				t.Errorf("requests queued = %d", got)
			}
		})
	}
}

// TestPodLeavingCacheUndeletedNoted checks which pod deletions the handler
// takes for a removed name label: a SafeJob's pod that holds the ledger
// finalizer and is not being deleted, also as a relist's tombstone shows it.
func TestPodLeavingCacheUndeletedNoted(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "ns", UID: "u1"}}
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl-0-0", Namespace: "ns", UID: "p1",
		Labels:          map[string]string{batchv1alpha1.SafeJobNameLabel: "etl"},
		Finalizers:      []string{batchv1alpha1.LedgerFinalizer},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}}}
	deleting := own.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
	released := own.DeepCopy()
	released.Finalizers = nil
	orphan := own.DeepCopy()
	orphan.OwnerReferences = nil
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		unknown bool
		want    []unlabeledPod
	}{
		{"own pod holding the finalizer, not deleting", own, false, []unlabeledPod{{name: "etl-0-0", uid: "p1"}}},
		{"being deleted", deleting, false, nil},
		{"finalizer released", released, false, nil},
		{"no SafeJob controls it", orphan, false, nil},
		{"tombstone: the last state seen, the patch finds out", own, true, []unlabeledPod{{name: "etl-0-0", uid: "p1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := testQueue(t)
			h := &podHandler{tracker: newTracker()}
			h.Delete(context.Background(), event.DeleteEvent{Object: tc.pod, DeleteStateUnknown: tc.unknown}, q)
			got := h.tracker.takeUnlabeled(types.NamespacedName{Namespace: "ns", Name: "etl"})
			if !slices.Equal(got, tc.want) {
				t.Errorf("noted %v, want %v", got, tc.want)
			}
		})
	}
}
