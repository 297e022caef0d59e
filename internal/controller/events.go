package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// recordEvents reports, after a successful status write, the outcomes it
// committed and a finish it reached.
func (r *SafeJobReconciler) recordEvents(updated, old *batchv1alpha1.SafeJob, plan *jobs.Plan) {
	for _, e := range plan.Append {
		switch {
		case e.Type == batchv1alpha1.EntryFailed && e.Reason != batchv1alpha1.FailReasonIgnored:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, "PodFailed", "RecordOutcome",
				"Pod %s failed (%s)", e.Pod, e.Reason)
		case e.Type == batchv1alpha1.EntryLost:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, "PodLost", "RecordOutcome",
				"Pod %s disappeared before its outcome was seen", e.Pod)
		}
	}
	for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed, batchv1alpha1.ConditionSuspended} {
		c := meta.FindStatusCondition(updated.Status.Conditions, t)
		if c == nil || meta.IsStatusConditionPresentAndEqual(old.Status.Conditions, t, c.Status) {
			continue
		}
		kind := corev1.EventTypeNormal
		if t == batchv1alpha1.ConditionFailed {
			kind = corev1.EventTypeWarning
		}
		reason := c.Reason
		if t == batchv1alpha1.ConditionComplete {
			reason = "Completed"
		}
		r.Recorder.Eventf(updated, nil, kind, reason, "Finish", "%s", c.Message)
	}
}
