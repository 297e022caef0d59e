package jobs

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// checkpointView is what a checkpoint holds of the launches it folded: the
// indexes finished, and the attempts of the others, up to its seq.
type checkpointView struct {
	seq               int64
	succeeded, failed ledger.IndexSet
	attempts          map[int32]int32
}

// holds reports whether the checkpoint holds the launch of this seq, index
// and attempt, and its outcome: a launch it folded is of a finished index,
// or below the index's attempt count, and before its seq (the outcome came
// later, at most at its seq). A fold takes a launch only with its outcome,
// and lists a launch only before its outcome, so in a valid ledger no pod
// that a run still stands for is held, and a run no longer stands for one
// that is. Replay also requires that no launch listed before the pod is of
// its index (foldedInReplay).
func (v *checkpointView) holds(seq int64, index, attempt int32) bool {
	return v != nil && seq < v.seq && (v.succeeded.Has(index) || v.failed.Has(index) || v.attempts[index] > attempt)
}

// foldedInReplay is Folded as Replay reads it, entry by entry: the
// checkpoint holds the pod, and no launch of its index is listed before
// it (the state's attempt count for it is still the checkpoint's). Any
// other pod of a run is read as the run says, and refused where that
// breaks a rule.
func (st *State) foldedInReplay(seq int64, index, attempt int32) bool {
	return st.checkpointed.holds(seq, index, attempt) && st.Attempts[index] == st.checkpointed.attempts[index]
}

// checkpointFolded is Folded for the pods of runs listed beside cp in a
// valid ledger (nil without a checkpoint): Replay has checked them.
func checkpointFolded(cp *batchv1alpha1.LedgerCheckpoint) (Folded, error) {
	if cp == nil {
		return nil, nil
	}
	st := &State{Attempts: map[int32]int32{}, Failures: map[int32]int32{}, LastIndexFailure: map[int32]time.Time{}}
	if err := st.loadCheckpoint(cp); err != nil {
		return nil, err
	}
	v := &checkpointView{seq: cp.Seq, succeeded: st.Succeeded, failed: st.FailedIndexes, attempts: st.Attempts}
	return v.holds, nil
}

func (st *State) loadCheckpoint(cp *batchv1alpha1.LedgerCheckpoint) error {
	var err error
	if st.Succeeded, err = ledger.ParseIndexSet(cp.SucceededIndexes); err != nil {
		return fmt.Errorf("succeededIndexes: %w", err)
	}
	if st.FailedIndexes, err = ledger.ParseIndexSet(cp.FailedIndexes); err != nil {
		return fmt.Errorf("failedIndexes: %w", err)
	}
	if i, both := st.Succeeded.Common(&st.FailedIndexes); both {
		return fmt.Errorf("index %d both succeeded and failed", i)
	}
	if min(cp.Seq, int64(cp.Failed), int64(cp.Lost), int64(cp.Evicted), int64(cp.Ignored)) < 0 {
		return fmt.Errorf("negative count")
	}
	st.Failed, st.Lost, st.Evicted, st.Ignored = cp.Failed, cp.Lost, cp.Evicted, cp.Ignored
	st.FailJob = cp.FailJob
	st.FailuresSinceSuccess = cp.FailuresSinceSuccess
	if cp.LastFailureTime != nil {
		st.LastFailure = cp.LastFailureTime.Time
	}
	if cp.LastSuccessTime != nil {
		st.LastSuccess = cp.LastSuccessTime.Time
	}
	for _, is := range cp.Indexes {
		if min(is.Index, is.Attempts, is.Failures) < 0 || is.Failures > is.Attempts {
			return fmt.Errorf("index %d: bad counts", is.Index)
		}
		if _, dup := st.Attempts[is.Index]; dup || st.done(is.Index) {
			return fmt.Errorf("index %d listed twice", is.Index)
		}
		st.Attempts[is.Index] = is.Attempts
		st.Failures[is.Index] = is.Failures
		if is.LastFailureTime != nil {
			st.LastIndexFailure[is.Index] = is.LastFailureTime.Time
		}
	}
	return nil
}

// checkpoint writes the state as a checkpoint. Only valid for a state with
// no open launches.
func (st *State) checkpoint(seq int64) *batchv1alpha1.LedgerCheckpoint {
	cp := &batchv1alpha1.LedgerCheckpoint{
		Seq:                  seq,
		Failed:               st.Failed,
		Lost:                 st.Lost,
		Evicted:              st.Evicted,
		Ignored:              st.Ignored,
		FailJob:              st.FailJob,
		FailuresSinceSuccess: st.FailuresSinceSuccess,
		SucceededIndexes:     st.Succeeded.String(),
		FailedIndexes:        st.FailedIndexes.String(),
	}
	for i, n := range st.Attempts {
		if st.done(i) || n == 0 {
			continue
		}
		is := batchv1alpha1.IndexState{Index: i, Attempts: n, Failures: st.Failures[i]}
		if at, ok := st.LastIndexFailure[i]; ok {
			is.LastFailureTime = ptr.To(metav1.NewTime(at))
		}
		cp.Indexes = append(cp.Indexes, is)
	}
	if st.FailuresSinceSuccess > 0 {
		cp.LastFailureTime = ptr.To(metav1.NewTime(st.LastFailure))
	}
	if !st.LastSuccess.IsZero() {
		cp.LastSuccessTime = ptr.To(metav1.NewTime(st.LastSuccess))
	}
	slices.SortFunc(cp.Indexes, func(a, b batchv1alpha1.IndexState) int { return int(a.Index - b.Index) })
	return cp
}
