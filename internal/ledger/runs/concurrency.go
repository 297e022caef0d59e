package runs

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// policy is the parent's concurrencyPolicy, Allow when it is not set.
func (d *decision) policy() batchv1alpha1.ConcurrencyPolicy {
	if d.in.Spec.ConcurrencyPolicy == "" {
		return batchv1alpha1.AllowConcurrent
	}
	return d.in.Spec.ConcurrencyPolicy
}

// blockingRun names an earlier run that keeps a new one from starting under
// Forbid or Replace ("" when none does): one still open, or one with a pod
// still running or terminating. Runs started by hand do not count, as Jobs
// made from a CronJob by hand do not.
func (d *decision) blockingRun(except string) string {
	for _, r := range d.open {
		if r.Name != except && !d.closing[r.Name] && !r.Manual {
			return r.Name
		}
	}
	for _, name := range ledger.SortedKeys(d.in.Busy) {
		if name != except && d.in.Busy[name] > 0 && !d.isManual(name) {
			return name
		}
	}
	return ""
}

// commitWaits reports, under Forbid and Replace, that an earlier run or a
// pod of one keeps the run due at recent from starting, and says so. Under
// Replace it deletes the earlier runs. The due time is committed only once
// nothing is in its way, so that the run is created at once, within its
// create window; until then it stays uncommitted, as under
// startingDeadlineSeconds, and a later time supersedes it.
func (d *decision) commitWaits(recent time.Time) bool {
	policy := d.policy()
	if policy == batchv1alpha1.AllowConcurrent {
		return false
	}
	blocker := d.blockingRun("")
	if blocker == "" {
		return false
	}
	msg := fmt.Sprintf("concurrencyPolicy Forbid: run %s is still active; the run due at %s waits for it",
		blocker, recent.UTC().Format(time.RFC3339))
	if policy == batchv1alpha1.ReplaceConcurrent {
		d.replace(d.open)
		msg = fmt.Sprintf("concurrencyPolicy Replace: run %s is being replaced; the run due at %s starts once it and its pods are gone",
			blocker, recent.UTC().Format(time.RFC3339))
	}
	d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonWaitingForRun, msg)
	return true
}

// createWaits reports, under Forbid and Replace, that an earlier run or a
// pod of one keeps the committed run r from being created, and says so;
// under Replace it deletes the runs before it. A run asked for by hand
// never waits.
func (d *decision) createWaits(r Ref, before []Ref) bool {
	if d.policy() == batchv1alpha1.AllowConcurrent || r.Manual {
		return false
	}
	if d.policy() == batchv1alpha1.ReplaceConcurrent {
		d.replace(before)
	}
	blocker := d.blockingRun(r.Name)
	if blocker != "" {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonWaitingForRun,
			fmt.Sprintf("concurrencyPolicy %s: run %s waits until run %s and its pods are gone", d.policy(), r.Name, blocker))
	}
	return blocker != ""
}

// replace deletes the scheduled runs among these that exist and are not
// being deleted or closed: Replace never deletes a run asked for by hand.
func (d *decision) replace(runs []Ref) {
	for _, r := range runs {
		if run := d.in.Runs[r.Name]; run != nil && run.DeletionTimestamp == nil && !d.closing[r.Name] && !r.Manual {
			d.deleteRun(r.Name)
		}
	}
}
