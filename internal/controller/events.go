package controller

import (
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

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

// jobEventTarget is the Job that the ledger sj keeps, on which the events
// of its pod writes are recorded, nil for any other SafeJob: a managed
// Job's users read them where batch/v1 puts them (kubectl describe job).
func jobEventTarget(sj *batchv1alpha1.SafeJob) *batchv1.Job {
	ref := batchv1alpha1.ManagedJobOf(sj)
	if ref == nil {
		return nil
	}
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: sj.Namespace, Name: ref.Name, UID: ref.UID}}
}

// recordFailedCreate reports a pod create the API server refused.
func (r *SafeJobReconciler) recordFailedCreate(sj *batchv1alpha1.SafeJob, pod string, err error) {
	if job := jobEventTarget(sj); job != nil {
		r.Recorder.Eventf(job, sj, corev1.EventTypeWarning, "FailedCreate", "CreatePod", "Error creating: %v", err)
		return
	}
	r.Recorder.Eventf(sj, nil, corev1.EventTypeWarning, "FailedCreate", "CreatePod", "Error creating pod %s: %v", pod, err)
}

// recordDeletes reports, on a managed Job, the pods its ledger deleted, as
// batch/v1 does; a SafeJob's deletes are told by its status.
func (r *SafeJobReconciler) recordDeletes(sj *batchv1alpha1.SafeJob, deleted []string) {
	job := jobEventTarget(sj)
	if job == nil {
		return
	}
	slices.Sort(deleted)
	for _, name := range deleted {
		r.Recorder.Eventf(job, podEventRelated(sj, name, 0), corev1.EventTypeNormal, "SuccessfulDelete", "DeletePod", "Deleted pod: %s", name)
	}
}

// distinctPodEvents is how many of a managed Job's first pods get an event
// of their own each, as batch/v1's event aggregation gives a Job's first
// ten similar events; the events of later pods are one series (an event
// whose count grows), whose writes do not grow with the pods.
const distinctPodEvents = 10

// podEventRelated is the related object of the event of a managed Job's
// pod, the k-th its ledger counts: the pod, which makes its event distinct
// from its siblings', for the first distinctPodEvents; else none.
func podEventRelated(sj *batchv1alpha1.SafeJob, pod string, k int) runtime.Object {
	if k >= distinctPodEvents {
		return nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sj.Namespace, Name: pod}}
}
