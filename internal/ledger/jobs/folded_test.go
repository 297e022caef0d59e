package jobs

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// run is the entry of one write's launches of the indexes from, from+1,
// ... (attempt 0), the first of them at seq.
func run(seq int64, from, n int32) batchv1alpha1.LedgerEntry {
	e := launched(seq, from, 0)
	e.Count = n
	return e
}

// foldBoth folds l keeping keep outcomes and checks that the result means
// exactly what l means.
func foldBoth(t *testing.T, l batchv1alpha1.Ledger, keep int) batchv1alpha1.Ledger {
	t.Helper()
	folded, err := foldChecked(l, keep)
	if err != nil {
		t.Fatal(err)
	}
	return folded
}

// foldChecked folds l keeping keep outcomes, and reports a fold that fails,
// that Replay refuses, or whose meaning differs from l's.
func foldChecked(l batchv1alpha1.Ledger, keep int) (batchv1alpha1.Ledger, error) {
	before, err := Replay(&l)
	if err != nil {
		return l, fmt.Errorf("the ledger to fold does not replay: %w", err)
	}
	folded, err := Fold(&l, keep)
	if err != nil {
		return l, fmt.Errorf("fold: %w", err)
	}
	after, err := Replay(&folded)
	if err != nil {
		return l, fmt.Errorf("folded ledger does not replay: %w\n%+v", err, folded)
	}
	if diff := sameMeaning(before, after); diff != "" {
		return l, fmt.Errorf("the fold changed the ledger's meaning (-before +after):\n%s", diff)
	}
	for name, ref := range before.Closed {
		if !after.IsClosed(ref) {
			return l, fmt.Errorf("pod %s no longer closed after the fold", name)
		}
	}
	return folded, nil
}

// sameMeaning compares what two States say, field by field, leaving out only
// what a fold drops by design: which closed pods are still listed, and the
// attempt counts, failure counts and failure times of finished indexes.
// It returns "" when they agree.
func sameMeaning(a, b *State) string {
	type meaning struct {
		Seq                                                  int64
		Succeeded, FailedIndexes                             string
		Failed, Lost, Evicted, Ignored, FailuresSinceSuccess int32
		FailJob                                              bool
		LastFailure, LastSuccess                             time.Time
		Open                                                 map[string]PodRef
		Stopping                                             map[string]string
		Attempts, Failures                                   map[int32]int32
		LastIndexFailure                                     map[int32]time.Time
		Launched                                             int64
	}
	of := func(st *State) meaning {
		m := meaning{Seq: st.Seq, Succeeded: st.Succeeded.String(), FailedIndexes: st.FailedIndexes.String(),
			Failed: st.Failed, Lost: st.Lost, Evicted: st.Evicted, Ignored: st.Ignored, FailuresSinceSuccess: st.FailuresSinceSuccess,
			FailJob: st.FailJob, LastFailure: st.LastFailure.UTC(), LastSuccess: st.LastSuccess.UTC(), Open: st.Open, Stopping: st.Stopping,
			Attempts: map[int32]int32{}, Failures: map[int32]int32{}, LastIndexFailure: map[int32]time.Time{}, Launched: st.Launched()}
		for i, n := range st.Attempts {
			if !st.done(i) && n > 0 {
				m.Attempts[i] = n
			}
		}
		for i, n := range st.Failures {
			if !st.done(i) && n > 0 {
				m.Failures[i] = n
			}
		}
		for i, at := range st.LastIndexFailure {
			if !st.done(i) {
				m.LastIndexFailure[i] = at.UTC()
			}
		}
		return m
	}
	return cmp.Diff(of(a), of(b), cmpopts.EquateEmpty())
}

// foldedInRuns counts the pods that l's listed runs no longer stand for:
// folded into its checkpoint while pods around them were still listed.
func foldedInRuns(t testing.TB, l *batchv1alpha1.Ledger) int {
	t.Helper()
	pods, err := Unpack(l)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range l.Entries {
		n += int(l.Entries[k].Pods())
	}
	return n - len(pods)
}

