package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// dispatched reports whether a SafeJob is one MultiKueue runs on a worker
// cluster: spec.managedBy kueue.x-k8s.io/multikueue, and no schedule. A
// scheduled SafeJob so managed runs here as a schedule whose runs
// MultiKueue dispatches (newRun).
func dispatched(sj *batchv1alpha1.SafeJob) bool {
	return sj.Dispatched() && sj.Spec.Schedule == nil
}

// reconcileDispatched keeps the Workload of a SafeJob on a manager cluster
// that MultiKueue runs on a worker (jobs.DecideDispatched): it creates no
// pod and writes no status of the SafeJob's, which MultiKueue copies from
// the worker. Without a queue label or Kueue there is nothing to keep.
// A run of a schedule goes once its parent is gone, and a deleting one is
// released once its parent cannot record it (dispatchedRun).
func (r *SafeJobReconciler) reconcileDispatched(ctx context.Context, sj *batchv1alpha1.SafeJob) (reconcile.Result, error) {
	if done, err := r.dispatchedRun(ctx, sj); done || err != nil {
		return reconcile.Result{}, err
	}
	if queueName(sj) == "" || !r.Options.Kueue {
		log.FromContext(ctx).V(2).Info("Skipping SafeJob dispatched by MultiKueue without a queue or Kueue")
		return reconcile.Result{}, nil
	}
	wl, taken, err := r.ownWorkload(ctx, sj)
	if err != nil {
		return reconcile.Result{}, err
	}
	in := r.workloadInput(sj)
	in.Workload, in.NamesTaken = wl, taken
	wp := jobs.DecideDispatched(in)
	if wp.Event != nil {
		r.event(sj, wl, wp.Event)
	}
	return reconcile.Result{}, r.actDispatched(ctx, sj, wl, wp)
}

// actDispatched carries out a dispatched SafeJob's Workload plan; a
// deleting SafeJob gets no new Workload.
func (r *SafeJobReconciler) actDispatched(ctx context.Context, sj *batchv1alpha1.SafeJob, wl *kueue.Workload,
	wp *jobs.WorkloadPlan) error {
	switch {
	case wp.Create && sj.DeletionTimestamp != nil:
	case wp.Create:
		created, taken, err := r.createWorkload(ctx, sj, wp.Count)
		if err == nil && created == nil {
			err = namesTakenError(sj, taken)
		}
		return err
	case wp.Drop:
		return r.dropWorkload(ctx, wl)
	case wp.Release:
		return r.releaseWorkload(ctx, wl)
	case wp.Spec != nil:
		return r.updateWorkloadSpec(ctx, wl, wp.Spec, wp.MarkSuspended)
	case wp.Status != nil:
		log.FromContext(ctx).Info("Giving back the Workload's quota: the worker runs no pod", "workload", klog.KObj(wl))
		updated := wl.DeepCopy()
		updated.Status = *wp.Status
		return r.writeWorkloadStatus(ctx, sj, wl, updated)
	}
	return nil
}

// dispatchedRun does, for a run MultiKueue dispatches, what the garbage
// collector does for the others, which their owner reference names: it
// deletes a run whose parent is gone (a parent is confirmed gone by a live
// read, as the garbage collector confirms an owner's absence), and it
// releases a deleting run once no parent can record its outcome. It says
// whether the run needs nothing more.
func (r *SafeJobReconciler) dispatchedRun(ctx context.Context, sj *batchv1alpha1.SafeJob) (bool, error) {
	if sj.Annotations[batchv1alpha1.ParentUIDAnnotation] == "" {
		return false, nil
	}
	if sj.DeletionTimestamp != nil {
		if !slices.Contains(sj.Finalizers, batchv1alpha1.RunFinalizer) {
			return false, nil
		}
		return false, r.releaseRun(ctx, sj)
	}
	ref := batchv1alpha1.RunParent(sj)
	if ref == nil {
		return false, nil
	}
	parent := &batchv1alpha1.SafeJob{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: sj.Namespace, Name: ref.Name}, parent)
	if err == nil && parent.UID == ref.UID && parent.DeletionTimestamp == nil {
		return false, nil
	}
	gone, err := r.parentGone(ctx, sj)
	if err != nil || !gone {
		return false, err
	}
	log.FromContext(ctx).Info("Deleting a dispatched run whose parent is gone", "parent", ref.Name, "parentUID", ref.UID)
	err = r.Client.Delete(ctx, sj, client.PropagationPolicy(metav1.DeletePropagationBackground),
		client.Preconditions{UID: ptr.To(sj.UID)})
	if client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("deleting run %s of a deleted parent: %w", sj.Name, err)
	}
	return true, nil
}

