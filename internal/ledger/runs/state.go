package runs

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// Reasons of run outcomes written by the controller itself.
const (
	// ReasonReplaced: the run was stopped by concurrencyPolicy Replace.
	ReasonReplaced = "Replaced"
	// ReasonDeleted: the run was deleted before it finished.
	ReasonDeleted = "Deleted"
	// ReasonVanished: the run disappeared without its finalizer being
	// released by the parent (someone removed it).
	ReasonVanished = "Vanished"
	// ReasonNotCreated: the run's create window passed and a live read
	// found no run of that name; nothing shows it ever existed, and no
	// create of it can land any more (ledger.Fence).
	ReasonNotCreated = "NotCreated"
)

// Ref identifies one run of a scheduled SafeJob.
type Ref struct {
	Name          string
	ScheduledTime time.Time
	// Seq and Time are those of the Scheduled entry: Time is when the run
	// was committed, from which its create window runs (ledger.Fence).
	Seq  int64
	Time time.Time
	// Manual marks a run started by hand (RunNowAnnotation): its
	// ScheduledTime is when it was requested, and the concurrency policy
	// neither holds it back nor replaces it.
	Manual bool
}

// State is what a scheduled SafeJob's ledger means.
type State struct {
	// Seq is the ledger's seq.
	Seq int64
	// LastScheduled is the latest scheduled time ever committed; no time at
	// or before it is ever scheduled again.
	LastScheduled time.Time
	// Open holds the runs whose outcome is not recorded, by name.
	Open map[string]Ref
	// Closed holds the listed runs whose outcome is recorded, by name.
	Closed map[string]Ref
	// Folded is the latest scheduled time of a run folded into the checkpoint.
	Folded time.Time
	// Runs counts the recorded outcomes; Missed the scheduled times not run.
	Runs, Missed int64
	// LastManual is the name of the latest run started by hand, listed or
	// folded: a request of that name was carried out. LastManualTime is its
	// request time; FoldedManual is the latest request time of a manual run
	// folded into the checkpoint. Request times never go back (Decide), and
	// of two in the same second the later entry is the latest.
	LastManual     string
	LastManualTime time.Time
	FoldedManual   time.Time
}

// Replay reads the ledger of a scheduled SafeJob: Scheduled entries,
// each for a later time than every Scheduled entry before it, and at most
// one outcome (Succeeded, Failed, Evicted or Lost) for each.
func Replay(l *batchv1alpha1.Ledger) (*State, error) {
	st := &State{Seq: l.Seq, Open: map[string]Ref{}, Closed: map[string]Ref{}}
	var checkpointSeq int64
	if cp := l.Checkpoint; cp != nil {
		if err := st.loadCheckpoint(cp); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		checkpointSeq = cp.Seq
	}
	var prevTime time.Time
	err := ledger.Walk(l, func(e *batchv1alpha1.LedgerEntry) error {
		if e.Type != batchv1alpha1.EntryScheduled {
			return st.applyOutcome(e)
		}
		if e.Reason == batchv1alpha1.ReasonManual {
			return st.applyManual(e)
		}
		defer func() { prevTime = e.ScheduledTime.Time }()
		return st.applyScheduled(e, prevTime, e.Seq > checkpointSeq)
	})
	if err != nil {
		return nil, fmt.Errorf("run ledger: %w", err)
	}
	return st, nil
}

func (st *State) loadCheckpoint(cp *batchv1alpha1.LedgerCheckpoint) error {
	if cp.SucceededIndexes != "" || cp.FailedIndexes != "" || len(cp.Indexes) > 0 || cp.Failed+cp.Lost+cp.Evicted+cp.Ignored != 0 {
		return fmt.Errorf("pod counts in the ledger of a scheduled SafeJob")
	}
	if min(cp.Seq, cp.Runs, cp.Missed) < 0 {
		return fmt.Errorf("negative count")
	}
	st.Runs, st.Missed = cp.Runs, cp.Missed
	if cp.LastScheduleTime != nil {
		st.LastScheduled, st.Folded = cp.LastScheduleTime.Time, cp.LastScheduleTime.Time
	}
	st.LastManual = cp.LastManualRun
	if cp.LastManualTime != nil {
		st.LastManualTime, st.FoldedManual = cp.LastManualTime.Time, cp.LastManualTime.Time
	}
	return nil
}

func checkEntry(e *batchv1alpha1.LedgerEntry) error {
	if e.Pod != "" || e.Run == "" || e.ScheduledTime == nil {
		return fmt.Errorf("a run entry names a run and its scheduled time, and no pod")
	}
	return nil
}