// TestFoldKeepsRunsWhole: pods of one write's run end out of order. The
// fold lists the run from its first to its last pod still listed; the pods
// between them that ended are the checkpoint's. The run is not split into
// a piece per gap.
func TestFoldKeepsRunsWhole(t *testing.T) {
	entries := []batchv1alpha1.LedgerEntry{run(1, 0, 10),
		outcome(11, batchv1alpha1.EntrySucceeded, 0, 0, ""),
		outcome(12, batchv1alpha1.EntrySucceeded, 2, 0, ""),
		outcome(13, batchv1alpha1.EntrySucceeded, 3, 0, ""),
		outcome(14, batchv1alpha1.EntryFailed, 5, 0, batchv1alpha1.FailReasonCounted),
		outcome(15, batchv1alpha1.EntryLost, 7, 0, ""),
		outcome(16, batchv1alpha1.EntrySucceeded, 9, 0, ""),
	}
	cases := map[string]struct {
		keep   int
		want   []batchv1alpha1.LedgerEntry
		folded int // pods inside the listed run that it no longer stands for
	}{
		"every outcome folded": {keep: 0, want: []batchv1alpha1.LedgerEntry{run(2, 1, 8)}, folded: 4},
		// The newest two outcomes stay listed, with their pods' launches.
		"two outcomes kept": {keep: 2, want: []batchv1alpha1.LedgerEntry{run(2, 1, 9), entries[5], entries[6]}, folded: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			folded := foldBoth(t, ledgerOf(entries...), tc.keep)
			if diff := cmp.Diff(tc.want, folded.Entries, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("listed entries (-want +got):\n%s", diff)
			}
			if n := foldedInRuns(t, &folded); n != tc.folded {
				t.Errorf("%d pods folded inside the run, want %d", n, tc.folded)
			}
			again := foldBoth(t, folded, tc.keep)
			if diff := cmp.Diff(folded, again, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("folding twice differs:\n%s", diff)
			}
		})
	}
	folded := foldBoth(t, ledgerOf(entries...), 0)
	l := ledgerOf(append(folded.Entries, outcome(17, batchv1alpha1.EntrySucceeded, 4, 0, ""),
		outcome(18, batchv1alpha1.EntrySucceeded, 8, 0, ""))...)
	l.Checkpoint = folded.Checkpoint
	later := foldBoth(t, l, 0)
	if diff := cmp.Diff([]batchv1alpha1.LedgerEntry{run(2, 1, 6)}, later.Entries, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("after two more outcomes (-want +got):\n%s", diff)
	}
}

