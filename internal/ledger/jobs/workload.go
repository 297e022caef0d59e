package jobs

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// Reasons of the Admitted condition of a queued SafeJob beyond Kueue's own;
// a stop they cause records the pods Evicted with the same reason.
const (
	// ReasonKueueMissing: the cluster does not serve the Workload API.
	ReasonKueueMissing = "KueueNotInstalled"
	// ReasonWorkloadMissing: the Workload is gone while pods are active.
	ReasonWorkloadMissing = "WorkloadMissing"
	// ReasonWorkloadDeleted: the Workload is being deleted.
	ReasonWorkloadDeleted = "WorkloadDeleted"
	// ReasonWorkloadResized: the SafeJob needs more pods than its Workload
	// holds quota for; it stops and queues again with a new Workload.
	ReasonWorkloadResized = "WorkloadResized"
	// ReasonWorkloadNameTaken: every name the SafeJob's Workload may have is
	// held by a Workload the SafeJob does not control.
	ReasonWorkloadNameTaken = "WorkloadNameTaken"
	// ReasonWaitingForChecks: quota is reserved, admission checks are pending.
	ReasonWaitingForChecks = "WaitingForAdmissionChecks"
)

// Events the Workload decisions ask for.
const (
	EventWorkloadFinishedEarly = "WorkloadFinishedEarly"
	EventWorkloadResized       = "WorkloadResized"
	EventQueueChangeIgnored    = "QueueChangeIgnored"
)

const queueNameLabel = "kueue.x-k8s.io/queue-name"

// WorkloadInput is what the controller gathered of a queued SafeJob's
// Workload. The same input decides twice in a reconcile: before the pods
// are decided (Decided nil) and after (Decided set).
type WorkloadInput struct {
	// Served is true when the cluster serves Kueue's Workload API.
	Served bool
	// Queue is the LocalQueue the SafeJob is labelled with.
	Queue string
	// Spec and Status are the SafeJob as observed.
	Spec   *batchv1alpha1.SafeJobSpec
	Status *batchv1alpha1.SafeJobStatus
	// Workload is the SafeJob's Workload, one its UID controls (see
	// OwnWorkload); nil when it has none.
	Workload *kueue.Workload
	// Created is true when Workload was created in this reconcile.
	Created bool
	// NamesTaken lists the Workload names held by Workloads the SafeJob does
	// not control, found when no name was left to create one.
	NamesTaken []string
	// Prebuilt names the Workload MultiKueue made for this SafeJob, a
	// worker cluster's copy (label kueue.x-k8s.io/prebuilt-workload-name):
	// the SafeJob runs only under it, never creates, replaces or deletes a
	// Workload, and never changes its spec (MultiKueue removes a copy whose
	// Workload no longer matches the manager's).
	Prebuilt string
	// Decided is the pod plan of this reconcile, written already; nil
	// before the pods are decided.
	Decided *Plan
	// NoPodsReady leaves the Workload's PodsReady condition as it is, as
	// Kueue's Job integration does when Kueue does not wait for pods ready:
	// each change of it is a Workload status write nothing else reads.
	NoPodsReady bool
	// Now stamps the conditions written.
	Now time.Time
}

// WorkloadPlan is what to do with a queued SafeJob's Workload.
type WorkloadPlan struct {
	// Gate is the admission the pods are decided under (Input.Queue); nil
	// when the SafeJob has finished and has no Workload left.
	Gate *QueueGate
	// Create asks for a Workload of Count pods.
	Create bool
	Count  int32
	// Spec is the Workload's new spec, nil when it is unchanged.
	Spec *kueue.WorkloadSpec
	// MarkSuspended, with Spec, is whether the updated Workload carries
	// SuspendedAnnotation.
	MarkSuspended bool
	// Status is the Workload's new status, nil when it is unchanged.
	Status *kueue.WorkloadStatus
	// GaveBack is true when Status gives the reservation back.
	GaveBack bool
	// Release asks to remove the resource-in-use finalizer.
	Release bool
	// Drop asks to release and delete the Workload: it no longer describes
	// the SafeJob and no pod runs under it; a new one follows.
	Drop bool
	// Event, when set, is an event to record about the Workload.
	Event *WorkloadEvent
}

