package jobs

import (
	"fmt"
	"slices"

	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// writeStatus derives the counters from the ledger, packs the launches and
// stops it appends, and folds the outcomes beyond the newest KeepOutcomes.
func (d *decision) writeStatus() error {
	s, st := &d.status, d.st
	l := ledger.Append(&d.in.Status.Ledger, d.plan.Append)
	listed := len(d.in.Status.Ledger.Entries)
	l.Entries = append(l.Entries[:listed], Pack(l.Entries[listed:])...) // the entries listed before stay as written
	if len(d.unapplied) > 0 {
		// Every entry decided is applied to st before the status is written.
		panic(fmt.Sprintf("ledger: %d entries decided but not applied", len(d.unapplied)))
	}
	if len(st.Closed) > KeepOutcomes {
		var err error
		if l, err = foldClosed(&l, st, KeepOutcomes); err != nil { // st is the State of l
			return err
		}
	}
	s.Ledger = l
	d.setCounters(s, st)
	ledger.MarkLedgerValid(&s.Conditions, d.in.Now)
	d.plan.Status = *s
	d.plan.Stopped = d.stopping && d.target == "" && len(st.Open) == 0 && d.podsQuiet()
	if !d.finished() && d.target == "" {
		if left := d.deadlineLeft(); left < noDeadline {
			d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, left)
		}
	}
	return nil
}

// setCounters derives the status counters from the ledger's state.
func (d *decision) setCounters(s *batchv1alpha1.SafeJobStatus, st *State) {
	s.Active, s.Ready = 0, 0
	var terminating int32
	for name, pod := range d.observed {
		switch _, open := st.Open[name]; {
		case IsTerminal(pod) || d.in.LastSeen[name] == pod:
		case pod.DeletionTimestamp != nil:
			terminating++
		case open:
			s.Active++
			if isReady(pod) {
				s.Ready++
			}
		}
	}
	s.Terminating = ptr.To(terminating)
	succeeded, failed := d.inRange()
	s.Succeeded = int32(succeeded.Len())
	s.Failed = st.Failed
	s.CompletedIndexes = ""
	if d.in.Spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		s.CompletedIndexes = succeeded.String()
	}
	s.FailedIndexes = nil
	if d.in.Spec.BackoffLimitPerIndex != nil {
		s.FailedIndexes = ptr.To(failed.String())
	}
	s.Completions = completionsColumn(d.in.Spec, s.Succeeded)
}

// podsQuiet reports that every observed pod has terminated and none keeps
// the ledger finalizer beyond this plan.
func (d *decision) podsQuiet() bool {
	for name, pod := range d.observed {
		if d.in.LastSeen[name] == pod {
			continue
		}
		if !IsTerminal(pod) || (hasFinalizer(pod) && !slices.Contains(d.plan.Release, name)) {
			return false
		}
	}
	return true
}

// inRange returns the succeeded and failed indexes that count: for an
// Indexed SafeJob those below completions. Completions of an Indexed SafeJob
// may shrink with its parallelism (elastic, as in batch/v1); the ledger
// keeps every index it recorded (I4), and an index above completions
// counts again if completions grow back.
func (d *decision) inRange() (succeeded, failed ledger.IndexSet) {
	if d.in.Spec.CompletionMode != batchv1alpha1.IndexedCompletion {
		return d.st.Succeeded, d.st.FailedIndexes
	}
	c := ptr.Deref(d.in.Spec.Completions, 1)
	return d.st.Succeeded.Below(c), d.st.FailedIndexes.Below(c)
}

// completionsColumn is what kubectl shows for a batch/v1 Job in its
// COMPLETIONS column: "3/5", or "0/1 of 4" for a work queue of
// parallelism 4.
func completionsColumn(spec *batchv1alpha1.SafeJobSpec, succeeded int32) string {
	switch p := ptr.Deref(spec.Parallelism, 1); {
	case spec.Completions != nil:
		return fmt.Sprintf("%d/%d", succeeded, *spec.Completions)
	case p > 1:
		return fmt.Sprintf("%d/1 of %d", succeeded, p)
	default:
		return fmt.Sprintf("%d/1", succeeded)
	}
}
