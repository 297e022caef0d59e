package jobs

import (
	"fmt"
	"slices"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// Fold moves every closed launch (its Launched and Stopping entries and its
// outcome) into the checkpoint, keeping the keepOutcomes newest outcomes
// listed. Open launches stay listed, packed (Pack) afresh: an entry with a
// count whose pods have partly closed is listed from the first to the last
// pod still listed, and no longer stands for the pods between them that
// folded (the checkpoint holds them). The State of the result equals the
// State of l.
func Fold(l *batchv1alpha1.Ledger, keepOutcomes int) (batchv1alpha1.Ledger, error) {
	st, err := Replay(l)
	if err != nil {
		return batchv1alpha1.Ledger{}, err
	}
	return foldClosed(l, st, keepOutcomes)
}

// foldClosed is Fold for a ledger whose State is known: Decide has it
// without replaying the ledger it wrote.
func foldClosed(l *batchv1alpha1.Ledger, st *State, keepOutcomes int) (batchv1alpha1.Ledger, error) {
	closed := st.Closed
	// keptOutcomes holds the pods of the newest keepOutcomes outcomes: they
	// stay listed, with their Launched entries (an outcome stands for one
	// pod: never packed).
	keptOutcomes := map[string]bool{}
	for k := len(l.Entries) - 1; k >= 0 && len(keptOutcomes) < keepOutcomes; k-- {
		if e := &l.Entries[k]; !e.Countable() {
			keptOutcomes[e.Pod] = true
		}
	}
	// toFold gathers the entries that fold, to replay them alone on top of
	// the old checkpoint; result is the ledger that stays listed. An entry
	// that stands for no closed pod stays listed as it is: only the runs
	// that do are expanded, so a pass does not name every open pod.
	toFold := &batchv1alpha1.Ledger{Checkpoint: l.Checkpoint}
	result := batchv1alpha1.Ledger{Seq: l.Seq}
	// Of the entry being expanded, the first pod that stays listed and the
	// index of the last one (runListed once there is one): the entry is
	// listed again from the one to the other.
	var firstListed batchv1alpha1.LedgerEntry
	var lastListedIndex int32
	runListed := false
	foldOrList := func(one *batchv1alpha1.LedgerEntry) error {
		switch _, isClosed := closed[one.Pod]; {
		case isClosed && !keptOutcomes[one.Pod]:
			toFold.Entries = append(toFold.Entries, *one)
			toFold.Seq = one.Seq
		case !runListed:
			firstListed, lastListedIndex, runListed = *one, one.Index, true
		default:
			lastListedIndex = one.Index
		}
		return nil
	}
	for k := range l.Entries {
		e := &l.Entries[k]
		if !holdsClosed(e, closed) {
			result.Entries = append(result.Entries, *e)
			continue
		}
		runListed = false
		if err := expand(e, st.checkpointed.holds, foldOrList); err != nil { // l is valid: see holds
			return batchv1alpha1.Ledger{}, fmt.Errorf("entry %d (seq %d): %w", k, e.Seq, err)
		}
		if runListed {
			result.Entries = append(result.Entries, rejoin(firstListed, lastListedIndex))
		}
	}
	if len(toFold.Entries) == 0 {
		return *l.DeepCopy(), nil
	}
	foldedState, err := Replay(toFold)
	if err != nil {
		return batchv1alpha1.Ledger{}, fmt.Errorf("folding: %w", err)
	}
	cpSeq := toFold.Seq
	if l.Checkpoint != nil {
		cpSeq = max(cpSeq, l.Checkpoint.Seq)
	}
	result.Checkpoint = foldedState.checkpoint(cpSeq)
	// What the new checkpoint holds is foldedState, which it was written from.
	newCheckpoint := &checkpointView{seq: cpSeq, succeeded: foldedState.Succeeded, failed: foldedState.FailedIndexes,
		attempts: foldedState.Attempts}
	if err := dropRelaunchedFailureTimes(result.Checkpoint, result.Entries, newCheckpoint.holds); err != nil {
		return batchv1alpha1.Ledger{}, fmt.Errorf("folding: %w", err)
	}
	result.Entries = Pack(result.Entries)
	return result, nil
}

// holdsClosed reports whether e stands for a pod of closed (or may: an
// entry with a count that expand refuses is reported as holding one, for
// expand to name its fault).
func holdsClosed(e *batchv1alpha1.LedgerEntry, closed map[string]PodRef) bool {
	n := e.Pods()
	if n == 1 {
		_, ok := closed[e.Pod]
		return ok
	}
	prefix, ok := runPrefix(e)
	if !ok {
		return true
	}
	for _, ref := range closed {
		if ref.Attempt == e.Attempt && ref.Index >= e.Index && int64(ref.Index) < int64(e.Index)+int64(n) &&
			ref.Name == podNamed(prefix, ref.Index, ref.Attempt) {
			return true
		}
	}
	return false
}

// dropRelaunchedFailureTimes clears the failure time of the checkpoint's
// indexes that the listed entries launch again: they have waited out their
// delay, and replay drops the time at that launch anyway.
func dropRelaunchedFailureTimes(cp *batchv1alpha1.LedgerCheckpoint, entries []batchv1alpha1.LedgerEntry, folded Folded) error {
	if !slices.ContainsFunc(cp.Indexes, func(is batchv1alpha1.IndexState) bool { return is.LastFailureTime != nil }) {
		return nil // most folds: no index waits out a failure
	}
	relaunched := map[int32]bool{}
	for k := range entries {
		if e := &entries[k]; e.Type == batchv1alpha1.EntryLaunched {
			err := expand(e, folded, func(one *batchv1alpha1.LedgerEntry) error {
				relaunched[one.Index] = true
				return nil
			})
			if err != nil {
				return fmt.Errorf("entry seq %d: %w", e.Seq, err)
			}
		}
	}
	for k := range cp.Indexes {
		if relaunched[cp.Indexes[k].Index] {
			cp.Indexes[k].LastFailureTime = nil
		}
	}
	return nil
}
