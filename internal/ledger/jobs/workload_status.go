package jobs

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// PodsReady reasons Kueue's job integrations use.
const (
	podsReadyStarted         = "Started"
	podsReadyRecovered       = "Recovered"
	podsReadyWaitForStart    = "WaitForStart"
	podsReadyWaitForRecovery = "WaitForRecovery"
)

// decideAfterPods decides the Workload once the pods are decided (in.Decided
// is their plan): a finished or deleted one loses its finalizer once no pod
// runs; one finished before its SafeJob (Kueue took it for an orphan) or too
// small for it is replaced once no pod runs; otherwise its status follows
// the pods: the reservation given back after eviction, PodsReady,
// reclaimablePods, and Finished.
func decideAfterPods(in *WorkloadInput) *WorkloadPlan {
	p := &WorkloadPlan{}
	wl := in.Workload
	if wl == nil {
		return p
	}
	podPlan := in.Decided
	if decideEndedWorkload(in, p) {
		return p
	}
	if need, holds, ok := resized(in); ok {
		if podPlan.Stopped && in.Prebuilt == "" {
			p.Drop = true
			p.Event = &WorkloadEvent{Reason: EventWorkloadResized, Message: fmt.Sprintf(
				"Workload %s holds quota for %d pods, the SafeJob needs %d: queueing again with a new Workload", wl.Name, holds, need)}
		}
		return p
	}
	status := wl.Status.DeepCopy()
	setCond := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, LastTransitionTime: metav1.NewTime(in.Now), ObservedGeneration: wl.Generation})
	}
	switch c := ledger.Finished(podPlan.Status.Conditions); {
	case c != nil:
		reason := kueue.WorkloadFinishedReasonSucceeded
		if c.Type == batchv1alpha1.ConditionFailed {
			reason = kueue.WorkloadFinishedReasonFailed
		}
		setCond(kueue.WorkloadFinished, metav1.ConditionTrue, reason, c.Message)
	case !gate(in).Admitted:
		p.GaveBack = giveBackQuota(wl, status, podPlan.Stopped, setCond)
	default:
		if !in.NoPodsReady {
			syncPodsReady(wl, status, podPlan.Status, setCond)
		}
		status.ReclaimablePods = reclaimable(in.Spec, wl, podPlan.Status)
	}
	if !sameStatus(&wl.Status, status) {
		p.Status = status
	}
	return p
}

// decideEndedWorkload decides a Workload that is finished or being deleted,
// and reports whether it was one: its finalizer goes once no pod runs, and
// one finished before its SafeJob is replaced once no pod runs.
func decideEndedWorkload(in *WorkloadInput, p *WorkloadPlan) bool {
	wl, stopped := in.Workload, in.Decided.Stopped
	finished := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished)
	switch {
	case finished != nil && finished.Status == metav1.ConditionTrue && ledger.Finished(in.Status.Conditions) != nil:
		p.Release = true
	case finished != nil && finished.Status == metav1.ConditionTrue && stopped && in.Prebuilt == "":
		p.Drop = true
		p.Event = &WorkloadEvent{Warning: true, Reason: EventWorkloadFinishedEarly, Message: fmt.Sprintf(
			"Workload %s was finished (%s: %s) before the SafeJob; queueing again", wl.Name, finished.Reason, finished.Message)}
	case finished != nil && finished.Status == metav1.ConditionTrue:
		// stopping the pods first
	case wl.DeletionTimestamp != nil:
		p.Release = stopped
	default:
		return false
	}
	return true
}

// giveBackQuota clears the reservation of an evicted Workload once no pod
// is left, as Kueue's job integrations do, and reports whether it did.
func giveBackQuota(wl *kueue.Workload, status *kueue.WorkloadStatus, stopped bool,
	setCond func(string, metav1.ConditionStatus, string, string)) bool {
	evicted := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
	if evicted == nil || evicted.Status != metav1.ConditionTrue || wl.Status.Admission == nil || !stopped {
		return false
	}
	requeued := metav1.ConditionFalse
	if evicted.Reason == kueue.WorkloadEvictedByPreemption || evicted.Reason == kueue.WorkloadEvictedDueToNodeFailures {
		requeued = metav1.ConditionTrue
	}
	setCond(kueue.WorkloadRequeued, requeued, evicted.Reason, evicted.Message)
	setCond(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", evicted.Message)
	setCond(kueue.WorkloadAdmitted, metav1.ConditionFalse, "NoReservation", "The workload has no reservation")
	status.Admission = nil
	return true
}

// syncPodsReady sets PodsReady as Kueue's job integrations do: True once
// every pod of the pod set is ready or succeeded.
func syncPodsReady(wl *kueue.Workload, status *kueue.WorkloadStatus, sj batchv1alpha1.SafeJobStatus,
	setCond func(string, metav1.ConditionStatus, string, string)) {
	// Under partial admission the pods admitted, not the pod set, are all
	// that run: Kueue's batch/v1 integration compares with the parallelism
	// it lowered to the admitted count.
	count := admittedCount(wl)
	prev := meta.FindStatusCondition(status.Conditions, kueue.WorkloadPodsReady)
	if sj.Ready+sj.Succeeded >= count {
		reason := podsReadyStarted
		if prev != nil && (prev.Reason == podsReadyWaitForRecovery || prev.Reason == podsReadyRecovered) {
			reason = podsReadyRecovered
		}
		if prev == nil || prev.Status != metav1.ConditionTrue || prev.Reason != reason {
			setCond(kueue.WorkloadPodsReady, metav1.ConditionTrue, reason, "All pods reached readiness and the workload is running")
		}
		return
	}
	reason, msg := podsReadyWaitForStart, "Not all pods are ready or succeeded"
	if prev != nil && (prev.Status == metav1.ConditionTrue || prev.Reason == podsReadyWaitForRecovery) {
		reason, msg = podsReadyWaitForRecovery, "At least one pod has failed, waiting for recovery"
	}
	if prev == nil || prev.Status != metav1.ConditionFalse || prev.Reason != reason {
		setCond(kueue.WorkloadPodsReady, metav1.ConditionFalse, reason, msg)
	}
}

// reclaimable is the quota a SafeJob no longer needs: pods of the pod set
// beyond the completions still to do.
func reclaimable(spec *batchv1alpha1.SafeJobSpec, wl *kueue.Workload, status batchv1alpha1.SafeJobStatus) []kueue.ReclaimablePod {
	if len(wl.Spec.PodSets) == 0 {
		return nil
	}
	left := completionsOrParallelism(spec) - status.Succeeded
	if n := admittedCount(wl) - left; n > 0 {
		return []kueue.ReclaimablePod{{Name: kueue.DefaultPodSetName, Count: n}}
	}
	return wl.Status.ReclaimablePods
}

// sameStatus compares what decideAfterPods may change of a Workload's status.
func sameStatus(a, b *kueue.WorkloadStatus) bool {
	return slices.EqualFunc(a.Conditions, b.Conditions, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
	}) && (a.Admission == nil) == (b.Admission == nil) &&
		slices.Equal(a.ReclaimablePods, b.ReclaimablePods)
}
