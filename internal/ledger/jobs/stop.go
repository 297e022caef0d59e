package jobs

import (
	"slices"

	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// Reasons of the Stopping and Evicted entries the controller writes itself.
const (
	EvictReasonSuspended  = "Suspended"
	EvictReasonStopped    = "JobFinishing"
	EvictReasonScaledDown = "ParallelismReduced"
	// EvictReasonFailing stops the pods of a SafeJob that is failing; as in
	// batch/v1, such a pod counts as failed unless it succeeded.
	EvictReasonFailing = "JobFailing"
)

// EvictReasonNotAdmitted is the reason of Evicted entries for pods stopped
// because their SafeJob's admission was withdrawn without a stated reason.
const EvictReasonNotAdmitted = "NotAdmitted"

// stopPods stops the victims (the launches of a stopping SafeJob, or those
// beyond a reduced parallelism) in two steps: it commits a Stopping entry
// for each, and deletes a pod only once the observed ledger holds its
// Stopping entry. The launch stays open until the pod has ended, and its
// outcome follows the committed reason, so a quick resume or scale-up can
// never turn a stopped pod's exit code into a counted failure. An uncreated
// launch stopped before it was created is closed at once: this process
// alone creates it, and has not.
func (d *decision) stopPods() {
	d.victims = d.pickVictims()
	stopsAppended := 0 // at most WaveSize Stopping entries in one write
	for _, ref := range sortedOpen(d.st) {
		reason, stopping := d.st.Stopping[ref.Name]
		if !stopping && !d.victims[ref.Name] {
			continue
		}
		if !stopping {
			reason = d.stopReason()
		}
		pod := d.observed[ref.Name]
		switch {
		case pod == nil && d.in.Uncreated[ref.Name]:
			d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryEvicted, Pod: ref.Name, Index: ref.Index,
				Attempt: ref.Attempt, Reason: reason})
			sameLaunch := func(c PodRef) bool { return c.Name == ref.Name }
			d.plan.Create = slices.DeleteFunc(d.plan.Create, sameLaunch)
			d.plan.Expired = slices.DeleteFunc(d.plan.Expired, sameLaunch) // closed here, not left for its grace
		case !stopping && stopsAppended < WaveSize:
			stopsAppended++
			d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryStopping, Pod: ref.Name, Index: ref.Index,
				Attempt: ref.Attempt, Reason: reason})
		case d.stopOrdered[ref.Name] != "" && pod != nil && d.in.LastSeen[ref.Name] != pod && !IsTerminal(pod) && pod.DeletionTimestamp == nil:
			d.plan.Delete = append(d.plan.Delete, ref.Name)
		}
	}
}

// pickVictims chooses the open launches to stop among those not stopping
// yet: all of them while the SafeJob stops, else the newest beyond
// parallelism.
func (d *decision) pickVictims() map[string]bool {
	victims := map[string]bool{}
	open := sortedOpen(d.st)
	indexed := d.in.Spec.CompletionMode == batchv1alpha1.IndexedCompletion
	var limit int32
	if indexed {
		limit = indexLimit(d.in.Spec)
	}
	// counts reports whether an open launch counts against parallelism:
	// not stopping already, and (Indexed) of an index below completions.
	counts := func(ref PodRef) bool {
		return d.st.Stopping[ref.Name] == "" && (!indexed || ref.Index < limit)
	}
	counting := 0
	for _, ref := range open {
		switch {
		case counts(ref):
			counting++
		case d.st.Stopping[ref.Name] == "":
			// Pods of indexes at or above completions are stopped first,
			// whatever parallelism says (an elastic Indexed SafeJob scaled
			// down).
			victims[ref.Name] = true
		}
	}
	// excess is how many of those that count to stop: all of them while the
	// SafeJob stops, else those beyond parallelism.
	excess := counting
	switch {
	case d.stopping:
	case workQueue(d.in.Spec) && d.st.Succeeded.Len() > 0:
		excess = 0 // after a success a work queue's pods finish, whatever parallelism says now (batch/v1)
	default:
		excess = counting - int(d.parallelism())
	}
	// The newest excess of those that count.
	for k := len(open) - 1; k >= 0 && excess > 0; k-- {
		if counts(open[k]) {
			victims[open[k].Name] = true
			excess--
		}
	}
	return victims
}

// stopReason is the reason of the Stopping entry of a victim that is not
// stopping yet: why the SafeJob stops, or a reduced parallelism.
func (d *decision) stopReason() string {
	switch {
	case d.target == batchv1alpha1.ConditionFailureTarget:
		return EvictReasonFailing
	case d.target != "":
		return EvictReasonStopped
	case d.gateClosed() && !ptr.Deref(d.in.Spec.Suspend, false):
		if d.in.Queue.Reason != "" {
			return d.in.Queue.Reason
		}
		return EvictReasonNotAdmitted
	case d.stopping:
		return EvictReasonSuspended
	default:
		return EvictReasonScaledDown
	}
}
