package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A batch/v1 Job whose spec.managedBy is ControllerName is run by SafeJob:
// its ledger is kept in a SafeJob of the same name that the Job controls
// (the Job's ledger), whose status the operator copies to the Job's in
// batch/v1's terms. docs/design.md, "Jobs managed by SafeJob".
const (
	// ManagedJobLabel marks the ledger of a managed Job with that Job's
	// UID, so that it is known as one after the Job is gone (orphaned).
	ManagedJobLabel = "batch.safejob.dev/managed-job-uid"
	// JobConditionRefused is a managed Job's condition, True while SafeJob
	// cannot run it: a field it cannot honour, or a SafeJob of the Job's name
	// that is not the Job's ledger.
	JobConditionRefused batchv1.JobConditionType = "SafeJobRefused"
)

// ManagesJob reports whether SafeJob runs job: its spec.managedBy names it.
func ManagesJob(job *batchv1.Job) bool {
	return ptr.Deref(job.Spec.ManagedBy, "") == ControllerName
}

// ManagedJobOf returns the controller reference of a managed Job's ledger
// to its Job, nil for any other SafeJob.
func ManagedJobOf(sj *SafeJob) *metav1.OwnerReference {
	ref := metav1.GetControllerOfNoCopy(sj)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return nil
	}
	return ref
}

// IsJobLedger reports whether sj is a managed Job's ledger, controlled by
// its Job or orphaned by it.
func IsJobLedger(sj *SafeJob) bool {
	_, ok := sj.Labels[ManagedJobLabel]
	return ok || ManagedJobOf(sj) != nil
}