// WorkloadEvent is an event about the Workload.
type WorkloadEvent struct {
	Warning         bool
	Reason, Message string
}

// DecideWorkload decides what a queued SafeJob does with its Workload:
// before the pods are decided, the gate they run under and whether the
// Workload is created or its spec updated; after, its status, finalizer
// and replacement.
func DecideWorkload(in *WorkloadInput) *WorkloadPlan {
	if in.Decided != nil {
		return decideAfterPods(in)
	}
	p := &WorkloadPlan{}
	wl := in.Workload
	switch {
	case !in.Served:
		p.Gate = &QueueGate{Reason: ReasonKueueMissing,
			Message: fmt.Sprintf("label %s is set but the Workload API (kueue.x-k8s.io/v1beta2) is not served; install Kueue", queueNameLabel)}
	case wl == nil:
		decideNoWorkload(in, p)
	case in.Created:
		p.Gate = &QueueGate{Reason: batchv1alpha1.ReasonQueued,
			Message: fmt.Sprintf("Workload %s created in LocalQueue %s", wl.Name, in.Queue)}
	case wl.DeletionTimestamp != nil:
		p.Gate = &QueueGate{Reason: ReasonWorkloadDeleted, Message: "the Workload is being deleted"}
	case in.Prebuilt != "":
		p.Gate = gate(in)
	default:
		p.Spec, p.MarkSuspended, p.Event = specUpdate(in)
		p.Gate = gate(in)
	}
	return p
}

// decideNoWorkload decides for a SafeJob that has no Workload: stop its
// pods first, wait for the names or MultiKueue's Workload, nothing once
// finished, or create one.
func decideNoWorkload(in *WorkloadInput, p *WorkloadPlan) {
	switch {
	case launchesOpen(in.Status):
		p.Gate = &QueueGate{Reason: ReasonWorkloadMissing, Message: "the Workload is gone; stopping pods before queueing again"}
	case in.Prebuilt != "" && len(in.NamesTaken) > 0:
		p.Gate = &QueueGate{Reason: ReasonWorkloadNameTaken, Message: fmt.Sprintf(
			"Workload %s, made by MultiKueue for this SafeJob, is controlled by another object; no pod runs", in.Prebuilt)}
	case in.Prebuilt != "":
		p.Gate = &QueueGate{Reason: ReasonWaitingForPrebuilt, Message: fmt.Sprintf(
			"waiting for Workload %s, which MultiKueue creates for this SafeJob", in.Prebuilt)}
	case len(in.NamesTaken) > 0:
		p.Gate = &QueueGate{Reason: ReasonWorkloadNameTaken,
			Message: fmt.Sprintf("Workloads the SafeJob does not control hold every name its Workload may have (%s); "+
				"it queues once one of them is free", strings.Join(in.NamesTaken, ", "))}
	case ledger.Finished(in.Status.Conditions) != nil:
		// nothing left to queue
	default:
		p.Create, p.Count = true, WorkloadCount(in.Spec, in.Status)
	}
}

// WorkloadCount is the size of the pod set a SafeJob asks quota for:
// min(parallelism, completions left), at least 1; a work queue counts
// parallelism as its completions, as Kueue does for a batch/v1 Job.
func WorkloadCount(spec *batchv1alpha1.SafeJobSpec, status *batchv1alpha1.SafeJobStatus) int32 {
	left := completionsOrParallelism(spec) - status.Succeeded
	return max(min(ptr.Deref(spec.Parallelism, 1), left), 1)
}

// MinCount is the pod set's minCount for partial admission, from the
// kueue.x-k8s.io/job-min-parallelism annotation: nil unless it is a whole
// number from 1 to count-1 (the admission policy refuses other values; a
// Workload of count pods left to do asks for all of them).
func MinCount(annotation string, count int32) *int32 {
	v, err := strconv.ParseInt(annotation, 10, 32)
	if err != nil || v < 1 || int32(v) >= count {
		return nil
	}
	return ptr.To(int32(v))
}

// launchesOpen reports whether the SafeJob's ledger has a launch whose
// outcome is not recorded: its pod may still run.
func launchesOpen(status *batchv1alpha1.SafeJobStatus) bool {
	st, err := Replay(&status.Ledger)
	return err != nil || len(st.Open) > 0
}
