package jobs

import (
	"cmp"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// stickyTarget is the target condition an earlier decision set and this one
// keeps: FailureTarget before SuccessCriteriaMet, "" for none.
func (d *decision) stickyTarget() string {
	for _, t := range []string{batchv1alpha1.ConditionFailureTarget, batchv1alpha1.ConditionSuccessCriteriaMet} {
		if d.isTrue(t) {
			return t
		}
	}
	return ""
}

// decideTarget sets SuccessCriteriaMet or FailureTarget once the ledger
// (or the clock, for the deadline) says the SafeJob is done.
func (d *decision) decideTarget() {
	if d.target != "" {
		return
	}
	spec, st := d.in.Spec, d.st
	completions := ptr.Deref(spec.Completions, 1)
	if workQueue(spec) {
		// Done once a pod succeeded and every other pod has ended (batch/v1).
		completions = math.MaxInt32
		if st.Succeeded.Len() > 0 && len(st.Open) == 0 {
			completions = 0
		}
	}
	succeeded, failed := d.inRange()
	targetCond, reason, msg := batchv1alpha1.ConditionFailureTarget, "", ""
	matched, met := successPolicyMatch(spec.SuccessPolicy, completions, &succeeded)
	switch {
	case met:
		// batch/v1 decides a success policy before any failure.
		targetCond, reason, msg = batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ReasonSuccessPolicy, matched
	case st.FailJob:
		reason, msg = batchv1alpha1.ReasonPodFailurePolicy, d.failJobReason()
	case spec.BackoffLimitPerIndex == nil && st.Failed > ptr.Deref(spec.BackoffLimit, 6), d.restartsPastLimit():
		reason, msg = batchv1alpha1.ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
	case spec.MaxFailedIndexes != nil && int32(failed.Len()) > *spec.MaxFailedIndexes:
		reason, msg = batchv1alpha1.ReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes"
	case d.deadlineLeft() < 0:
		reason, msg = batchv1alpha1.ReasonDeadlineExceeded, "Job was active longer than specified deadline"
	case int32(succeeded.Len()) >= completions:
		targetCond, reason = batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ReasonCompletionsReached
		msg = "Reached expected number of succeeded pods"
	case failed.Len() > 0 && int32(succeeded.Len()+failed.Len()) >= completions:
		reason, msg = batchv1alpha1.ReasonFailedIndexes, "Job has failed indexes"
	default:
		return
	}
	d.target, d.stopping = targetCond, true
	d.setCond(targetCond, metav1.ConditionTrue, reason, msg)
}

// finish turns the target into Complete or Failed once no launch is open and
// every pod that still holds the finalizer has its launch closed in the
// ledger being written (an outcome is only ever recorded for a terminal pod):
// those are released once this write is observed, so the SafeJob finishes in
// the same write as its last outcome instead of one write later.
func (d *decision) finish() {
	if d.target == "" || len(d.st.Open) > 0 {
		return
	}
	for name, pod := range d.observed {
		if hasFinalizer(pod) && d.in.LastSeen[name] != pod && !d.launchClosed(pod) {
			return
		}
	}
	targetCond := d.cond(d.target)
	if d.target == batchv1alpha1.ConditionSuccessCriteriaMet {
		d.setCond(batchv1alpha1.ConditionComplete, metav1.ConditionTrue, targetCond.Reason, targetCond.Message)
		d.status.CompletionTime = ptr.To(metav1.NewTime(d.in.Now))
		return
	}
	d.setCond(batchv1alpha1.ConditionFailed, metav1.ConditionTrue, targetCond.Reason, targetCond.Message)
}

// launchClosed reports whether the pod's launch is closed in the ledger being
// written.
func (d *decision) launchClosed(pod *corev1.Pod) bool {
	ref, ok := RefFromPod(pod)
	return ok && d.st.IsClosed(ref)
}

// TTLLeft is the time until a finished SafeJob may be deleted under
// ttlSecondsAfterFinished; ok is false when no TTL applies.
func TTLLeft(spec *batchv1alpha1.SafeJobSpec, status *batchv1alpha1.SafeJobStatus, now time.Time) (time.Duration, bool) {
	if spec.TTLSecondsAfterFinished == nil {
		return 0, false
	}
	if c := ledger.Finished(status.Conditions); c != nil {
		return c.LastTransitionTime.Add(time.Duration(*spec.TTLSecondsAfterFinished) * time.Second).Sub(now), true
	}
	return 0, false
}

// failJobReason is the message of a SafeJob failed by a FailJob rule:
// batch/v1's, naming the pod, as the decision that recorded its failure
// wrote it, and kept after; a ledger that records the failure without the
// condition (written by an older build) gets a message without the pod.
func (d *decision) failJobReason() string {
	if c := d.cond(batchv1alpha1.ConditionFailureTarget); c != nil && c.Reason == batchv1alpha1.ReasonPodFailurePolicy {
		return c.Message
	}
	return cmp.Or(d.failJobMessage, "A pod failure matched a podFailurePolicy rule with action FailJob")
}
