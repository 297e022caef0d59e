package controller

import (
	"context"

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
// cluster: spec.managedBy kueue.x-k8s.io/multikueue, and no schedule (a
// scheduled SafeJob so managed is left alone, as any SafeJob another
// controller manages).
func dispatched(sj *batchv1alpha1.SafeJob) bool {
	return sj.Spec.ManagedBy != nil && *sj.Spec.ManagedBy == kueue.MultiKueueControllerName && sj.Spec.Schedule == nil
}

// reconcileDispatched keeps the Workload of a SafeJob on a manager cluster
// that MultiKueue runs on a worker (jobs.DecideDispatched): it creates no
// pod and writes no status of the SafeJob's, which MultiKueue copies from
// the worker. Without a queue label or Kueue there is nothing to keep.
func (r *SafeJobReconciler) reconcileDispatched(ctx context.Context, sj *batchv1alpha1.SafeJob) (reconcile.Result, error) {
	if queueName(sj) == "" || !r.Kueue {
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
	switch {
	case wp.Create:
		created, taken, err := r.createWorkload(ctx, sj, wp.Count)
		if err == nil && created == nil {
			err = namesTakenError(sj, taken)
		}
		return reconcile.Result{}, err
	case wp.Drop:
		return reconcile.Result{}, r.dropWorkload(ctx, wl)
	case wp.Release:
		return reconcile.Result{}, r.releaseWorkload(ctx, wl)
	case wp.Spec != nil:
		return reconcile.Result{}, r.updateWorkloadSpec(ctx, wl, wp.Spec, wp.MarkSuspended)
	case wp.Status != nil:
		log.FromContext(ctx).Info("Giving back the Workload's quota: the worker runs no pod", "workload", klog.KObj(wl))
		updated := wl.DeepCopy()
		updated.Status = *wp.Status
		return reconcile.Result{}, r.writeWorkloadStatus(ctx, sj, wl, updated)
	}
	return reconcile.Result{}, nil
}

// prebuiltHandler brings a worker cluster's copy of a SafeJob back when the
// Workload MultiKueue made for it appears or changes before the copy
// controls it: the SafeJobs of its namespace labelled with its name.
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
		client.MatchingLabels{jobs.PrebuiltWorkloadLabel: wl.Name}); err != nil {
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
