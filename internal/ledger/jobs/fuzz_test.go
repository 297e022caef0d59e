package jobs

import (
	"encoding/json"
	"testing"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// FuzzReplayFold decodes arbitrary ledgers: Replay must never panic, and a
// ledger that replays must fold into one with exactly the same meaning
// (sameMeaning: every count, set, attempt, failure time, open launch and
// stop).
func FuzzReplayFold(f *testing.F) {
	seeds := []batchv1alpha1.Ledger{
		ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, "")),
		ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonCounted),
			launched(3, 0, 1), launched(4, 1, 0), outcome(5, batchv1alpha1.EntryLost, 0, 1, "")),
		{Seq: 9, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 8, SucceededIndexes: "0-3", Failed: 2,
			Indexes: []batchv1alpha1.IndexState{{Index: 4, Attempts: 2, Failures: 1}}},
			Entries: []batchv1alpha1.LedgerEntry{launched(9, 4, 2)}},
		{Seq: 5, Entries: Pack([]batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0),
			outcome(4, batchv1alpha1.EntrySucceeded, 1, 0, ""), launched(5, 3, 0)})},
		{Seq: 7, Entries: Pack([]batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0),
			stopping(4, 0, EvictReasonSuspended), stopping(5, 1, EvictReasonSuspended), stopping(6, 2, EvictReasonSuspended),
			outcome(7, batchv1alpha1.EntryEvicted, 1, 0, EvictReasonSuspended)})},
		{Seq: 7, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 6, SucceededIndexes: "2", Failed: 1,
			Indexes: []batchv1alpha1.IndexState{{Index: 3, Attempts: 1, Failures: 1}}},
			Entries: []batchv1alpha1.LedgerEntry{func() batchv1alpha1.LedgerEntry {
				e := launched(1, 0, 0)
				e.Count = 6 // indexes 2 and 3 are the checkpoint's
				return e
			}(), outcome(7, batchv1alpha1.EntrySucceeded, 4, 0, "")}},
	}
	for _, s := range seeds {
		raw, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, uint8(2))
	}
	f.Fuzz(func(t *testing.T, raw []byte, keep uint8) {
		var l batchv1alpha1.Ledger
		if json.Unmarshal(raw, &l) != nil || len(l.Entries) > 500 {
			return
		}
		before, err := Replay(&l)
		if err != nil {
			return
		}
		folded, err := Fold(&l, int(keep%8))
		if err != nil {
			t.Fatalf("Fold of a valid ledger failed: %v", err)
		}
		after, err := Replay(&folded)
		if err != nil {
			t.Fatalf("folded ledger does not replay: %v", err)
		}
		if err := after.Covers(before); err != nil {
			t.Fatalf("fold lost a fact: %v", err)
		}
		if err := before.Covers(after); err != nil {
			t.Fatalf("fold invented a fact: %v", err)
		}
		if diff := sameMeaning(before, after); diff != "" || folded.Seq != l.Seq {
			t.Fatalf("the fold changed the ledger's meaning (-before +after), or its seq %d to %d:\n%s", l.Seq, folded.Seq, diff)
		}
	})
}
