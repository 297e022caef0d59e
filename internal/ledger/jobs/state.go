// Package jobs decides, from a SafeJob's ledger, the pods observed and the
// spec, what to record and what to do next: which launches to commit, which
// pods to create, stop and release, how each pod's launch ended, and when
// the SafeJob is finished. It has no Kubernetes client and no clock of its
// own: every function here is pure.
package jobs

import (
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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

	openIndex map[int32]bool
	// held is what the ledger's checkpoint holds of the pods of listed runs
	// (nil without a checkpoint).
	held *checkpointView
	// launches holds the launches applied in seq order (a ledger's seqs
	// rise), and since launchClosed some that have closed: sortedOpen
	// filters it instead of sorting Open.
	launches     []PodRef
	launchClosed bool
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
		openIndex:        make(map[int32]bool, launches),
		launches:         make([]PodRef, 0, launches),
	}
	if cp := l.Checkpoint; cp != nil {
		if err := st.loadCheckpoint(cp); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		// As the checkpoint says it, before the listed entries change st.
		st.held = &checkpointView{seq: cp.Seq, succeeded: st.Succeeded.Clone(), failed: st.FailedIndexes.Clone(),
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
	return st.held.holds(seq, index, attempt) && st.Attempts[index] == st.held.attempts[index]
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

// apply adds one entry to the state, checking it against what came before.
func (st *State) apply(e *batchv1alpha1.LedgerEntry) error {
	if e.Index < 0 || e.Attempt < 0 {
		return fmt.Errorf("negative index or attempt")
	}
	switch e.Type {
	case batchv1alpha1.EntryLaunched:
		return expand(e, st.foldedInReplay, st.applyLaunch)
	case batchv1alpha1.EntryStopping:
		return expand(e, st.foldedInReplay, st.applyEnd)
	case batchv1alpha1.EntryScheduled:
		return fmt.Errorf("entry type Scheduled is not valid in a SafeJob without schedule")
	}
	return st.applyEnd(e)
}

// applyEnd adds an entry about one open launch: that its pod is being
// stopped, or how it ended.
func (st *State) applyEnd(e *batchv1alpha1.LedgerEntry) error {
	ref, ok := st.Open[e.Pod]
	if !ok {
		return fmt.Errorf("%s for pod %s that is not open", e.Type, e.Pod)
	}
	if ref.Index != e.Index || ref.Attempt != e.Attempt {
		return fmt.Errorf("%s for pod %s names index %d attempt %d, launched as %d/%d",
			e.Type, e.Pod, e.Index, e.Attempt, ref.Index, ref.Attempt)
	}
	if e.Type == batchv1alpha1.EntryStopping {
		return st.applyStopping(e) // the launch stays open until the pod has ended
	}
	switch e.Type {
	case batchv1alpha1.EntrySucceeded:
		st.Succeeded.Add(e.Index)
		st.FailuresSinceSuccess, st.LastFailure = 0, time.Time{}
		if e.Time.After(st.LastSuccess) {
			st.LastSuccess = e.Time.Time
		}
	case batchv1alpha1.EntryFailed:
		if err := st.applyFailure(e); err != nil {
			return err
		}
	case batchv1alpha1.EntryLost:
		st.Lost++
	case batchv1alpha1.EntryEvicted:
		st.Evicted++
	default:
		return fmt.Errorf("unknown entry type %q", e.Type)
	}
	delete(st.Open, e.Pod)
	st.launchClosed = true
	delete(st.Stopping, e.Pod)
	delete(st.openIndex, ref.Index)
	st.Closed[e.Pod] = ref
	return nil
}

// applyStopping records that the controller stops an open launch's pod,
// and why: how the pod ends is then recorded as the reason says.
func (st *State) applyStopping(e *batchv1alpha1.LedgerEntry) error {
	if _, dup := st.Stopping[e.Pod]; dup {
		return fmt.Errorf("pod %s stopped twice", e.Pod)
	}
	if e.Reason == "" {
		return fmt.Errorf("entry %s for pod %s has no reason", e.Type, e.Pod)
	}
	st.Stopping[e.Pod] = e.Reason
	return nil
}

// applyLaunch opens a launch: the next attempt of an unfinished, idle index.
func (st *State) applyLaunch(e *batchv1alpha1.LedgerEntry) error {
	if st.done(e.Index) {
		return fmt.Errorf("launch of finished index %d", e.Index)
	}
	if e.Attempt != st.Attempts[e.Index] {
		return fmt.Errorf("launch of index %d attempt %d, want attempt %d", e.Index, e.Attempt, st.Attempts[e.Index])
	}
	if !hasPodSuffix(e.Pod, e.Index, e.Attempt) {
		// PodName's suffix makes a pod's name that of one launch only, which
		// Open and Closed, keyed by name, rely on.
		return fmt.Errorf("launch of pod %s names it for another index or attempt than %d/%d", e.Pod, e.Index, e.Attempt)
	}
	if _, dup := st.Open[e.Pod]; dup {
		return fmt.Errorf("pod %s launched twice", e.Pod)
	}
	if st.openIndex[e.Index] {
		return fmt.Errorf("launch of index %d while another pod of it is open", e.Index)
	}
	st.Attempts[e.Index]++
	st.openIndex[e.Index] = true
	// Its backoff delay is over: the index's last failure no longer matters,
	// and is not kept (so a checkpoint lists failure times only for the
	// indexes that wait, within the size bounds).
	delete(st.LastIndexFailure, e.Index)
	ref := PodRef{Name: e.Pod, Index: e.Index, Attempt: e.Attempt, Seq: e.Seq, Time: e.Time.Time}
	st.Open[e.Pod] = ref
	st.launches = append(st.launches, ref)
	return nil
}

func (st *State) applyFailure(e *batchv1alpha1.LedgerEntry) error {
	if e.Time.After(st.LastSuccess) {
		st.FailuresSinceSuccess++
		if e.Time.After(st.LastFailure) {
			st.LastFailure = e.Time.Time
		}
	}
	st.LastIndexFailure[e.Index] = e.Time.Time
	switch e.Reason {
	case batchv1alpha1.FailReasonIgnored:
		st.Ignored++
		return nil
	case batchv1alpha1.FailReasonCounted:
	case batchv1alpha1.FailReasonFailIndex:
		st.FailedIndexes.Add(e.Index)
	case batchv1alpha1.FailReasonFailJob:
		st.FailJob = true
	default:
		return fmt.Errorf("unknown failure reason %q", e.Reason)
	}
	st.Failed++
	st.Failures[e.Index]++
	return nil
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

// Fold moves every closed launch (its Launched and Stopping entries and its
// outcome) into the checkpoint, keeping the newest keep outcomes listed. Open
// launches stay listed, packed (Pack) afresh: an entry with a count whose
// pods have partly closed is listed from the first to the last pod still
// listed, and no longer stands for the pods between them that folded (the
// checkpoint holds them). The State of the result equals the State of l.
func Fold(l *batchv1alpha1.Ledger, keep int) (batchv1alpha1.Ledger, error) {
	st, err := Replay(l)
	if err != nil {
		return batchv1alpha1.Ledger{}, err
	}
	return foldClosed(l, st, keep)
}

// foldClosed is Fold for a ledger whose State is known: Decide has it
// without replaying the ledger it wrote.
func foldClosed(l *batchv1alpha1.Ledger, st *State, keep int) (batchv1alpha1.Ledger, error) {
	closed := st.Closed
	// Outcomes from the end that stay listed, with their Launched entries
	// (an outcome stands for one pod: never packed).
	kept := map[string]bool{}
	for k := len(l.Entries) - 1; k >= 0 && len(kept) < keep; k-- {
		if e := &l.Entries[k]; !e.Countable() {
			kept[e.Pod] = true
		}
	}
	// Replay only the entries that fold, on top of the old checkpoint. An
	// entry that stands for no closed pod stays listed as it is: only the
	// runs that do are expanded, so a pass does not name every open pod.
	folded := &batchv1alpha1.Ledger{Checkpoint: l.Checkpoint}
	out := batchv1alpha1.Ledger{Seq: l.Seq}
	// The first of one entry's pods that stay listed, and the last one's
	// index: the entry is listed again from the one to the other.
	var first batchv1alpha1.LedgerEntry
	var last int32
	stays := false
	sort := func(one *batchv1alpha1.LedgerEntry) error {
		switch _, isClosed := closed[one.Pod]; {
		case isClosed && !kept[one.Pod]:
			folded.Entries = append(folded.Entries, *one)
			folded.Seq = one.Seq
		case !stays:
			first, last, stays = *one, one.Index, true
		default:
			last = one.Index
		}
		return nil
	}
	for k := range l.Entries {
		e := &l.Entries[k]
		if !holdsClosed(e, closed) {
			out.Entries = append(out.Entries, *e)
			continue
		}
		stays = false
		if err := expand(e, st.held.holds, sort); err != nil { // l is valid: see holds
			return batchv1alpha1.Ledger{}, fmt.Errorf("entry %d (seq %d): %w", k, e.Seq, err)
		}
		if stays {
			out.Entries = append(out.Entries, rejoin(first, last))
		}
	}
	if len(folded.Entries) == 0 {
		return *l.DeepCopy(), nil
	}
	fst, err := Replay(folded)
	if err != nil {
		return batchv1alpha1.Ledger{}, fmt.Errorf("folding: %w", err)
	}
	cpSeq := folded.Seq
	if l.Checkpoint != nil {
		cpSeq = max(cpSeq, l.Checkpoint.Seq)
	}
	out.Checkpoint = fst.checkpoint(cpSeq)
	// What the new checkpoint holds is fst, which it was written from.
	held := &checkpointView{seq: cpSeq, succeeded: fst.Succeeded, failed: fst.FailedIndexes, attempts: fst.Attempts}
	if err := dropRelaunchedFailureTimes(out.Checkpoint, out.Entries, held.holds); err != nil {
		return batchv1alpha1.Ledger{}, fmt.Errorf("folding: %w", err)
	}
	out.Entries = Pack(out.Entries)
	return out, nil
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
