package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
//
// The write is a JSON merge patch of what changed since the observed
// object, with its resourceVersion: a status field this build does not
// know (one a newer build added) is not in the patch and stays as it is,
// where an update would write it away. Lists are replaced whole, so a build
// that adds a field inside the ledger's entries raises LedgerFormat, and
// older builds leave such a ledger alone (refuseFormat). Every write
// carries this build's LedgerFormat; an answer without it comes from an
// API server whose CRD is older than this build (refusedByCRD). A write
// the API server stored nothing of (its resourceVersion did not move) does
// not arm the write fence, or the SafeJob would wait for a version that
// never comes.
func (r *SafeJobReconciler) commit(ctx context.Context, sj *batchv1alpha1.SafeJob, status batchv1alpha1.SafeJobStatus,
	appended []batchv1alpha1.LedgerEntry) (*batchv1alpha1.SafeJob, error) {
	same := status // shallow: only compared
	same.Ledger.Format = sj.Status.Ledger.Format
	// A write that is stored clears a refusal reported before (refuseWrite).
	meta.RemoveStatusCondition(&same.Conditions, batchv1alpha1.ConditionStatusWriteFailure)
	if equality.Semantic.DeepEqual(sj.Status, same) {
		return nil, nil
	}
	prevRV := sj.ResourceVersion
	updated := sj.DeepCopy()
	updated.Status = status
	updated.Status.Ledger.Format = batchv1alpha1.LedgerFormat
	meta.RemoveStatusCondition(&updated.Status.Conditions, batchv1alpha1.ConditionStatusWriteFailure)
	patch, err := client.MergeFromWithOptions(sj, client.MergeFromWithOptimisticLock{}).Data(updated)
	if err != nil {
		return nil, fmt.Errorf("computing the status patch: %w", err)
	}
	// Writes that commit launches may be bounded process-wide
	// (ConcurrentStatusWrites), so that a burst of them does not crowd out
	// the kubelets' pod status writes; other writes go at the workers' pace.
	var slots slots
	if launches(appended) > 0 {
		slots = r.pacer.statusSlots()
	}
	if !slots.acquire(ctx) {
		return nil, fmt.Errorf("waiting to write SafeJob status: %w", ctx.Err())
	}
	// The answer is decoded into an object of its own: decoded over
	// updated, a field the API server dropped would still show what was
	// sent.
	answer := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: sj.Namespace, Name: sj.Name}}
	err = r.Client.Status().Patch(ctx, answer, client.RawPatch(types.MergePatchType, patch))
	slots.release()
	if err != nil {
		switch {
		case apierrors.IsConflict(err):
			log.FromContext(ctx).V(2).Info("Status write conflicted; deciding again on the newer object")
			r.Metrics.Conflicts.Inc()
			return nil, errSuperseded
		case apierrors.IsNotFound(err):
			return nil, errSuperseded // deleted meanwhile; its pods are released on the delete event
		case lastingRefusal(err):
			// Refused for what the status is: the same write is refused
			// again, and nothing it carries is stored.
			return nil, r.refuseWrite(ctx, sj, err)
		}
		// The write may have landed with its answer lost (a timeout, a
		// connection reset): the next pass may still decide on the version
		// before it, and must not create the pods of launches it closed.
		r.tracker.mayHaveWritten(client.ObjectKeyFromObject(sj), sj.UID, appended)
		return nil, fmt.Errorf("writing SafeJob status: %w", err)
	}
	if answer.Status.Ledger.Format != batchv1alpha1.LedgerFormat {
		r.refusedByCRD(ctx, sj)
	}
	if answer.ResourceVersion == prevRV {
		// Nothing stored (what differed did not survive encoding, or the
		// API server dropped it): no version comes to lift a write fence.
		if answer.Status.Ledger.Format != batchv1alpha1.LedgerFormat {
			return nil, errors.New("writing SafeJob status: nothing stored: the SafeJob CRD installed is older than this operator")
		}
		return nil, nil
	}
	r.tracker.wrote(client.ObjectKeyFromObject(sj), sj.UID, prevRV, r.Clock.Now(), appended, &answer.Status.Ledger)
	r.pacer.wrote(client.ObjectKeyFromObject(sj), sj.UID, r.Clock.Now())
	r.Metrics.recordWrite(&sj.Status, &status, appended)
	log.FromContext(ctx).V(1).Info("Wrote status", "appended", len(appended), "seq", status.Ledger.Seq,
		"listed", len(status.Ledger.Entries), "active", status.Active, "ready", status.Ready, "succeeded", status.Succeeded)
	return answer, nil
}

