package jobs

import (
	"crypto/sha1" //nolint:gosec // the Workload name hash of Kueue, not a security use
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// PodsReady reasons Kueue's job integrations use.
const (
	podsReadyStarted         = "Started"
	podsReadyRecovered       = "Recovered"
	podsReadyWaitForStart    = "WaitForStart"
	podsReadyWaitForRecovery = "WaitForRecovery"
)

const queueNameLabel = "kueue.x-k8s.io/queue-name"

// SuspendedAnnotation marks a Workload SafeJob deactivated because its
// SafeJob was suspended. It is written in the same update that sets
// spec.active to false, so SafeJob re-activates only a Workload it
// deactivated itself: a deactivation by Kueue (a rejected admission check,
// the requeuing limit, the maximum execution time) or by an admin (kubectl
// kueue stop workload) carries no mark and is Kueue's decision to undo.
const SuspendedAnnotation = "batch.safejob.dev/deactivated-for-suspend"

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

// WorkloadNames are the names a SafeJob's Workload may have, in order of
// preference. The first is the one Kueue gives the Workload of a job,
// "safejob-<name>-<hash>", hash over kind, group, name and UID. The second,
// "safejob-<name>-<hash of the UID>", is used only when a Workload the
// SafeJob does not control holds the first.
func WorkloadNames(name string, uid types.UID) []string {
	prefix := func(suffix int) string {
		p := "safejob-" + name
		if len(p) > 253-1-suffix {
			p = p[:253-1-suffix]
		}
		return strings.ToLower(p)
	}
	// Kueue hashes "Kind\nGroup\nname\nuid".
	key := strings.Join([]string{"SafeJob", batchv1alpha1.GroupVersion.Group, name, string(uid)}, "\n")
	kueueHash := sha1.Sum([]byte(key)) //nolint:gosec // Kueue's naming scheme
	uidHash := sha256.Sum256([]byte(uid))
	return []string{
		prefix(5) + "-" + hex.EncodeToString(kueueHash[:])[:5],
		prefix(10) + "-" + hex.EncodeToString(uidHash[:])[:10],
	}
}

// OwnWorkload picks the SafeJob's Workload among listed ones: only a
// Workload its UID controls counts, named as it names its Workloads (names,
// in order of preference). A Workload that holds a reservation is kept over
// one that does not. The others it controls are returned to be dropped;
// Workloads it does not control are neither: they are never touched.
func OwnWorkload(uid types.UID, names []string, list []*kueue.Workload) (own *kueue.Workload, drop []*kueue.Workload) {
	rank := func(wl *kueue.Workload) int {
		r := slices.Index(names, wl.Name)
		if wl.Status.Admission == nil {
			r += len(names)
		}
		return r
	}
	for _, wl := range list {
		if !controlledBy(wl, uid) {
			continue
		}
		switch {
		case !slices.Contains(names, wl.Name):
			drop = append(drop, wl)
		case own == nil || rank(wl) < rank(own):
			if own != nil {
				drop = append(drop, own)
			}
			own = wl
		default:
			drop = append(drop, wl)
		}
	}
	return own, drop
}

// controlledBy reports whether the object of uid is wl's controller.
func controlledBy(wl *kueue.Workload, uid types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(wl)
	return uid != "" && ref != nil && ref.UID == uid
}

// DecideWorkload decides what a queued SafeJob does with its Workload:
// before the pods are decided, the gate they run under and whether the
// Workload is created or its spec updated; after, its status, finalizer
// and replacement.
func DecideWorkload(in *WorkloadInput) *WorkloadPlan {
	if in.Decided != nil {
		return settle(in)
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

// specUpdate carries a change of user suspend to the Workload and, while
// it holds no quota, a changed queue label and a larger pod set (Kueue's
// integrations update a queued Workload to match its job, keeping its place
// in the queue). With the reservation held the queue stays, and an event
// says so. It returns the new spec (nil when unchanged) and whether the
// Workload is then marked deactivated for suspend.
func specUpdate(in *WorkloadInput) (*kueue.WorkloadSpec, bool, *WorkloadEvent) {
	wl := in.Workload
	active, marked := activation(in)
	reserved := meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	pending := !reserved && wl.Status.Admission == nil
	queue := kueue.LocalQueueName(in.Queue)
	grow := pending && WorkloadCount(in.Spec, in.Status) > podSetCount(wl) && podSetCount(wl) > 0
	if ptr.Deref(wl.Spec.Active, true) == active && suspendMarked(wl) == marked && (wl.Spec.QueueName == queue || reserved) && !grow {
		if wl.Spec.QueueName != queue {
			return nil, marked, &WorkloadEvent{Warning: true, Reason: EventQueueChangeIgnored, Message: fmt.Sprintf(
				"The Workload holds quota in LocalQueue %s; the new queue %s applies only if it is evicted", wl.Spec.QueueName, queue)}
		}
		return nil, marked, nil
	}
	spec := wl.Spec.DeepCopy()
	spec.Active = ptr.To(active)
	if !reserved {
		spec.QueueName = queue
	}
	if grow {
		for i := range spec.PodSets {
			if spec.PodSets[i].Name == kueue.DefaultPodSetName {
				spec.PodSets[i].Count = WorkloadCount(in.Spec, in.Status)
			}
		}
	}
	return spec, marked, nil
}

// activation decides the Workload's spec.active and its suspend mark. A
// suspended SafeJob deactivates an active Workload and marks it; a resumed
// one re-activates only a Workload it marked. A Workload deactivated by
// anyone else stays inactive whatever the SafeJob's suspend: as Kueue's own
// job integrations do, SafeJob stops and says why, and never overrides
// Kueue's decision.
func activation(in *WorkloadInput) (active, marked bool) {
	wl := in.Workload
	active, marked = ptr.Deref(wl.Spec.Active, true), suspendMarked(wl)
	switch suspend := ptr.Deref(in.Spec.Suspend, false); {
	case suspend && active:
		return false, true
	case !suspend && marked:
		return true, false
	}
	return active, marked
}

// suspendMarked reports whether SafeJob deactivated the Workload for suspend.
func suspendMarked(wl *kueue.Workload) bool { return wl.Annotations[SuspendedAnnotation] == "true" }

// Deactivated reports whether someone other than SafeJob deactivated the
// Workload: it stays stopped until the Workload is activated again.
func Deactivated(wl *kueue.Workload) bool {
	return wl != nil && !ptr.Deref(wl.Spec.Active, true) && !suspendMarked(wl)
}

// settle decides the Workload after the pods: a finished or deleted one
// loses its finalizer once no pod runs; one finished before its SafeJob
// (Kueue took it for an orphan) or too small for it is replaced once no pod
// runs; otherwise its status follows the pods: the reservation given back
// after eviction, PodsReady, reclaimablePods, and Finished.
func settle(in *WorkloadInput) *WorkloadPlan {
	p := &WorkloadPlan{}
	wl := in.Workload
	if wl == nil {
		return p
	}
	plan := in.Decided
	if settleEnded(in, p) {
		return p
	}
	if need, holds, ok := resized(in); ok {
		if plan.Stopped && in.Prebuilt == "" {
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
	switch c := ledger.Finished(plan.Status.Conditions); {
	case c != nil:
		reason := kueue.WorkloadFinishedReasonSucceeded
		if c.Type == batchv1alpha1.ConditionFailed {
			reason = kueue.WorkloadFinishedReasonFailed
		}
		setCond(kueue.WorkloadFinished, metav1.ConditionTrue, reason, c.Message)
	case !gate(in).Admitted:
		p.GaveBack = giveBackQuota(wl, status, plan.Stopped, setCond)
	default:
		if !in.NoPodsReady {
			syncPodsReady(wl, status, plan.Status, setCond)
		}
		status.ReclaimablePods = reclaimable(in.Spec, wl, plan.Status)
	}
	if !sameStatus(&wl.Status, status) {
		p.Status = status
	}
	return p
}

// settleEnded decides a Workload that is finished or being deleted, and
// reports whether it was one: its finalizer goes once no pod runs, and one
// finished before its SafeJob is replaced once no pod runs.
func settleEnded(in *WorkloadInput, p *WorkloadPlan) bool {
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

// sameStatus compares what settle may change of a Workload's status.
func sameStatus(a, b *kueue.WorkloadStatus) bool {
	return slices.EqualFunc(a.Conditions, b.Conditions, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
	}) && (a.Admission == nil) == (b.Admission == nil) &&
		slices.Equal(a.ReclaimablePods, b.ReclaimablePods)
}

// launchesOpen reports whether the SafeJob's ledger has a launch whose
// outcome is not recorded: its pod may still run.
func launchesOpen(status *batchv1alpha1.SafeJobStatus) bool {
	st, err := Replay(&status.Ledger)
	return err != nil || len(st.Open) > 0
}
