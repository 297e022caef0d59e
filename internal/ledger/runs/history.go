package runs

import (
	"slices"
	"time"

	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// finishedRun is a finished run the parent keeps as history, until the
// history limit of its result deletes it.
type finishedRun struct {
	name      string
	scheduled time.Time
}

// cleanUp releases the finalizer of runs whose outcome is committed and
// deletes finished runs beyond the history limits, oldest first. A
// finalizer is released only once no create of the run can land any more
// (fenceClosed): until then the run cannot disappear through the parent, so
// a create still in flight meets AlreadyExists and never makes it again.
func (d *decision) cleanUp() {
	var succeeded, failed []finishedRun
	for _, name := range ledger.SortedKeys(d.in.Runs) {
		run := d.in.Runs[name]
		if !d.isClosed(run) {
			continue
		}
		if slices.Contains(run.Finalizers, batchv1alpha1.RunFinalizer) && d.fenceClosed(name) {
			d.plan.Release = append(d.plan.Release, name)
		}
		finished := ledger.Finished(run.Status.Conditions)
		if run.DeletionTimestamp != nil {
			continue
		}
		if finished == nil {
			// Closed before it was seen (replaced before it started, while
			// another process created it): it must not run.
			d.deleteRun(name)
			continue
		}
		scheduled, _ := ScheduledTime(run)
		if finished.Type == batchv1alpha1.ConditionComplete {
			succeeded = append(succeeded, finishedRun{name, scheduled})
		} else {
			failed = append(failed, finishedRun{name, scheduled})
		}
	}
	d.pruneHistory(succeeded, d.in.Spec.SuccessfulRunsHistoryLimit, batchv1alpha1.DefaultSuccessfulRunsHistoryLimit)
	d.pruneHistory(failed, d.in.Spec.FailedRunsHistoryLimit, batchv1alpha1.DefaultFailedRunsHistoryLimit)
}

// pruneHistory deletes the oldest of these finished runs beyond the history
// limit (defaultLimit when it is not set).
func (d *decision) pruneHistory(history []finishedRun, limit *int32, defaultLimit int32) {
	slices.SortFunc(history, func(a, b finishedRun) int { return a.scheduled.Compare(b.scheduled) })
	if excess := len(history) - int(ptr.Deref(limit, defaultLimit)); excess > 0 {
		for _, run := range history[:excess] {
			d.deleteRun(run.name)
		}
	}
}

// isClosed reports whether the observed ledger records the run's outcome,
// listed or folded.
func (d *decision) isClosed(run *batchv1alpha1.SafeJob) bool {
	if _, ok := d.st.Closed[run.Name]; ok {
		return true
	}
	if _, ok := d.st.Open[run.Name]; ok {
		return false
	}
	t, ok := ScheduledTime(run)
	if IsManual(run) {
		return ok && !t.After(d.st.FoldedManual)
	}
	return ok && !t.After(d.st.Folded)
}
