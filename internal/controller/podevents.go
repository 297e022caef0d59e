package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// podHandler enqueues a pod's SafeJob and keeps the terminal state of pods
// that leave the cache, or lose the ledger finalizer to someone else.
type podHandler struct {
	tracker *tracker
	// cache reads the owning SafeJob: only the pods of a SafeJob that runs
	// more than one pod at a time are batched (a lone pod has nothing to
	// share its status write with).
	cache client.Reader
	batch time.Duration
	// window, if set, learns which pods have started.
	window *launchWindow
}

func (h *podHandler) Create(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	pod, ok := e.Object.(*corev1.Pod)
	if ok && h.window != nil && ownedBySafeJob(pod) {
		if started(pod) {
			h.window.started(client.ObjectKeyFromObject(pod), ran(pod))
		} else {
			h.window.seen(client.ObjectKeyFromObject(pod), pod.CreationTimestamp.Time)
		}
	}
	if ok && ownerless(pod) {
		// Orphaned while no process of the operator watched (a restart, or
		// a pod that came back to the cache): as batch/v1 does on add too.
		h.enqueueOwnerless(pod, q)
	}
	h.enqueueOwner(e.Object, q)
}

func (h *podHandler) Update(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	pod, ok := e.ObjectNew.(*corev1.Pod)
	if ok && h.window != nil && started(pod) {
		h.window.started(client.ObjectKeyFromObject(pod), ran(pod))
	}
	if ok && endedAndReleased(pod) {
		h.remember(pod)
	}
	if ok && ownerless(pod) {
		h.enqueueOwnerless(pod, q)
	}
	if old, isPod := e.ObjectOld.(*corev1.Pod); ok && isPod && onlyBound(old, pod) {
		return
	}
	h.enqueueOwner(e.ObjectNew, q)
}

// enqueueOwnerless queues the reconcile of an ownerless pod's name (its name label),
// which releases the ledger finalizer once no live SafeJob is found to have
// created the pod.
func (h *podHandler) enqueueOwnerless(pod *corev1.Pod, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[batchv1alpha1.SafeJobNameLabel]}
	h.tracker.sawOwnerless(key)
	q.Add(reconcile.Request{NamespacedName: key})
}

// onlyBound reports an update that only binds the pod to a node: its node
// name set and its PodScheduled condition with it, nothing else of it
// changed. No decision reads either, so its SafeJob is not queued for it:
// where pods wait seconds at each step, every such event would otherwise
// cost a reconcile that finds nothing to do.
func onlyBound(old, pod *corev1.Pod) bool {
	if old.Spec.NodeName != "" || pod.Spec.NodeName == "" {
		return false
	}
	before, after := *old, *pod // shallow: what they share is only read
	before.ResourceVersion, before.ManagedFields = after.ResourceVersion, after.ManagedFields
	before.Spec.NodeName = after.Spec.NodeName
	before.Status.Conditions = withoutScheduled(before.Status.Conditions)
	after.Status.Conditions = withoutScheduled(after.Status.Conditions)
	return equality.Semantic.DeepEqual(&before, &after)
}

// withoutScheduled returns conds without the PodScheduled condition, in a
// slice of its own.
func withoutScheduled(conds []corev1.PodCondition) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(conds))
	for _, c := range conds {
		if c.Type != corev1.PodScheduled {
			out = append(out, c)
		}
	}
	return out
}

// ownerless reports a pod that holds the ledger finalizer but that no SafeJob
// controls.
func ownerless(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	return (ref == nil || !batchv1alpha1.IsSafeJobRef(ref)) && slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
}

func (h *podHandler) Delete(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	pod, ok := e.Object.(*corev1.Pod)
	if ok && jobs.IsTerminal(pod) {
		h.remember(pod)
	}
	if ok && leftUndeleted(pod) {
		// The label the cache selects on was removed: without it no event
		// of the pod reaches this process, its outcome waits and its
		// finalizer stays. The reconcile puts the label back. A tombstone
		// (a delete missed across a relist) is taken alike: the patch
		// carries the pod's UID and finds nothing if the pod is gone.
		ref := metav1.GetControllerOf(pod)
		h.tracker.sawUnlabeled(types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name},
			unlabeledPod{name: pod.Name, uid: pod.UID})
	}
	if ok && h.window != nil {
		h.window.started(client.ObjectKeyFromObject(pod), ran(pod))
	}
	h.enqueueOwner(e.Object, q)
	// After enqueueOwner, which notes a predecessor's pod as holding its
	// name: a pod gone holds none. One that only left the cache still does.
	if ref := metav1.GetControllerOf(e.Object); ok && ref != nil && batchv1alpha1.IsSafeJobRef(ref) && !leftUndeleted(pod) {
		h.tracker.heldGone(types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, pod.Name, pod.UID)
	}
}

