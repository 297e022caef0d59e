package batchjob

import (
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// jobConditions are the conditions of a ledger that batch/v1 defines for a
// Job, copied to it; the others (LedgerValid, Admitted, ...) are SafeJob's.
var jobConditions = []string{batchv1alpha1.ConditionSuspended, batchv1alpha1.ConditionFailureTarget,
	batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ConditionFailed, batchv1alpha1.ConditionComplete}

// terminal are the conditions a finished Job holds.
var terminal = []string{batchv1alpha1.ConditionFailed, batchv1alpha1.ConditionComplete}

// Status is the status of a managed Job whose ledger has status from:
// the counts, indexes and times as the ledger has them, no uncounted pods
// (the ledger counts each pod at once), and the conditions batch/v1
// defines, in the order batch/v1 sets them. Complete and Failed (and the
// completion time) wait until no pod of the Job is active or terminating,
// as batch/v1's do and as the API server's Job status validation requires;
// SuccessCriteriaMet and FailureTarget, which the ledger sets first, come
// meanwhile. A condition the Job already holds keeps its times while its
// status is unchanged; JobConditionRefused goes, as the Job now runs.
func Status(job *batchv1.Job, from *batchv1alpha1.SafeJobStatus, now metav1.Time) batchv1.JobStatus {
	st := batchv1.JobStatus{
		StartTime:               from.StartTime,
		Active:                  from.Active,
		Ready:                   ptr.To(from.Ready),
		Terminating:             ptr.To(ptr.Deref(from.Terminating, 0)),
		Succeeded:               from.Succeeded,
		Failed:                  from.Failed,
		CompletedIndexes:        from.CompletedIndexes,
		FailedIndexes:           from.FailedIndexes,
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
	}
	settled := st.Active == 0 && *st.Terminating == 0
	if findCondition(from.Conditions, batchv1alpha1.ConditionSuspended) == nil {
		// The ledger was made as the Job, created suspended, was resumed
		// (Unstarted): the Job says so, as batch/v1's does, and keeps saying
		// so first, where batch/v1 keeps it.
		if JobCondition(job.Status.Conditions, batchv1.JobSuspended) != nil {
			st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse,
				Reason: batchv1alpha1.ReasonResumed, Message: "Job resumed", LastProbeTime: now, LastTransitionTime: now})
		}
	}
	for _, t := range jobConditions {
		c := findCondition(from.Conditions, t)
		if c == nil || slices.Contains(terminal, t) && !settled {
			continue
		}
		st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: batchv1.JobConditionType(t),
			Status: corev1.ConditionStatus(c.Status), Reason: c.Reason, Message: c.Message,
			LastProbeTime: c.LastTransitionTime, LastTransitionTime: c.LastTransitionTime})
	}
	if settled && findCondition(from.Conditions, batchv1alpha1.ConditionComplete) != nil {
		st.CompletionTime = from.CompletionTime
	}
	running := slices.DeleteFunc(slices.Clone(job.Status.Conditions), func(c batchv1.JobCondition) bool {
		return c.Type == batchv1alpha1.JobConditionRefused
	})
	return withTimes(running, st, now)
}

// Refused is the status of a managed Job that SafeJob cannot run: its
// status as it is, with the JobConditionRefused condition saying why.
func Refused(job *batchv1.Job, reason, message string, now metav1.Time) batchv1.JobStatus {
	st := *job.Status.DeepCopy()
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c batchv1.JobCondition) bool { return c.Type == batchv1alpha1.JobConditionRefused })
	st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: batchv1alpha1.JobConditionRefused, Status: corev1.ConditionTrue,
		Reason: reason, Message: message, LastProbeTime: now, LastTransitionTime: now})
	return withTimes(job.Status.Conditions, st, now)
}

// Finished reports whether a Job holds Complete or Failed, True.
func Finished(job *batchv1.Job) bool {
	for _, t := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if c := JobCondition(job.Status.Conditions, t); c != nil && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Unstarted is the status of a managed Job that has no ledger yet because
// it was created suspended (as Kueue creates every Job it queues): what
// batch/v1 writes for such a Job, the Suspended condition and zero counts.
func Unstarted(job *batchv1.Job, now metav1.Time) batchv1.JobStatus {
	st := batchv1.JobStatus{Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0),
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{}}
	if ptr.Deref(job.Spec.Suspend, false) {
		st.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue,
			Reason: batchv1alpha1.ReasonSuspended, Message: "Job suspended", LastProbeTime: now, LastTransitionTime: now}}
	}
	return withTimes(job.Status.Conditions, st, now)
}

// withTimes keeps, for each condition of st the Job already holds with the
// same status, reason and message, the times it has; a condition the Job
// holds and st lacks is kept as it is after st's, since the API server
// refuses a status that drops a terminal condition or SuccessCriteriaMet.
func withTimes(old []batchv1.JobCondition, st batchv1.JobStatus, now metav1.Time) batchv1.JobStatus {
	for k := range st.Conditions {
		c := &st.Conditions[k]
		if o := JobCondition(old, c.Type); o != nil && o.Status == c.Status {
			if o.Reason == c.Reason && o.Message == c.Message {
				*c = *o
			} else {
				c.LastTransitionTime, c.LastProbeTime = o.LastTransitionTime, now
			}
		}
	}
	for _, o := range old {
		if JobCondition(st.Conditions, o.Type) == nil {
			st.Conditions = append(st.Conditions, o)
		}
	}
	return st
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for k := range conds {
		if conds[k].Type == t {
			return &conds[k]
		}
	}
	return nil
}

// JobCondition returns the condition of type t in conds, nil if none.
func JobCondition(conds []batchv1.JobCondition, t batchv1.JobConditionType) *batchv1.JobCondition {
	for k := range conds {
		if conds[k].Type == t {
			return &conds[k]
		}
	}
	return nil
}