// TestFoldedIndexKeepsFailureTime: a pod inside a run failed and its index
// waits out its backoff delay. The run is still listed across the index:
// the checkpoint keeps the failure's time, since the index was not
// launched again.
func TestFoldedIndexKeepsFailureTime(t *testing.T) {
	failed := outcome(6, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted)
	failed.Time = metav1.NewTime(t0.Add(3 * time.Second))
	folded := foldBoth(t, ledgerOf(run(1, 0, 5), failed), 0)
	if len(folded.Entries) != 1 || folded.Entries[0].Pods() != 5 {
		t.Fatalf("listed %+v, want the run of 5 whole", folded.Entries)
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

// TestReplayReadsFoldedPodsFromCheckpoint: a run no longer stands for a pod
// strictly inside it whose launch and outcome the checkpoint holds (by the
// checkpoint alone, as it was before the listed entries) and whose index no
// launch listed before it names; any other pod of the run is read as the
// run says, and refused where that breaks a rule.
func TestReplayReadsFoldedPodsFromCheckpoint(t *testing.T) {
	withCheckpoint := func(cp batchv1alpha1.LedgerCheckpoint, entries ...batchv1alpha1.LedgerEntry) batchv1alpha1.Ledger {
		l := ledgerOf(entries...)
		l.Seq = max(l.Seq, 6)
		l.Checkpoint = &cp
		return l
	}
	succeeded2 := batchv1alpha1.LedgerCheckpoint{Seq: 6, SucceededIndexes: "2"}
	failed2 := batchv1alpha1.LedgerCheckpoint{Seq: 6, Failed: 1, Indexes: []batchv1alpha1.IndexState{{Index: 2, Attempts: 1, Failures: 1}}}
	for name, l := range map[string]batchv1alpha1.Ledger{
		"index succeeded":                      withCheckpoint(succeeded2, run(1, 0, 5)),
		"attempt failed":                       withCheckpoint(failed2, run(1, 0, 5)),
		"attempt failed, index launched again": withCheckpoint(failed2, run(1, 0, 5), launched(7, 2, 1)),
	} {
		st, err := Replay(&l)
		if err != nil {
			t.Fatalf("%s: a valid ledger is refused: %v", name, err)
		}
		if _, open := st.Open[PodName("sj", 2, 0)]; open || len(st.Open) != 4+len(l.Entries)-1 {
			t.Errorf("%s: open %v, want indexes 0, 1, 3, 4 (and the relaunch)", name, ledger.SortedKeys(st.Open))
		}
	}
	failed2Late := failed2
	failed2Late.Seq = 20
	stops := stopping(8, 1, EvictReasonSuspended)
	stops.Count = 3
	cases := map[string]refusal{
		"the checkpoint holds the run's first pod": {
			ledger:  withCheckpoint(batchv1alpha1.LedgerCheckpoint{Seq: 6, SucceededIndexes: "0"}, run(1, 0, 5)),
			wantErr: "launch of finished index 0",
		},
		"the checkpoint holds the run's last pod": {
			ledger:  withCheckpoint(batchv1alpha1.LedgerCheckpoint{Seq: 6, SucceededIndexes: "4"}, run(1, 0, 5)),
			wantErr: "launch of finished index 4",
		},
		"the pod's seq is the checkpoint's": { // its outcome came later
			ledger:  withCheckpoint(batchv1alpha1.LedgerCheckpoint{Seq: 3, SucceededIndexes: "2"}, run(1, 0, 5)),
			wantErr: "launch of finished index 2",
		},
		"no checkpoint, the pod's outcome listed before": {
			ledger:  ledgerOf(launched(1, 2, 0), outcome(2, batchv1alpha1.EntrySucceeded, 2, 0, ""), run(3, 1, 3)),
			wantErr: "launch of finished index 2",
		},
		"a folded pod's outcome listed": {
			ledger:  withCheckpoint(failed2, run(1, 0, 5), outcome(7, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted)),
			wantErr: "pod sj-2-0 that is not open",
		},
		"a stop after the index was launched again": {
			ledger:  withCheckpoint(failed2, run(1, 1, 3), launched(7, 2, 1), stops),
			wantErr: "Stopping for pod sj-2-0 that is not open",
		},
		// Below the checkpoint's seq, the same (reviews found both accepted).
		"a stop after the index was launched again, all before the checkpoint's seq": {
			ledger:  withCheckpoint(failed2Late, run(1, 1, 3), launched(5, 2, 1), stops),
			wantErr: "Stopping for pod sj-2-0 that is not open",
		},
		"the next attempt listed before the run": {
			ledger:  withCheckpoint(failed2Late, launched(1, 2, 1), run(2, 1, 3)),
			wantErr: "launch of index 2 attempt 0, want attempt 2",
		},
	}
	checkRefused(t, cases)
}

// TestOlderReaderRefusesFoldedRuns reads folded runs as an operator of an
// earlier version does: it takes every pod of a run for one the run stands
// for (as the same ledger with each run written as its single entries
// reads). Such a reader must refuse the ledger (LedgerValid=False: nothing
// done, nothing counted twice), whatever the folded pods' outcomes were;
// the ledger itself is left as it is, for the newer operator to read again.
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
		"stopped one by one, evicted": {stopping(6, 1, EvictReasonSuspended), stopping(7, 2, EvictReasonSuspended),
			stopping(8, 3, EvictReasonScaledDown), outcome(9, batchv1alpha1.EntryEvicted, 2, 0, EvictReasonSuspended)},
	}
	for name, more := range cases {
		t.Run(name, func(t *testing.T) {
			folded := foldBoth(t, ledgerOf(append([]batchv1alpha1.LedgerEntry{run(1, 0, 5)}, more...)...), 0)
			if foldedInRuns(t, &folded) == 0 {
				t.Fatalf("no pod folded inside a run: %+v", folded.Entries)
			}
			var singles []batchv1alpha1.LedgerEntry
			for k := range folded.Entries {
				err := expand(&folded.Entries[k], nil, func(one *batchv1alpha1.LedgerEntry) error {
					singles = append(singles, *one)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			older := batchv1alpha1.Ledger{Seq: folded.Seq, Checkpoint: folded.Checkpoint, Entries: singles}
			if _, err := Replay(&older); err == nil {
				t.Errorf("a reader that takes every pod of a run accepts %+v", folded)
			}
		})
	}
}

// TestFoldRandomLedgers folds ledgers built at random: waves of launches
// with gaps, stops, every kind of outcome in any order, attempts above 0,
// folds that keep 0 to 3 outcomes. Every fold must mean exactly what it
// folded, and must be read back by Replay.
func TestFoldRandomLedgers(t *testing.T) {
	var foldedPods int
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 7))
		l, now := batchv1alpha1.Ledger{}, t0
		for step := range 60 {
			if rng.IntN(3) != 0 {
				now = now.Add(time.Second)
			}
			add := randomEntries(rng, mustReplay(t, &l), now)
			listed := len(l.Entries)
			l = ledger.Append(&l, add)
			l.Entries = append(l.Entries[:listed], Pack(l.Entries[listed:])...)
			if rng.IntN(2) == 0 {
				var err error
				if l, err = foldChecked(l, rng.IntN(4)); err != nil {
					t.Fatalf("seed %d, step %d: %v", seed, step, err)
				}
				foldedPods += foldedInRuns(t, &l)
			}
		}
	}
	if foldedPods == 0 {
		t.Errorf("no fold left a pod folded inside a run")
	}
	t.Logf("pods folded inside listed runs, summed over the folds: %d", foldedPods)
}

