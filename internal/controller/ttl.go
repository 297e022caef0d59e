package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// ttlResult reports whether a finished SafeJob's ttlSecondsAfterFinished has
// run out, or when it will.
func (r *SafeJobReconciler) ttlResult(sj *batchv1alpha1.SafeJob) (bool, reconcile.Result) {
	left, ok := jobs.TTLLeft(&sj.Spec, &sj.Status, r.Clock.Now())
	if !ok {
		return false, reconcile.Result{}
	}
	if left > 0 {
		return false, reconcile.Result{RequeueAfter: left}
	}
	return true, reconcile.Result{}
}

// expireTTL deletes a SafeJob whose TTL after finishing has run out. done
// is true when the SafeJob was deleted (or is being) and nothing else is to do.
func (r *SafeJobReconciler) expireTTL(ctx context.Context, sj *batchv1alpha1.SafeJob) (bool, error) {
	if expired, _ := r.ttlResult(sj); !expired {
		return false, nil
	}
	log.FromContext(ctx).V(1).Info("Deleting finished SafeJob: ttlSecondsAfterFinished passed")
	err := r.Client.Delete(ctx, sj, client.Preconditions{UID: &sj.UID, ResourceVersion: &sj.ResourceVersion},
		client.PropagationPolicy("Background"))
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsConflict(err):
		return true, nil // changed since: its watch event brings us back
	default:
		return true, fmt.Errorf("deleting SafeJob after TTL: %w", err)
	}
}
