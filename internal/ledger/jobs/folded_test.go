package jobs

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// run is the entry of one write's launches of the indexes from, from+1,
// ... (attempt 0), the first of them at seq.
func run(seq int64, from, n int32) batchv1alpha1.LedgerEntry {
	e := launched(seq, from, 0)
	e.Count = n
	return e
}

// foldBoth folds l keeping keep outcomes and checks that the result means
// what l means: the same open launches, facts and per-index failure times.
func foldBoth(t *testing.T, l batchv1alpha1.Ledger, keep int) batchv1alpha1.Ledger {
	t.Helper()
	before := mustReplay(t, &l)
	folded, err := Fold(&l, keep)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Replay(&folded)
	if err != nil {
		t.Fatalf("folded ledger does not replay: %v\n%+v", err, folded)
	}
	if err := after.Covers(before); err != nil {
		t.Errorf("fold lost a fact: %v", err)
	}
	if err := before.Covers(after); err != nil {
		t.Errorf("fold invented a fact: %v", err)
	}
	if diff := cmp.Diff(before.Open, after.Open, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("open launches (-before,+after):\n%s", diff)
	}
	if diff := cmp.Diff(before.Stopping, after.Stopping, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("pods being stopped (-before,+after):\n%s", diff)
	}
	for i, at := range before.LastIndexFailure { // a finished index's is of no use, and not kept
		if got, ok := after.LastIndexFailure[i]; !before.done(i) && (!ok || !got.Equal(at)) {
			t.Errorf("index %d's last failure %v after the fold, want %v", i, got, at)
		}
	}
	if len(after.LastIndexFailure) > len(before.LastIndexFailure) {
		t.Errorf("indexes' last failures %v after the fold, from %v", after.LastIndexFailure, before.LastIndexFailure)
	}
	if before.Launched() != after.Launched() {
		t.Errorf("launches %d before the fold, %d after", before.Launched(), after.Launched())
	}
	for name, ref := range before.Closed {
		if !after.IsClosed(ref) {
			t.Errorf("pod %s no longer closed after the fold", name)
		}
	}
	return folded
}

// TestFoldListsRunWithFoldedIndexes: pods of one write's run end out of
// order. The fold lists the run from its first to its last pod still
// listed, and names the folded pods between them, instead of splitting it
// into a run per gap.
func TestFoldListsRunWithFoldedIndexes(t *testing.T) {
	entries := []batchv1alpha1.LedgerEntry{run(1, 0, 10),
		outcome(11, batchv1alpha1.EntrySucceeded, 0, 0, ""),
		outcome(12, batchv1alpha1.EntrySucceeded, 2, 0, ""),
		outcome(13, batchv1alpha1.EntrySucceeded, 3, 0, ""),
		outcome(14, batchv1alpha1.EntryFailed, 5, 0, batchv1alpha1.FailReasonCounted),
		outcome(15, batchv1alpha1.EntryLost, 7, 0, ""),
		outcome(16, batchv1alpha1.EntrySucceeded, 9, 0, ""),
	}
	want := func(seq int64, from, n int32, folded string) batchv1alpha1.LedgerEntry {
		e := run(seq, from, n)
		e.FoldedIndexes = folded
		return e
	}
	cases := map[string]struct {
		keep int
		want []batchv1alpha1.LedgerEntry
	}{
		"every outcome folded": {keep: 0, want: []batchv1alpha1.LedgerEntry{want(2, 1, 8, "2,3,5,7")}},
		// The newest two outcomes stay listed, with their pods' launches.
		"two outcomes kept": {keep: 2, want: []batchv1alpha1.LedgerEntry{want(2, 1, 9, "2,3,5"), entries[5], entries[6]}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			folded := foldBoth(t, ledgerOf(entries...), tc.keep)
			if diff := cmp.Diff(tc.want, folded.Entries, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("listed entries (-want +got):\n%s", diff)
			}
			// Folding again changes nothing; a later fold joins the gaps.
			again := foldBoth(t, folded, tc.keep)
			if diff := cmp.Diff(folded, again, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("folding twice differs:\n%s", diff)
			}
		})
	}
	l := ledgerOf(entries...)
	folded := foldBoth(t, l, 0)
	l2 := ledgerOf(append(folded.Entries, outcome(17, batchv1alpha1.EntrySucceeded, 4, 0, ""),
		outcome(18, batchv1alpha1.EntrySucceeded, 8, 0, ""))...)
	l2.Checkpoint = folded.Checkpoint
	later := foldBoth(t, l2, 0)
	if diff := cmp.Diff([]batchv1alpha1.LedgerEntry{want(2, 1, 6, "2-5")}, later.Entries, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("after two more outcomes (-want +got):\n%s", diff)
	}
}

