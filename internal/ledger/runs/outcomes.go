package runs

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// recordOutcomes appends the outcome of every open run that finished, is
// being deleted, vanished, or was never created.
func (d *decision) recordOutcomes() {
	// Under Replace a run being deleted while a newer time is due was
	// deleted to make way for it.
	_, newerDue := d.dueNow()
	for k, r := range d.open {
		// A manual run is never superseded: the policy does not apply to it.
		newerOpen := !r.Manual && slices.ContainsFunc(d.open[k+1:], func(o Ref) bool { return !o.Manual })
		var typ batchv1alpha1.EntryType
		var reason string
		if run := d.in.Runs[r.Name]; run == nil {
			typ, reason = d.absentOutcome(r.Name, newerOpen)
		} else {
			typ, reason = d.presentOutcome(run, newerOpen || (newerDue && !r.Manual))
		}
		if typ == "" {
			continue
		}
		// The UID stays in the ledger so that the run's pods are still
		// matched once the run is gone (UIDs).
		d.closing[r.Name] = true
		d.appendEntry(batchv1alpha1.LedgerEntry{Type: typ, Reason: reason, Run: r.Name,
			ScheduledTime: ptr.To(metav1.NewTime(r.ScheduledTime)), UID: string(d.runUID(r.Name))})
	}
}

// absentOutcome is the outcome of an open run the parent does not observe
// ("" while there is none yet): newerOpen says a newer run is open.
func (d *decision) absentOutcome(name string, newerOpen bool) (batchv1alpha1.EntryType, string) {
	switch {
	case newerOpen && d.policy() == batchv1alpha1.ReplaceConcurrent:
		// Replaced before it started: a newer run supersedes it.
		return batchv1alpha1.EntryEvicted, ReasonReplaced
	case d.in.Taken[name]:
		// Someone else holds the name: this run never ran here.
		return batchv1alpha1.EntryLost, ledger.ReasonNameTaken
	case d.in.Gone[name] && (d.in.Issued[name] || d.runUID(name) != ""):
		// Past its create window and absent: no create can land any more.
		// A run this process saw or created, or whose UID the parent
		// recorded, existed and was removed by someone else.
		return batchv1alpha1.EntryLost, ReasonVanished
	case d.in.Gone[name]:
		return batchv1alpha1.EntryLost, ReasonNotCreated
	}
	return "", "" // not created yet, or not observed yet
}

// presentOutcome is the outcome of an open run the parent observes ("" while
// it runs): superseded says a newer run is open or due.
func (d *decision) presentOutcome(run *batchv1alpha1.SafeJob, superseded bool) (batchv1alpha1.EntryType, string) {
	if c := ledger.Finished(run.Status.Conditions); c != nil {
		if c.Type != batchv1alpha1.ConditionComplete {
			return batchv1alpha1.EntryFailed, c.Reason
		}
		if t := run.Status.CompletionTime; t != nil && t.After(d.lastSuccess) {
			d.lastSuccess = t.Time
		}
		return batchv1alpha1.EntrySucceeded, c.Reason
	}
	if run.DeletionTimestamp == nil {
		return "", "" // running
	}
	if superseded && d.policy() == batchv1alpha1.ReplaceConcurrent {
		return batchv1alpha1.EntryEvicted, ReasonReplaced
	}
	return batchv1alpha1.EntryEvicted, ReasonDeleted
}
