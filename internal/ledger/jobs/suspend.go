package jobs

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// decideSuspend mirrors spec.suspend in the Suspended condition, after the
// queue gate (decideAdmission), and starts the clock of
// activeDeadlineSeconds when the SafeJob starts or resumes running.
func (d *decision) decideSuspend() {
	d.decideAdmission()
	suspended := ptr.Deref(d.in.Spec.Suspend, false)
	if !suspended && d.gateClosed() {
		return // not running: no start time, no resume
	}
	switch {
	case suspended && d.target == "":
		d.setCond(batchv1alpha1.ConditionSuspended, metav1.ConditionTrue, batchv1alpha1.ReasonSuspended, "Job suspended")
	case !suspended && d.isTrue(batchv1alpha1.ConditionSuspended):
		d.setCond(batchv1alpha1.ConditionSuspended, metav1.ConditionFalse, batchv1alpha1.ReasonResumed, "Job resumed")
		d.status.StartTime = ptr.To(metav1.NewTime(d.in.Now))
	case !suspended && d.status.StartTime == nil:
		d.status.StartTime = ptr.To(metav1.NewTime(d.in.Now))
	}
}

// decideAdmission mirrors the queue gate in the Admitted condition; a
// re-admission after eviction restarts the clock of activeDeadlineSeconds.
func (d *decision) decideAdmission() {
	q := d.in.Queue
	if q == nil {
		return
	}
	if q.Admitted {
		if c := d.cond(batchv1alpha1.ConditionAdmitted); c != nil && c.Status != metav1.ConditionTrue && d.status.StartTime != nil {
			d.status.StartTime = ptr.To(metav1.NewTime(d.in.Now))
		}
		d.setCond(batchv1alpha1.ConditionAdmitted, metav1.ConditionTrue, batchv1alpha1.ReasonAdmitted, q.Message)
		return
	}
	reason := q.Reason
	if reason == "" {
		reason = batchv1alpha1.ReasonQueued
	}
	d.setCond(batchv1alpha1.ConditionAdmitted, metav1.ConditionFalse, reason, q.Message)
}

// gateClosed reports whether the SafeJob is queued and not admitted.
func (d *decision) gateClosed() bool { return d.in.Queue != nil && !d.in.Queue.Admitted }

// noDeadline is what deadlineLeft says when no deadline runs: longer than
// any wait.
const noDeadline = time.Duration(1<<62 - 1)

// deadlineLeft is the time left before activeDeadlineSeconds; noDeadline
// when there is no running deadline.
func (d *decision) deadlineLeft() time.Duration {
	deadlineSeconds := d.in.Spec.ActiveDeadlineSeconds
	if deadlineSeconds == nil || d.status.StartTime == nil || ptr.Deref(d.in.Spec.Suspend, false) || d.gateClosed() {
		return noDeadline
	}
	return d.status.StartTime.Add(time.Duration(*deadlineSeconds) * time.Second).Sub(d.in.Now)
}