// TestFoldedIndexKeepsFailureTime: a pod inside a run failed and its index
// waits out its backoff delay. The run still lists the index, folded: the
// checkpoint keeps the failure's time, since the index was not launched
// again.
func TestFoldedIndexKeepsFailureTime(t *testing.T) {
	failed := outcome(6, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted)
	failed.Time = metav1.NewTime(t0.Add(3 * time.Second))
	folded := foldBoth(t, ledgerOf(run(1, 0, 5), failed), 0)
	if got := folded.Entries[0].FoldedIndexes; len(folded.Entries) != 1 || got != "2" {
		t.Fatalf("listed %+v, want one run with index 2 folded", folded.Entries)
	}
	var at *metav1.Time
	for _, is := range folded.Checkpoint.Indexes {
		if is.Index == 2 {
			at = is.LastFailureTime
		}
	}
	if at == nil || !at.Equal(&failed.Time) {
		t.Errorf("checkpoint's last failure of index 2 is %v, want %v", at, failed.Time)
	}
}

// TestReplayRejectsBadFoldedIndexes: a run names as folded only pods whose
// launch and outcome the checkpoint holds, strictly inside the run.
func TestReplayRejectsBadFoldedIndexes(t *testing.T) {
	valid := func(folded string, cp batchv1alpha1.LedgerCheckpoint, more ...batchv1alpha1.LedgerEntry) batchv1alpha1.Ledger {
		e := run(1, 0, 5)
		e.FoldedIndexes = folded
		l := ledgerOf(append([]batchv1alpha1.LedgerEntry{e}, more...)...)
		l.Seq = max(l.Seq, 7)
		cp.Seq = 6
		l.Checkpoint = &cp
		return l
	}
	succeeded2 := batchv1alpha1.LedgerCheckpoint{SucceededIndexes: "2"}
	if _, err := Replay(new(valid("2", succeeded2))); err != nil {
		t.Fatalf("a valid ledger is refused: %v", err)
	}
	failed2 := batchv1alpha1.LedgerCheckpoint{Failed: 1, Indexes: []batchv1alpha1.IndexState{{Index: 2, Attempts: 1, Failures: 1}}}
	if _, err := Replay(new(valid("2", failed2))); err != nil {
		t.Fatalf("a valid ledger is refused: %v", err)
	}
	single := launched(1, 0, 0)
	single.FoldedIndexes = "1"
	pair := run(1, 0, 2)
	pair.FoldedIndexes = "1"
	onOutcome := outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, "")
	onOutcome.FoldedIndexes = "1"
	stops := stopping(8, 0, EvictReasonSuspended)
	stops.Count, stops.FoldedIndexes = 5, "2"
	cases := map[string]struct {
		ledger  batchv1alpha1.Ledger
		wantErr string
	}{
		"on one pod's launch":             {ledger: ledgerOf(single), wantErr: "foldedIndexes on a Launched entry of 1 pods"},
		"on a run of two":                 {ledger: ledgerOf(pair), wantErr: "foldedIndexes on a Launched entry of 2 pods"},
		"on an outcome":                   {ledger: ledgerOf(launched(1, 0, 0), onOutcome), wantErr: "foldedIndexes on a Succeeded entry"},
		"the first index":                 {ledger: valid("0", batchv1alpha1.LedgerCheckpoint{SucceededIndexes: "0"}), wantErr: "not all between"},
		"the last index":                  {ledger: valid("4", batchv1alpha1.LedgerCheckpoint{SucceededIndexes: "4"}), wantErr: "not all between"},
		"beyond the run":                  {ledger: valid("2,9", succeeded2), wantErr: "not all between"},
		"not intervals":                   {ledger: valid("2-x", succeeded2), wantErr: "foldedIndexes: bad"},
		"an attempt the checkpoint lacks": {ledger: valid("2", batchv1alpha1.LedgerCheckpoint{}), wantErr: "attempt 0 of it is not in the checkpoint"},
		"a folded pod's outcome listed": {
			ledger:  valid("2", failed2, outcome(7, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted)),
			wantErr: "pod sj-2-0 that is not open",
		},
		"a stop of an open pod folded": {
			ledger:  ledgerOf(run(1, 0, 5), stops),
			wantErr: "Stopping run from sj-0-0 lists index 2 folded",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Replay(&tc.ledger)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestOlderReaderRefusesFoldedRuns reads folded runs as an operator of an
// earlier version does, which does not know foldedIndexes (its decoder
// drops the field, and a CRD of that version prunes it): every run would
// stand for its folded pods as open. Such a reader must refuse the ledger
// (LedgerValid=False: nothing done, nothing counted twice), whatever the
// folded pods' outcomes were.
func TestOlderReaderRefusesFoldedRuns(t *testing.T) {
	cases := map[string][]batchv1alpha1.LedgerEntry{
		"succeeded":    {outcome(6, batchv1alpha1.EntrySucceeded, 2, 0, "")},
		"failed":       {outcome(6, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted)},
		"ignored":      {outcome(6, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonIgnored)},
		"index failed": {outcome(6, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonFailIndex)},
		"lost":         {outcome(6, batchv1alpha1.EntryLost, 2, 0, "")},
		"failed and launched again": {outcome(6, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted),
			launched(7, 2, 1)},
		"evicted while stopping": {func() batchv1alpha1.LedgerEntry {
			e := stopping(6, 0, EvictReasonSuspended)
			e.Count = 5
			return e
		}(), outcome(11, batchv1alpha1.EntryEvicted, 2, 0, EvictReasonSuspended)},
	}
	for name, more := range cases {
		t.Run(name, func(t *testing.T) {
			folded := foldBoth(t, ledgerOf(append([]batchv1alpha1.LedgerEntry{run(1, 0, 5)}, more...)...), 0)
			raw, err := json.Marshal(folded)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), `"foldedIndexes":"2"`) {
				t.Fatalf("no run with index 2 folded: %s", raw)
			}
			var older batchv1alpha1.Ledger
			if err := json.Unmarshal(raw, &older); err != nil {
				t.Fatal(err)
			}
			for k := range older.Entries {
				older.Entries[k].FoldedIndexes = "" // unknown to that reader
			}
			if _, err := Replay(&older); err == nil {
				t.Errorf("a reader without foldedIndexes accepts %s", raw)
			}
		})
	}
}