// lastingRefusal reports an answer that the same status write gets again:
// the API server refused the status itself (its validation, or its size).
func lastingRefusal(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// refuseWrite reports a status write the API server refuses for what it
// carries (a status over its size limit, a value its CRD does not allow):
// retrying changes nothing until someone acts, so it is said in the
// StatusWriteFailure condition (written alone, beside the conditions the
// SafeJob has) and an event, and counted. The returned error retries the
// reconcile with the queue's backoff.
func (r *SafeJobReconciler) refuseWrite(ctx context.Context, sj *batchv1alpha1.SafeJob, cause error) error {
	r.Metrics.refused(refusedInvalid)
	log.FromContext(ctx).Error(cause, "Status write refused; nothing of it is stored")
	if meta.IsStatusConditionTrue(sj.Status.Conditions, batchv1alpha1.ConditionStatusWriteFailure) {
		// Said already: a new message alone would cost a write, whose
		// watch event would bring the SafeJob back past the backoff.
		return fmt.Errorf("writing SafeJob status: %w", cause)
	}
	msg := ledger.Truncate(fmt.Sprintf("the API server refuses the status this operator writes: %v", cause), maxCopiedMessage)
	if err := r.setConditionOnly(ctx, sj, batchv1alpha1.ConditionStatusWriteFailure, metav1.ConditionTrue,
		batchv1alpha1.ReasonStatusRefused, msg); err != nil {
		log.FromContext(ctx).Error(err, "Reporting the refused status write")
	}
	r.Recorder.Eventf(sj, nil, corev1.EventTypeWarning, batchv1alpha1.ReasonStatusRefused, "WriteStatus", "%s", msg)
	return fmt.Errorf("writing SafeJob status: %w", cause)
}

// refusedByCRD reports an answer without this build's ledger format: the
// API server pruned status.ledger.format, so its CRD is older than this
// build and may drop other fields it writes.
func (r *SafeJobReconciler) refusedByCRD(ctx context.Context, sj *batchv1alpha1.SafeJob) {
	r.Metrics.refused(refusedCRDOutdated)
	msg := "the SafeJob CRD installed is older than this operator (it drops status.ledger.format): apply the CRD of this release"
	log.FromContext(ctx).Info("Status write pruned by the API server", "reason", msg)
	r.Recorder.Eventf(sj, nil, corev1.EventTypeWarning, batchv1alpha1.ReasonCRDOutdated, "WriteStatus", "%s", msg)
}

// setConditionOnly writes one condition, with nothing else of the status,
// over the observed SafeJob: used where the status as decided may not be
// written (it is refused, or the ledger is one this build must not write).
// The write fence is not armed: nothing of the ledger changes.
func (r *SafeJobReconciler) setConditionOnly(ctx context.Context, sj *batchv1alpha1.SafeJob, t string,
	s metav1.ConditionStatus, reason, msg string) error {
	updated := sj.DeepCopy()
	if !ledger.SetCondition(&updated.Status.Conditions, t, s, reason, msg, r.Clock.Now()) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFromWithOptions(sj, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("setting condition %s: %w", t, err)
	}
	return nil
}

// The reasons of LedgersRefused.
const (
	refusedInvalid       = "invalid"
	refusedCRDOutdated   = "crd_outdated"
	refusedFormatUnknown = "format_unknown"
	refusedRolledBack    = "rolled_back"
)

// maxCopiedMessage bounds what the operator copies into a condition or an
// event from another component's answer (an API server's refusal, an
// admission webhook's message): a long one would make every status write
// Invalid.
const maxCopiedMessage = 1024

// refuseFormat leaves alone a SafeJob whose ledger is of a format newer than
// this build reads (a rollback after a newer build wrote it): no status
// write but the condition that says so, no pod created or released. The
// newer build, run again, reads it and sets LedgerValid back to True.
func (r *SafeJobReconciler) refuseFormat(ctx context.Context, sj *batchv1alpha1.SafeJob) error {
	r.Metrics.refused(refusedFormatUnknown)
	msg := fmt.Sprintf("status.ledger.format is %d; this operator reads formats up to %d and leaves the SafeJob alone: "+
		"run a release that reads it", sj.Status.Ledger.Format, batchv1alpha1.LedgerFormat)
	log.FromContext(ctx).Info("Ledger format unknown; taking no action", "format", sj.Status.Ledger.Format,
		"known", batchv1alpha1.LedgerFormat)
	return r.markInvalid(ctx, sj, batchv1alpha1.ReasonLedgerFormatUnknown, msg)
}

// refuseRolledBack leaves alone a SafeJob whose ledger shows less than this
// process saw of it (I4: a committed fact never disappears): a status
// restored from a backup or edited by hand. Launching on it would run
// finished work again; its pods keep their finalizers, so their outcomes
// are still there to record once someone acts.
func (r *SafeJobReconciler) refuseRolledBack(ctx context.Context, sj *batchv1alpha1.SafeJob, cause error) error {
	r.Metrics.refused(refusedRolledBack)
	msg := fmt.Sprintf("status.ledger was rolled back (%v): nothing is launched for this SafeJob; "+
		"delete it, or restart the operator to take the ledger as it is now", cause)
	log.FromContext(ctx).Info("Ledger rolled back; taking no action", "cause", cause.Error())
	return r.markInvalid(ctx, sj, batchv1alpha1.ReasonLedgerRolledBack, msg)
}

// markInvalid sets LedgerValid False with reason, alone, and records an
// event when it was not already so.
func (r *SafeJobReconciler) markInvalid(ctx context.Context, sj *batchv1alpha1.SafeJob, reason, msg string) error {
	if c := meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionLedgerValid); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == reason && c.Message == msg {
		return nil
	}
	if err := r.setConditionOnly(ctx, sj, batchv1alpha1.ConditionLedgerValid, metav1.ConditionFalse, reason, msg); err != nil {
		return err
	}
	r.Recorder.Eventf(sj, nil, corev1.EventTypeWarning, reason, "Reconcile", "%s", msg)
	return nil
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
	r.pacer.countsWritten(client.ObjectKeyFromObject(sj))
	return true, nil
}

// markLedgerInvalid reports a ledger that cannot be read. Nothing else is
// done for the SafeJob until its ledger reads again.
func (r *SafeJobReconciler) markLedgerInvalid(ctx context.Context, sj *batchv1alpha1.SafeJob, cause error) error {
	log.FromContext(ctx).Error(cause, "Ledger is invalid; taking no action")
	msg := ledger.Truncate(fmt.Sprintf("status.ledger is invalid, no action taken: %v", cause), maxCopiedMessage)
	return r.markInvalid(ctx, sj, batchv1alpha1.ReasonLedgerCorrupt, msg)
}
