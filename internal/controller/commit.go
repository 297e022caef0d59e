package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// errSuperseded is a status write that lost: the SafeJob changed since it
// was read (a conflict) or is gone. Nothing of the plan was committed; the
// reconcile ends, and the newer version is decided again (pass).
var errSuperseded = errors.New("status write superseded by a newer SafeJob")

// commit is the one status write of a SafeJob: status over the observed
// object, with its resourceVersion as the precondition, remembered so that
// the next decision waits until the cache shows it (the write fence). It
// returns the written SafeJob, nil when nothing changed, and errSuperseded
// when the write lost.
func (r *SafeJobReconciler) commit(ctx context.Context, sj *batchv1alpha1.SafeJob, status batchv1alpha1.SafeJobStatus,
	appended []batchv1alpha1.LedgerEntry) (*batchv1alpha1.SafeJob, error) {
	if equality.Semantic.DeepEqual(sj.Status, status) {
		return nil, nil
	}
	prevRV := sj.ResourceVersion
	updated := sj.DeepCopy()
	updated.Status = status
	// Writes that commit launches may be bounded process-wide
	// (ConcurrentStatusWrites), so that a burst of them does not crowd out
	// the kubelets' pod status writes; other writes go at the workers' pace.
	var slots slots
	if launches(appended) > 0 {
		slots = r.statusWrites
	}
	if !slots.acquire(ctx) {
		return nil, fmt.Errorf("waiting to write SafeJob status: %w", ctx.Err())
	}
	err := r.Client.Status().Update(ctx, updated)
	slots.release()
	if err != nil {
		switch {
		case apierrors.IsConflict(err):
			log.FromContext(ctx).V(2).Info("Status write conflicted; deciding again on the newer object")
			r.Metrics.Conflicts.Inc()
			return nil, errSuperseded
		case apierrors.IsNotFound(err):
			return nil, errSuperseded // deleted meanwhile; its pods are released on the delete event
		}
		// The write may have landed with its answer lost (a timeout, a
		// connection reset): the next pass may still decide on the version
		// before it, and must not create the pods of launches it closed.
		r.tracker.mayHaveWritten(client.ObjectKeyFromObject(sj), sj.UID, appended)
		return nil, fmt.Errorf("writing SafeJob status: %w", err)
	}
	r.tracker.wrote(client.ObjectKeyFromObject(sj), sj.UID, prevRV, r.Clock.Now(), appended)
	r.Metrics.recordWrite(&sj.Status, &status, appended)
	log.FromContext(ctx).V(1).Info("Wrote status", "appended", len(appended), "seq", status.Ledger.Seq,
		"listed", len(status.Ledger.Entries), "active", status.Active, "ready", status.Ready, "succeeded", status.Succeeded)
	return updated, nil
}

// writeStatus commits a job plan's status and reports whether it wrote;
// events follow only a successful write.
func (r *SafeJobReconciler) writeStatus(ctx context.Context, sj *batchv1alpha1.SafeJob, plan *jobs.Plan) (bool, error) {
	updated, err := r.commit(ctx, sj, plan.Status, plan.Append)
	if err != nil || updated == nil {
		return false, err
	}
	r.recordEvents(updated, sj, plan)
	r.Metrics.recordFinished(sj, updated)
	r.readyHeld.drop(client.ObjectKeyFromObject(sj)) // the counts went with this write
	return true, nil
}

// markLedgerInvalid reports a ledger that cannot be read. Nothing else is
// done for the SafeJob until its ledger reads again.
func (r *SafeJobReconciler) markLedgerInvalid(ctx context.Context, sj *batchv1alpha1.SafeJob, cause error) error {
	log.FromContext(ctx).Error(cause, "Ledger is invalid; taking no action")
	msg := fmt.Sprintf("status.ledger is invalid, no action taken: %v", cause)
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	status := *sj.Status.DeepCopy()
	ledger.SetCondition(&status.Conditions, batchv1alpha1.ConditionLedgerValid, metav1.ConditionFalse,
		batchv1alpha1.ReasonLedgerCorrupt, msg, r.Clock.Now())
	updated, err := r.commit(ctx, sj, status, nil)
	if err != nil || updated == nil {
		return err
	}
	r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, batchv1alpha1.ReasonLedgerCorrupt, "Reconcile", "%s", msg)
	return nil
}