// TestLedgerSizeWhenPodsEndShuffled drives the largest parallelism with
// pods that end in random order, 35 at a time (about one status write's
// worth under load), so that a pod's run time has no bound: folded runs
// keep the status within 64 KiB, where listing what is left of each run as
// separate runs took over 100 KiB (make bench-ledger measures both orders).
func TestLedgerSizeWhenPodsEndShuffled(t *testing.T) {
	const par, completions = 2000, 10000
	dr := newDriver(indexedSpec(par, completions))
	rng := rand.New(rand.NewPCG(1, 2))
	var largest int
	for step := 0; !findTrue(dr.status.Conditions, batchv1alpha1.ConditionComplete) || hasHeldPod(dr.pods); step++ {
		if step > 2000 {
			t.Fatalf("not complete after %d steps: succeeded %d", step, dr.status.Succeeded)
		}
		dr.step(t, t0.Add(time.Duration(step)*time.Second))
		raw, err := json.Marshal(dr.status)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, len(raw))
		var running []int
		for k, p := range dr.pods {
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, k)
			}
		}
		rng.Shuffle(len(running), func(a, b int) { running[a], running[b] = running[b], running[a] })
		for _, k := range running[:min(35, len(running))] {
			dr.pods[k] = withPhase(dr.pods[k], corev1.PodSucceeded, 0)
		}
	}
	if dr.status.Succeeded != completions {
		t.Fatalf("succeeded %d, want %d", dr.status.Succeeded, completions)
	}
	if largest > 64<<10 {
		t.Errorf("largest status %d bytes, want at most 64 KiB", largest)
	}
	t.Logf("largest status %d bytes, parallelism %d, pods ending at random", largest, par)
}
