package jobs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// refusal is a ledger Replay must refuse, and part of the error it must
// give.
type refusal struct {
	ledger  batchv1alpha1.Ledger
	wantErr string
}

// checkRefused replays each case and fails those Replay accepts or refuses
// for another reason.
func checkRefused(t *testing.T, cases map[string]refusal) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Replay(&tc.ledger)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestReplayRejects(t *testing.T) {
	cases := map[string]refusal{
		"outcome of a pod never launched": {
			ledger:  ledgerOf(outcome(1, batchv1alpha1.EntrySucceeded, 0, 0, "")),
			wantErr: "not open",
		},
		"seq not increasing": {
			ledger:  ledgerOf(launched(2, 0, 0), launched(2, 1, 0)),
			wantErr: "not above",
		},
		"ledger seq below its entries": {
			ledger:  batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0)}},
			wantErr: "below its last entry",
		},
		"two open launches of one index": {
			ledger:  ledgerOf(launched(1, 0, 0), launched(2, 0, 1)),
			wantErr: "while another pod of it is open",
		},
		"a launch named for another index": {
			ledger: ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonCounted), func() batchv1alpha1.LedgerEntry {
				e := launched(3, 1, 0)
				e.Pod = PodName("sj", 0, 0) // FuzzReplayFold found it: a closed pod's name, opened again
				return e
			}()),
			wantErr: "names it for another index or attempt than 1/0",
		},
		"attempt skipped": {
			ledger:  ledgerOf(launched(1, 0, 1)),
			wantErr: "want attempt 0",
		},
		"launch of a succeeded index": {
			ledger:  ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, ""), launched(3, 0, 1)),
			wantErr: "finished index",
		},
		"unknown failure reason": {
			ledger:  ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryFailed, 0, 0, "Whatever")),
			wantErr: "unknown failure reason",
		},
		"bad checkpoint interval": {
			ledger:  batchv1alpha1.Ledger{Checkpoint: &batchv1alpha1.LedgerCheckpoint{SucceededIndexes: "3-1"}},
			wantErr: "bad interval",
		},
		"a run's entry in a pod ledger": {
			ledger:  ledgerOf(batchv1alpha1.LedgerEntry{Seq: 1, Type: batchv1alpha1.EntryScheduled, Run: "x-a"}),
			wantErr: "not valid in a SafeJob without schedule",
		},
		"index both succeeded and failed": {
			ledger:  batchv1alpha1.Ledger{Checkpoint: &batchv1alpha1.LedgerCheckpoint{SucceededIndexes: "1", FailedIndexes: "1"}},
			wantErr: "both succeeded and failed",
		},
	}
	checkRefused(t, cases)
}

// longLedger has 40 indexes: every third failed once first, the last five still run.
func longLedger() batchv1alpha1.Ledger {
	var entries []batchv1alpha1.LedgerEntry
	seq := int64(0)
	next := func() int64 { seq++; return seq }
	for i := range int32(40) {
		entries = append(entries, launched(next(), i, 0))
		attempt := int32(0)
		if i%3 == 0 {
			entries = append(entries, outcome(next(), batchv1alpha1.EntryFailed, i, 0, batchv1alpha1.FailReasonCounted),
				launched(next(), i, 1))
			attempt = 1
		}
		if i < 35 {
			entries = append(entries, outcome(next(), batchv1alpha1.EntrySucceeded, i, attempt, ""))
		}
	}
	return ledgerOf(entries...)
}

func TestFoldKeepsMeaning(t *testing.T) {
	l := longLedger()
	before, err := Replay(&l)
	if err != nil {
		t.Fatal(err)
	}
	folded, err := Fold(&l, 5)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Replay(&folded)
	if err != nil {
		t.Fatalf("folded ledger does not replay: %v", err)
	}
	if len(folded.Entries) >= len(l.Entries) || folded.Checkpoint == nil {
		t.Fatalf("nothing folded: %d entries", len(folded.Entries))
	}
	if err := after.Covers(before); err != nil {
		t.Errorf("fold lost a fact: %v", err)
	}
	if err := before.Covers(after); err != nil {
		t.Errorf("fold invented a fact: %v", err)
	}
	if before.Launched() != after.Launched() || before.Launched() != 40+14 {
		t.Errorf("launches %d before the fold and %d after, want %d", before.Launched(), after.Launched(), 40+14)
	}
	if diff := cmp.Diff(before.Open, after.Open, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("open launches (-before,+after):\n%s", diff)
	}
	// Every folded pod still reads as closed.
	for name, ref := range before.Closed {
		if !after.IsClosed(ref) {
			t.Errorf("pod %s no longer closed after fold", name)
		}
	}
	if folded.Seq != l.Seq {
		t.Errorf("seq %d after fold, want %d", folded.Seq, l.Seq)
	}
}

// TestHandEditedHugeIntervals: a checkpoint edited by hand into intervals
// beyond any completions is refused without building the set, and one
// beyond the SafeJob's own completions makes Decide refuse the ledger.
func TestHandEditedHugeIntervals(t *testing.T) {
	for _, s := range []string{"0-2000000000", "0-99999,100000", "5,7-2147483647"} {
		l := batchv1alpha1.Ledger{Seq: 1, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 1, SucceededIndexes: s}}
		if _, err := Replay(&l); err == nil {
			t.Errorf("checkpoint succeededIndexes %q replayed", s)
		}
	}
	s := spec(1, 10)
	status := &batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 1,
		Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 1, SucceededIndexes: "0-99999"}}}
	if _, err := Decide(&Input{Name: "sj", Spec: &s, Status: status, Now: t0}); err == nil {
		t.Error("a ledger with indexes beyond completions was acted on")
	}
}