// applyScheduled opens a run. Times only move forward: past the previous
// listed Scheduled entry, and past the checkpoint for entries after it.
func (st *State) applyScheduled(e *batchv1alpha1.LedgerEntry, prevTime time.Time, afterCheckpoint bool) error {
	if err := checkEntry(e); err != nil {
		return err
	}
	at := e.ScheduledTime.Time
	if !at.After(prevTime) || (afterCheckpoint && !at.After(st.LastScheduled)) {
		return fmt.Errorf("run %s scheduled for %s, not after an earlier run", e.Run, at.UTC().Format(time.RFC3339))
	}
	_, open := st.Open[e.Run]
	_, closed := st.Closed[e.Run]
	if open || closed || e.Missed < 0 {
		return fmt.Errorf("run %s scheduled twice or with a negative missed count", e.Run)
	}
	if at.After(st.LastScheduled) {
		st.LastScheduled = at
	}
	st.Missed += e.Missed
	st.Open[e.Run] = Ref{Name: e.Run, ScheduledTime: at, Seq: e.Seq, Time: e.Time.Time}
	return nil
}

// applyManual opens a run started by hand. It stands outside the
// schedule's order: its time is when it was requested.
func (st *State) applyManual(e *batchv1alpha1.LedgerEntry) error {
	if err := checkEntry(e); err != nil {
		return err
	}
	_, open := st.Open[e.Run]
	_, closed := st.Closed[e.Run]
	if open || closed || e.Missed != 0 {
		return fmt.Errorf("manual run %s recorded twice or with a missed count", e.Run)
	}
	at := e.ScheduledTime.Time
	st.Open[e.Run] = Ref{Name: e.Run, ScheduledTime: at, Seq: e.Seq, Time: e.Time.Time, Manual: true}
	if !at.Before(st.LastManualTime) {
		st.LastManual, st.LastManualTime = e.Run, at
	}
	return nil
}

// HasRun reports whether the ledger lists a run of this name, open or
// closed, or names it as the latest manual run folded.
func (st *State) HasRun(name string) bool {
	_, open := st.Open[name]
	_, closed := st.Closed[name]
	return open || closed || name == st.LastManual
}

// applyOutcome closes an open run.
func (st *State) applyOutcome(e *batchv1alpha1.LedgerEntry) error {
	if err := checkEntry(e); err != nil {
		return err
	}
	switch e.Type {
	case batchv1alpha1.EntrySucceeded, batchv1alpha1.EntryFailed, batchv1alpha1.EntryEvicted, batchv1alpha1.EntryLost:
	default:
		return fmt.Errorf("type %s is not valid in a scheduled SafeJob", e.Type)
	}
	run, ok := st.Open[e.Run]
	if !ok || !run.ScheduledTime.Equal(e.ScheduledTime.Time) {
		return fmt.Errorf("%s for run %s that is not open", e.Type, e.Run)
	}
	delete(st.Open, e.Run)
	st.Closed[e.Run] = run
	st.Runs++
	return nil
}

// Sorted returns runs in scheduled-time order.
func Sorted(m map[string]Ref) []Ref {
	out := make([]Ref, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Ref) int { return a.ScheduledTime.Compare(b.ScheduledTime) })
	return out
}

// Covers reports how st fails to keep every fact of prev (nil when it keeps
// them all): I4 for the ledger of a scheduled SafeJob.
func (st *State) Covers(prev *State) error {
	if st.Seq < prev.Seq {
		return fmt.Errorf("seq went from %d to %d", prev.Seq, st.Seq)
	}
	if st.LastScheduled.Before(prev.LastScheduled) {
		return fmt.Errorf("last scheduled time went back from %s to %s", prev.LastScheduled, st.LastScheduled)
	}
	if st.Runs < prev.Runs || st.Missed < prev.Missed {
		return fmt.Errorf("a count went down: runs %d -> %d, missed %d -> %d", prev.Runs, st.Runs, prev.Missed, st.Missed)
	}
	if st.forgetsLatestManual(prev) {
		return fmt.Errorf("run %s, the latest started by hand, forgotten", prev.LastManual)
	}
	for name := range prev.Closed {
		if _, reopened := st.Open[name]; reopened {
			return fmt.Errorf("run %s reopened", name)
		}
	}
	for name, r := range prev.Open {
		_, open := st.Open[name]
		_, closed := st.Closed[name]
		folded := st.Folded
		if r.Manual {
			folded = st.FoldedManual
		}
		if !open && !closed && r.ScheduledTime.After(folded) {
			return fmt.Errorf("run %s forgotten", name)
		}
	}
	return nil
}

// forgetsLatestManual reports whether st no longer knows prev's latest run
// started by hand while no later one replaced it: its request would be
// committed again.
func (st *State) forgetsLatestManual(prev *State) bool {
	return prev.LastManual != "" && !st.HasRun(prev.LastManual) && (st.LastManual == "" || prev.HasRun(st.LastManual))
}

// Name is the deterministic name of the run scheduled for t:
// "<parent>-<minutes since the epoch>", as CronJob names its Jobs, or
// "<parent>-<seconds since the epoch>" for times that are not on a whole
// minute (@every schedules). The parent's name is shortened, with a hash,
// so that the run's name stays a valid label value.
func Name(parent string, t time.Time) string {
	suffix := "-" + strconv.FormatInt(t.Unix()/60, 10)
	if t.Unix()%60 != 0 {
		suffix = "-" + strconv.FormatInt(t.Unix(), 10)
	}
	return ledger.ShortName(parent, ledger.MaxNameLen-len(suffix)) + suffix
}
