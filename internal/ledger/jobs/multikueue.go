package jobs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/safejob/safejob/internal/ledger"
)

// Keys of Kueue's MultiKueue.
const (
	// PrebuiltWorkloadKey names, on a worker cluster's copy of a SafeJob,
	// the Workload MultiKueue created for it: the copy runs under that
	// Workload and never creates its own. Kueue up to v0.17 writes it as a
	// label; from v0.18 (gate WorkloadIdentifierAnnotations, on by default)
	// as an annotation of the same key.
	PrebuiltWorkloadKey = "kueue.x-k8s.io/prebuilt-workload-name"
	// ReasonWaitingForPrebuilt: the copy's Workload is not there yet.
	ReasonWaitingForPrebuilt = "WaitingForPrebuiltWorkload"
)

// PrebuiltWorkloadName is the name of the Workload MultiKueue made for a
// worker cluster's copy of a SafeJob, "" for any other object. It reads the
// annotation first and the label second, as Kueue's own job integrations
// do, so a copy made by any supported Kueue is recognised.
func PrebuiltWorkloadName(obj metav1.Object) string {
	if name := obj.GetAnnotations()[PrebuiltWorkloadKey]; name != "" {
		return name
	}
	return obj.GetLabels()[PrebuiltWorkloadKey]
}

// DecideDispatched decides the Workload of a SafeJob on a manager cluster
// (spec.managedBy kueue.x-k8s.io/multikueue): SafeJob queues it, and
// MultiKueue runs it on a worker cluster and copies the worker's status
// back. No pod runs here and SafeJob writes no status of the SafeJob's; it
// only keeps the Workload: created while the SafeJob is unfinished and has
// none, its spec following suspend and the queue, its quota given back
// after an eviction once the worker reports no pod running, its finalizer
// removed once it is finished or deleted. A Workload finished with the
// SafeJob's result is never replaced; one finished before any result (an
// orphan, OwnerNotFound) is.
func DecideDispatched(in *WorkloadInput) *WorkloadPlan {
	p := &WorkloadPlan{}
	wl := in.Workload
	finished := ledger.Finished(in.Status.Conditions) != nil
	switch {
	case !in.Served:
		return p
	case wl == nil && !finished && len(in.NamesTaken) == 0:
		p.Create, p.Count = true, WorkloadCount(in.Spec, in.Status)
		return p
	case wl == nil:
		return p
	case wl.DeletionTimestamp != nil:
		p.Release = true
		return p
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		switch {
		case finished || c.Reason == kueue.WorkloadFinishedReasonSucceeded || c.Reason == kueue.WorkloadFinishedReasonFailed:
			p.Release = true
		default:
			p.Drop = true
			p.Event = &WorkloadEvent{Warning: true, Reason: EventWorkloadFinishedEarly, Message: fmt.Sprintf(
				"Workload %s was finished (%s: %s) before the SafeJob; queueing again", wl.Name, c.Reason, c.Message)}
		}
		return p
	}
	p.Spec, p.MarkSuspended, p.Event = specUpdate(in)
	status := wl.Status.DeepCopy()
	setCond := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, LastTransitionTime: metav1.NewTime(in.Now), ObservedGeneration: wl.Generation})
	}
	if p.GaveBack = giveBackQuota(wl, status, remoteStopped(in), setCond); p.GaveBack {
		p.Status = status
	}
	return p
}

// remoteStopped reports whether the worker runs none of the SafeJob's pods
// any more: the status MultiKueue copied shows none active and no launch
// open. An eviction for the admission check (MultiKueue lost the worker:
// its workerLostTimeout passed) does not wait for that: the lost worker's
// status will not change any more, and MultiKueue removes its copy once it
// can.
func remoteStopped(in *WorkloadInput) bool {
	evicted := meta.FindStatusCondition(in.Workload.Status.Conditions, kueue.WorkloadEvicted)
	return (in.Status.Active == 0 && !launchesOpen(in.Status)) ||
		(evicted != nil && evicted.Reason == kueue.WorkloadEvictedByAdmissionCheck)
}
