package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// ttlResult reports whether a finished SafeJob's ttlSecondsAfterFinished has
// run out, or when it will.
func (r *SafeJobReconciler) ttlResult(sj *batchv1alpha1.SafeJob) (bool, reconcile.Result, bool) {
	left, ok := ledger.TTLLeft(&sj.Spec, &sj.Status, r.Clock.Now())
	if !ok {
		return false, reconcile.Result{}, false
	}
	if left > 0 {
		return false, reconcile.Result{RequeueAfter: left}, true
	}
	return true, reconcile.Result{}, true
}

// expireTTL deletes a SafeJob whose TTL after finishing has run out. done
// is true when the SafeJob was deleted (or is being) and nothing else is to do.
func (r *SafeJobReconciler) expireTTL(ctx context.Context, sj *batchv1alpha1.SafeJob) (bool, reconcile.Result, error) {
	expired, _, _ := r.ttlResult(sj)
	if !expired {
		return false, reconcile.Result{}, nil
	}
	log.FromContext(ctx).V(1).Info("Deleting finished SafeJob: ttlSecondsAfterFinished passed")
	err := r.Client.Delete(ctx, sj, client.Preconditions{UID: &sj.UID, ResourceVersion: &sj.ResourceVersion},
		client.PropagationPolicy("Background"))
	if err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return true, reconcile.Result{Requeue: true}, nil
		}
		return true, reconcile.Result{}, fmt.Errorf("deleting SafeJob after TTL: %w", err)
	}
	return true, reconcile.Result{}, nil
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