// randomEntries is one status write's worth of entries for a ledger of 12
// indexes in state st: a wave of launches with some indexes passed over,
// or stops of some open launches, or outcomes of some, in a random order.
func randomEntries(rng *rand.Rand, st *State, now time.Time) []batchv1alpha1.LedgerEntry {
	at := metav1.NewTime(now)
	var add []batchv1alpha1.LedgerEntry
	switch rng.IntN(4) {
	case 0:
		for i := range int32(12) {
			if !st.done(i) && !st.indexesOpen[i] && rng.IntN(4) != 0 {
				a := st.Attempts[i]
				add = append(add, batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLaunched, Pod: PodName("sj", i, a), Index: i, Attempt: a, Time: at})
			}
		}
	case 1:
		for _, ref := range sortedOpen(st) {
			if _, stopping := st.Stopping[ref.Name]; !stopping && rng.IntN(3) != 0 {
				add = append(add, batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryStopping, Pod: ref.Name, Index: ref.Index,
					Attempt: ref.Attempt, Time: at, Reason: EvictReasonSuspended})
			}
		}
	default:
		kinds := []struct {
			typ    batchv1alpha1.EntryType
			reason string
		}{{batchv1alpha1.EntrySucceeded, ""}, {batchv1alpha1.EntryFailed, batchv1alpha1.FailReasonCounted},
			{batchv1alpha1.EntryFailed, batchv1alpha1.FailReasonIgnored}, {batchv1alpha1.EntryFailed, batchv1alpha1.FailReasonFailIndex},
			{batchv1alpha1.EntryLost, ""}, {batchv1alpha1.EntryEvicted, EvictReasonSuspended}}
		for _, ref := range sortedOpen(st) {
			if rng.IntN(3) == 0 {
				k := kinds[rng.IntN(len(kinds))]
				add = append(add, batchv1alpha1.LedgerEntry{Type: k.typ, Reason: k.reason, Pod: ref.Name, Index: ref.Index, Attempt: ref.Attempt,
					Time: metav1.NewTime(now.Add(-time.Duration(rng.IntN(5)) * time.Second))})
			}
		}
		rng.Shuffle(len(add), func(a, b int) { add[a], add[b] = add[b], add[a] })
	}
	return add
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
	largest, _ := driveToComplete(t, dr, 2000, func() {
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
	})
	if dr.status.Succeeded != completions {
		t.Fatalf("succeeded %d, want %d", dr.status.Succeeded, completions)
	}
	if largest > 64<<10 {
		t.Errorf("largest status %d bytes, want at most 64 KiB", largest)
	}
	t.Logf("largest status %d bytes, parallelism %d, pods ending at random", largest, par)
}
