package jobs

import (
	"fmt"
	"maps"
	"slices"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// PodRef identifies one launch: the pod for one attempt of one index.
type PodRef struct {
	Name    string
	Index   int32
	Attempt int32
	// Seq and Time are those of the Launched entry.
	Seq  int64
	Time time.Time
}

// State is what a ledger means: the result of replaying its checkpoint and
// entries. Two ledgers with equal States are interchangeable.
type State struct {
	// Seq is the ledger's seq.
	Seq int64
	// Succeeded holds the indexes that succeeded.
	Succeeded ledger.IndexSet
	// FailedIndexes holds the indexes that failed for good.
	FailedIndexes ledger.IndexSet
	// Failed counts the pod failures that count toward backoff.
	Failed int32
	// Lost, Evicted and Ignored count the outcomes that never count as failures.
	Lost, Evicted, Ignored int32
	// FailJob is set when a Failed entry carried the FailJob action.
	FailJob bool
	// Attempts is the number of launches per index (the next attempt number).
	Attempts map[int32]int32
	// Failures counts counted failures per index.
	Failures map[int32]int32
	// FailuresSinceSuccess counts the pod failures that ended after the
	// latest success (LastSuccess), the last of them at LastFailure: the
	// backoff delay before the next pod runs from it. As in batch/v1, a
	// success recorded later clears them, and a failure that ended no later
	// than the latest success is not among them.
	FailuresSinceSuccess int32
	LastFailure          time.Time
	LastSuccess          time.Time
	// LastIndexFailure is when each waiting index's last failure ended
	// (dropped once the index is launched again).
	LastIndexFailure map[int32]time.Time
	// Open holds the launches whose outcome is not recorded, by pod name.
	Open map[string]PodRef
	// Closed holds the pods of the listed entries whose outcome is recorded.
	Closed map[string]PodRef
	// Stopping holds, by pod name, the open launches the controller is
	// stopping and why (the reason of their Stopping entry).
	Stopping map[string]string

	// indexesOpen holds the indexes that have an open launch.
	indexesOpen map[int32]bool
	// checkpointed is what the ledger's checkpoint holds of the pods of
	// listed runs (nil without a checkpoint).
	checkpointed *checkpointView
	// launches holds the launches applied in seq order (a ledger's seqs
	// rise), and once launchesStale some that have closed since: sortedOpen
	// filters it instead of sorting Open.
	launches      []PodRef
	launchesStale bool
}

// Replay reads a ledger and returns its meaning, or an error naming the
// first entry that breaks the ledger's rules. A ledger that fails Replay
// must not be acted on.
func Replay(l *batchv1alpha1.Ledger) (*State, error) {
	launches, ends := sizes(l.Entries)
	st := &State{
		Seq:              l.Seq,
		Attempts:         make(map[int32]int32, launches),
		Failures:         map[int32]int32{},
		LastIndexFailure: map[int32]time.Time{},
		Open:             make(map[string]PodRef, launches),
		Closed:           make(map[string]PodRef, ends),
		Stopping:         map[string]string{},
		indexesOpen:      make(map[int32]bool, launches),
		launches:         make([]PodRef, 0, launches),
	}
	if cp := l.Checkpoint; cp != nil {
		if err := st.loadCheckpoint(cp); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		// As the checkpoint says it, before the listed entries change st.
		st.checkpointed = &checkpointView{seq: cp.Seq, succeeded: st.Succeeded.Clone(), failed: st.FailedIndexes.Clone(),
			attempts: maps.Clone(st.Attempts)}
	}
	if err := ledger.Walk(l, st.apply); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return st, nil
}

// sizes returns how many launches, and how many outcomes, entries list
// (within MaxCompletions, whatever the counts say): the sizes of a replay's
// maps, made once instead of grown.
func sizes(entries []batchv1alpha1.LedgerEntry) (launches, outcomes int) {
	for k := range entries {
		switch e := &entries[k]; {
		case e.Type == batchv1alpha1.EntryLaunched:
			launches += int(e.Pods())
		case !e.Countable():
			outcomes++
		}
	}
	return min(launches, ledger.MaxCompletions), min(outcomes, ledger.MaxCompletions)
}

// sortedOpen returns the open launches in seq order. The slice is st's own,
// not copied (a pass copied 2,000 launches at the largest parallelism): read
// it before st changes or is asked again, and never write it.
func sortedOpen(st *State) []PodRef {
	if st.launchesStale {
		open := st.launches[:0]
		for _, r := range st.launches {
			if cur, ok := st.Open[r.Name]; ok && cur.Seq == r.Seq {
				open = append(open, r)
			}
		}
		st.launches, st.launchesStale = open, false
	}
	return st.launches[:len(st.launches):len(st.launches)]
}

// within reports an index at or beyond completions: a ledger edited into
// one describes another SafeJob and must not be acted on.
func (st *State) within(completions int32) error {
	for _, set := range []*ledger.IndexSet{&st.Succeeded, &st.FailedIndexes} {
		if i, ok := set.Max(); ok && i >= completions {
			return fmt.Errorf("index %d is beyond completions %d", i, completions)
		}
	}
	for i := range st.Attempts {
		if i >= completions {
			return fmt.Errorf("index %d is beyond completions %d", i, completions)
		}
	}
	return nil
}

// done reports whether an index is finished: succeeded or failed for good.
func (st *State) done(i int32) bool { return st.Succeeded.Has(i) || st.FailedIndexes.Has(i) }

// nextUndone returns the smallest index at or after i that has neither
// succeeded nor failed, skipping whole intervals at a time.
func (st *State) nextUndone(i int32) int32 {
	for {
		j := st.FailedIndexes.NextAbsent(st.Succeeded.NextAbsent(i))
		if j == i {
			return i
		}
		i = j
	}
}

// unfinishedStarted counts the indexes below limit launched at least once
// that have not finished: open, or waiting to run again.
func (st *State) unfinishedStarted(limit int32) int32 {
	var n int32
	for i, a := range st.Attempts {
		if a > 0 && i < limit && !st.done(i) {
			n++
		}
	}
	return n
}

// startedIndexes lists, ascending, the unfinished indexes launched at least
// once.
func (st *State) startedIndexes() []int32 {
	var out []int32
	for i, a := range st.Attempts {
		if a > 0 && !st.done(i) {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// Launched is the number of launches ever committed, folded ones included:
// every closed launch has exactly one outcome, and a finished index is never
// launched again, so it is the outcomes counted plus the launches open.
// (Attempts alone does not say it: a checkpoint keeps the attempt counts of
// unfinished indexes only.)
func (st *State) Launched() int64 {
	return int64(st.Succeeded.Len()) + int64(st.Failed) + int64(st.Ignored) + int64(st.Lost) + int64(st.Evicted) +
		int64(len(st.Open))
}

// IsClosed reports whether the pod of ref has a recorded outcome, whether
// listed or folded into the checkpoint.
func (st *State) IsClosed(ref PodRef) bool {
	if _, open := st.Open[ref.Name]; open {
		return false
	}
	if _, closed := st.Closed[ref.Name]; closed {
		return true
	}
	// Folded: every launch of a finished index, and every attempt below the
	// index's attempt count, has its outcome recorded.
	return st.done(ref.Index) || ref.Attempt < st.Attempts[ref.Index]
}

// Covers reports how st fails to keep every fact of prev (nil when it keeps
// them all): the check of invariant I4 between two versions of a ledger.
func (st *State) Covers(prev *State) error {
	if st.Seq < prev.Seq {
		return fmt.Errorf("seq went from %d to %d", prev.Seq, st.Seq)
	}
	if i, missing := st.Succeeded.Missing(&prev.Succeeded); missing {
		return fmt.Errorf("succeeded index %d forgotten", i)
	}
	if i, missing := st.FailedIndexes.Missing(&prev.FailedIndexes); missing {
		return fmt.Errorf("failed index %d forgotten", i)
	}
	if st.Failed < prev.Failed || st.Lost < prev.Lost || st.Evicted < prev.Evicted || st.Ignored < prev.Ignored {
		return fmt.Errorf("a count went down: %+v -> %+v", prev, st)
	}
	for i, a := range prev.Attempts {
		if !st.done(i) && st.Attempts[i] < a {
			return fmt.Errorf("attempts of index %d went from %d to %d", i, a, st.Attempts[i])
		}
	}
	return nil
}
