package jobs

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// gate reads the admission of an existing Workload.
func gate(in *WorkloadInput) *QueueGate {
	wl := in.Workload
	if Deactivated(wl) {
		reason, msg := kueue.WorkloadDeactivated, "The workload is deactivated"
		if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue &&
			strings.HasPrefix(c.Reason, kueue.WorkloadDeactivated) {
			reason, msg = c.Reason, c.Message
		}
		return &QueueGate{Reason: reason, Message: fmt.Sprintf(
			"%s; the SafeJob stays stopped until Workload %s is activated again (spec.active: true)", msg, wl.Name)}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
		return &QueueGate{Reason: c.Reason, Message: c.Message}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		return &QueueGate{Reason: c.Reason, Message: "the Workload is finished: " + c.Message}
	}
	if need, holds, ok := resized(in); ok {
		return &QueueGate{Reason: ReasonWorkloadResized,
			Message: fmt.Sprintf("the SafeJob needs %d pods and Workload %s holds quota for %d; stopping pods to queue again with %d",
				need, wl.Name, holds, need)}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadAdmitted); c != nil && c.Status == metav1.ConditionTrue &&
		wl.Status.Admission != nil {
		return &QueueGate{Admitted: true, MaxActive: admittedCount(wl),
			Message: fmt.Sprintf("Workload %s admitted by ClusterQueue %s", wl.Name, wl.Status.Admission.ClusterQueue)}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil {
		if c.Status == metav1.ConditionTrue {
			return &QueueGate{Reason: ReasonWaitingForChecks, Message: c.Message + "; waiting for admission checks"}
		}
		return &QueueGate{Reason: batchv1alpha1.ReasonQueued, Message: c.Message}
	}
	return &QueueGate{Reason: batchv1alpha1.ReasonQueued,
		Message: fmt.Sprintf("Workload %s waits in LocalQueue %s", wl.Name, wl.Spec.QueueName)}
}

// resized reports whether the SafeJob, holding a reservation that is not
// being withdrawn, needs more pods than its Workload asked for (parallelism
// or completions raised since): as Kueue's job integrations do with a job
// no longer equivalent to its Workload, it stops and queues again. need is
// the count of the new Workload, holds the count of the current one.
func resized(in *WorkloadInput) (need, holds int32, ok bool) {
	wl := in.Workload
	if wl.Status.Admission == nil || meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) ||
		meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) || ledger.Finished(in.Status.Conditions) != nil {
		return 0, 0, false
	}
	need, holds = WorkloadCount(in.Spec, in.Status), podSetCount(wl)
	return need, holds, holds > 0 && need > holds
}

// podSetCount is the count of the Workload's main pod set.
func podSetCount(wl *kueue.Workload) int32 {
	for _, ps := range wl.Spec.PodSets {
		if ps.Name == kueue.DefaultPodSetName {
			return ps.Count
		}
	}
	return 0
}

// admittedCount is the number of pods the admission covers: the count
// assigned to the main pod set, else the pod set's own count.
func admittedCount(wl *kueue.Workload) int32 {
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if psa.Name == kueue.DefaultPodSetName && psa.Count != nil {
			return *psa.Count
		}
	}
	return podSetCount(wl)
}
