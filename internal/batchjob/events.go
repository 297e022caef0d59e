package batchjob

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Event is an event of a Job, as batch/v1's Job controller records it.
type Event struct {
	Type, Reason, Message string
}

// Events are the events batch/v1 records on a Job whose status goes from
// old to updated: Suspended and Resumed as the Suspended condition turns
// True or False, and, as the Job finishes, Completed or its failure's
// reason and message. The events of its pods are recorded where they are
// written.
func Events(old, updated *batchv1.JobStatus) []Event {
	var out []Event
	if turned(old, updated, batchv1.JobSuspended, corev1.ConditionTrue) {
		out = append(out, Event{corev1.EventTypeNormal, "Suspended", "Job suspended"})
	}
	if turned(old, updated, batchv1.JobSuspended, corev1.ConditionFalse) {
		out = append(out, Event{corev1.EventTypeNormal, "Resumed", "Job resumed"})
	}
	if turned(old, updated, batchv1.JobComplete, corev1.ConditionTrue) {
		out = append(out, Event{corev1.EventTypeNormal, "Completed", "Job completed"})
	}
	if turned(old, updated, batchv1.JobFailed, corev1.ConditionTrue) {
		c := JobCondition(updated.Conditions, batchv1.JobFailed)
		out = append(out, Event{corev1.EventTypeWarning, c.Reason, c.Message})
	}
	return out
}

// turned reports whether condition t has status s in updated and did not
// in old.
func turned(old, updated *batchv1.JobStatus, t batchv1.JobConditionType, s corev1.ConditionStatus) bool {
	c := JobCondition(updated.Conditions, t)
	if c == nil || c.Status != s {
		return false
	}
	o := JobCondition(old.Conditions, t)
	return o == nil || o.Status != s
}
