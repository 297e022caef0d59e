package runs

import (
	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

const (
	// FoldAbove is the number of listed entries of a scheduled SafeJob's run
	// ledger above which closed runs are folded into the checkpoint.
	FoldAbove = 100
	// KeepAfterFold is the number of newest runs left listed by a fold.
	KeepAfterFold = 20
)

// Fold moves every closed run but the newest keepNewest into the
// checkpoint. Open runs stay listed. The result replays to the same
// LastScheduled, Open, Runs and Missed.
func Fold(l *batchv1alpha1.Ledger, keepNewest int) (batchv1alpha1.Ledger, error) {
	return fold(l, keepNewest, nil)
}

// fold is Fold that also keeps listed the closed runs keepListed reports.
func fold(l *batchv1alpha1.Ledger, keepNewest int, keepListed func(Ref) bool) (batchv1alpha1.Ledger, error) {
	st, err := Replay(l)
	if err != nil {
		return batchv1alpha1.Ledger{}, err
	}
	closed := Sorted(st.Closed)
	if len(closed) <= keepNewest {
		return *l.DeepCopy(), nil
	}
	toFold := map[string]bool{}
	for _, r := range closed[:len(closed)-keepNewest] {
		toFold[r.Name] = keepListed == nil || !keepListed(r)
	}
	holdManualOrder(l, toFold)
	cp := &batchv1alpha1.LedgerCheckpoint{}
	if l.Checkpoint != nil {
		cp = l.Checkpoint.DeepCopy()
	}
	out := batchv1alpha1.Ledger{Seq: l.Seq}
	for _, e := range l.Entries {
		if !toFold[e.Run] {
			out.Entries = append(out.Entries, e)
			continue
		}
		addToCheckpoint(cp, &e)
	}
	out.Checkpoint = cp
	return out, nil
}

// addToCheckpoint counts a folded entry into the checkpoint.
func addToCheckpoint(cp *batchv1alpha1.LedgerCheckpoint, e *batchv1alpha1.LedgerEntry) {
	cp.Seq = max(cp.Seq, e.Seq)
	switch {
	case e.Type == batchv1alpha1.EntryScheduled && e.Reason == batchv1alpha1.ReasonManual:
		// Entries are in seq order: of two in the same second the
		// later is the latest, as Replay reads them.
		if cp.LastManualTime == nil || !e.ScheduledTime.Before(cp.LastManualTime) {
			cp.LastManualRun, cp.LastManualTime = e.Run, e.ScheduledTime.DeepCopy()
		}
	case e.Type == batchv1alpha1.EntryScheduled:
		cp.Missed += e.Missed
		if cp.LastScheduleTime == nil || e.ScheduledTime.After(cp.LastScheduleTime.Time) {
			cp.LastScheduleTime = e.ScheduledTime.DeepCopy()
		}
	default:
		cp.Runs++
	}
}

// holdManualOrder keeps listed every run started by hand that follows, in
// the ledger, a listed one of the same request time. Decide gives each request
// a later time than the last, but a ledger written before it did so may hold
// two requests of one time, and neither the checkpoint nor Replay can tell
// their order by time: Replay takes a listed
// run of the checkpoint's time as the later one. Folding only in ledger order
// within a time keeps that true, so the checkpoint never names an earlier run
// than a listed one of its time, and the latest request is never forgotten
// (and committed again) because a later run closed first.
func holdManualOrder(l *batchv1alpha1.Ledger, toFold map[string]bool) {
	listedTimes := map[int64]bool{} // request times, in Unix nanoseconds, of the manual runs kept listed
	for _, e := range l.Entries {
		if e.Type != batchv1alpha1.EntryScheduled || e.Reason != batchv1alpha1.ReasonManual {
			continue
		}
		requested := e.ScheduledTime.UnixNano()
		if listedTimes[requested] {
			toFold[e.Run] = false
		}
		if !toFold[e.Run] {
			listedTimes[requested] = true
		}
	}
}