// prebuiltHandler brings a worker cluster's copy of a SafeJob back when the
// Workload MultiKueue made for it appears or changes before the copy
// controls it: the SafeJobs of its namespace that name it, by label or
// annotation (prebuiltWorkloadIndex).
type prebuiltHandler struct {
	cache client.Reader
}

func (h *prebuiltHandler) enqueue(ctx context.Context, obj client.Object, q queue) {
	wl, ok := obj.(*kueue.Workload)
	if !ok || wl.Labels[kueue.MultiKueueOriginLabel] == "" {
		return
	}
	var list batchv1alpha1.SafeJobList
	if err := h.cache.List(ctx, &list, client.InNamespace(wl.Namespace),
		client.MatchingFields{prebuiltWorkloadIndex: wl.Name}); err != nil {
		log.FromContext(ctx).Error(err, "Listing SafeJobs for a prebuilt Workload", "workload", klog.KObj(wl))
		return
	}
	for i := range list.Items {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: wl.Namespace, Name: list.Items[i].Name}})
	}
}

func (h *prebuiltHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	h.enqueue(ctx, e.Object, q)
}

func (h *prebuiltHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	h.enqueue(ctx, e.ObjectNew, q)
}

func (h *prebuiltHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	h.enqueue(ctx, e.Object, q)
}

func (h *prebuiltHandler) Generic(context.Context, event.TypedGenericEvent[client.Object], queue) {
}

var _ handler.EventHandler = &prebuiltHandler{}

// runHandler brings a parent back when one of its runs changes
// (batchv1alpha1.RunParent: its controller reference, or the parent a
// dispatched run names), and, when a parent is deleted, the runs
// MultiKueue dispatches for it, which no garbage collector deletes.
type runHandler struct {
	cache client.Reader
}

func (h *runHandler) enqueueParent(obj client.Object, q queue) {
	run, ok := obj.(*batchv1alpha1.SafeJob)
	if !ok {
		return
	}
	if ref := batchv1alpha1.RunParent(run); ref != nil {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: run.Namespace, Name: ref.Name}})
	}
}

func (h *runHandler) Create(_ context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	h.enqueueParent(e.Object, q)
}

func (h *runHandler) Update(_ context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	h.enqueueParent(e.ObjectOld, q)
	h.enqueueParent(e.ObjectNew, q)
}

// Delete queues the parent of a deleted run and, for a deleted parent, its
// runs: a run being deleted waits for its parent to record it, and one whose
// parent went first (deleted right after its runs, as an uninstall does)
// would otherwise hold its run finalizer with nothing to bring it back; a
// run MultiKueue dispatched is deleted once its parent is gone.
func (h *runHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	h.enqueueParent(e.Object, q)
	parent, ok := e.Object.(*batchv1alpha1.SafeJob)
	if !ok || parent.Spec.Schedule == nil {
		return
	}
	var list batchv1alpha1.SafeJobList
	if err := h.cache.List(ctx, &list, client.InNamespace(parent.Namespace),
		client.MatchingFields{controllerUIDIndex: string(parent.UID)}); err != nil {
		log.FromContext(ctx).Error(err, "Listing the runs of a deleted SafeJob", "safeJob", klog.KObj(parent))
		return
	}
	for i := range list.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
}

func (h *runHandler) Generic(context.Context, event.TypedGenericEvent[client.Object], queue) {
}

var _ handler.EventHandler = &runHandler{}