func (h *podHandler) Generic(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueueOwner(e.Object, q)
}

func (h *podHandler) remember(pod *corev1.Pod) {
	if ref := metav1.GetControllerOf(pod); ref != nil && batchv1alpha1.IsSafeJobRef(ref) {
		h.tracker.sawTerminal(types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, ref.UID, pod)
	}
}

// enqueueOwner enqueues the SafeJob of a pod and, for a pod of a scheduled
// run, the parent, which waits for the pods of earlier runs under Forbid and
// Replace. Within the batch period of the first event, further events of the
// same SafeJob join the pending request (the queue keeps the earliest time).
// A pod of a SafeJob of this name that the cache shows replaced by another
// (deleted and created again under the same name) is a predecessor's: its
// name is held until it is deleted, and the successor's launches are named
// apart from it (jobs.Input.Held). When it holds the ledger finalizer and
// the cache went straight from one SafeJob to the other, no reconcile sees
// its SafeJob gone, so its name is queued as an ownerless pod's, whose release reads
// the SafeJob of the name live first (releaseOwnerless).
func (h *podHandler) enqueueOwner(obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if ref := metav1.GetControllerOf(obj); ref != nil && batchv1alpha1.IsSafeJobRef(ref) {
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}
		batch, successor := h.lookup(key, ref.UID)
		if successor {
			h.tracker.sawHeld(key, obj.GetName(), obj.GetUID())
		}
		if successor && slices.Contains(obj.GetFinalizers(), batchv1alpha1.LedgerFinalizer) {
			h.tracker.sawOwnerless(key)
			q.Add(reconcile.Request{NamespacedName: key})
		}
		q.AddAfter(reconcile.Request{NamespacedName: key}, batch)
	}
	if parent := obj.GetAnnotations()[batchv1alpha1.ParentLabel]; parent != "" {
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: parent}}, h.batch)
	}
}

// lookup reads the cached SafeJob of key: batch is how long the events of
// its pods are gathered (the batch period when it runs several pods at
// once, else nothing), successor whether it is another SafeJob than the
// one of uid that created the pod.
func (h *podHandler) lookup(key types.NamespacedName, uid types.UID) (batch time.Duration, successor bool) {
	if h.cache == nil {
		return 0, false
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := h.cache.Get(context.Background(), key, sj, client.UnsafeDisableDeepCopy); err != nil {
		return 0, false
	}
	if h.batch > 0 && ptr.Deref(sj.Spec.Parallelism, 1) > 1 {
		batch = h.batch
	}
	return batch, sj.UID != uid
}

// leftUndeleted reports a pod of a SafeJob that left the cache while it
// held the ledger finalizer and was not being deleted. Such a pod cannot
// be gone (the finalizer holds it, and its deletion would have been seen
// first), so it stopped matching the cache's selector: the API server
// sends the pod as it was before that change. After a relist, the state
// is only the last one seen.
func leftUndeleted(pod *corev1.Pod) bool {
	return ownedBySafeJob(pod) && pod.DeletionTimestamp == nil &&
		slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
}

// ownedBySafeJob reports whether a SafeJob controls pod.
func ownedBySafeJob(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && batchv1alpha1.IsSafeJobRef(ref)
}

// ran reports whether pod left Pending: its start tells the launch window
// how fast pods start.
func ran(pod *corev1.Pod) bool {
	return pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending
}

// started reports whether pod no longer waits to start, for the launch
// window: it left Pending, is being deleted, or the scheduler found no node
// for it (it waits for the cluster, not for a kubelet).
func started(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodPending || pod.DeletionTimestamp != nil {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}
