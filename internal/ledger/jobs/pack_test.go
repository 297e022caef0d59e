package jobs

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// named is the first launch of index i of a SafeJob called job.
func named(job string, seq int64, i int32) batchv1alpha1.LedgerEntry {
	e := launched(seq, i, 0)
	e.Pod = PodName(job, i, 0)
	return e
}

// stopping is the Stopping entry of index i's first launch.
func stopping(seq int64, i int32, reason string) batchv1alpha1.LedgerEntry {
	return outcome(seq, batchv1alpha1.EntryStopping, i, 0, reason)
}

func TestPackRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 60) // its pods' names are shortened, differently from index 10 on
	later := launched(4, 3, 0)
	later.Time = metav1.NewTime(t0.Add(time.Second))
	cases := map[string]struct {
		entries []batchv1alpha1.LedgerEntry
		want    int // entries once packed
	}{
		"one write's launches": {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0)}, want: 1},
		"an index skipped":     {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 2, 0), launched(3, 3, 0)}, want: 2},
		"a seq skipped":        {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(3, 1, 0)}, want: 2},
		"another attempt": {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), outcome(2, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonCounted),
			launched(3, 0, 1), launched(4, 1, 0)}, want: 4},
		"another write's time":  {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0), later}, want: 2},
		"another SafeJob's pod": {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), named("other", 2, 1)}, want: 2},
		"an outcome between": {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, ""),
			launched(3, 1, 0), launched(4, 2, 0)}, want: 3},
		"one write's stops": {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0),
			stopping(4, 0, EvictReasonSuspended), stopping(5, 1, EvictReasonSuspended), stopping(6, 2, EvictReasonSuspended)}, want: 2},
		"stops for another reason": {entries: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0),
			stopping(3, 0, EvictReasonSuspended), stopping(4, 1, "Other")}, want: 3},
		"a stop never joins a launch": {entries: []batchv1alpha1.LedgerEntry{launched(1, 1, 0), launched(2, 0, 0),
			stopping(3, 1, EvictReasonSuspended)}, want: 3},
		"a shortened name, across its change of length": {entries: []batchv1alpha1.LedgerEntry{named(long, 1, 8), named(long, 2, 9),
			named(long, 3, 10), named(long, 4, 11)}, want: 2},
		"nothing": {want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			packed := Pack(tc.entries)
			if len(packed) != tc.want {
				t.Errorf("packed into %d entries, want %d: %+v", len(packed), tc.want, packed)
			}
			back, err := Unpack(&batchv1alpha1.Ledger{Entries: packed})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.entries, back, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Unpack(Pack(entries)) differs (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(Pack(packed), packed, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("packing twice differs:\n%s", diff)
			}
			if len(tc.entries) == 0 {
				return
			}
			l := ledgerOf(tc.entries...)
			pl := batchv1alpha1.Ledger{Seq: l.Seq, Entries: packed}
			if diff := cmp.Diff(mustReplay(t, &l), mustReplay(t, &pl), cmpopts.IgnoreUnexported(State{}),
				cmp.Comparer(func(a, b ledger.IndexSet) bool { return a.String() == b.String() })); diff != "" {
				t.Errorf("packed ledger means something else:\n%s", diff)
			}
		})
	}
}

func TestReplayRejectsBadCounts(t *testing.T) {
	three := launched(1, 0, 0)
	three.Count = 3
	cases := map[string]refusal{
		"a count on an outcome": {
			ledger: ledgerOf(launched(1, 0, 0), func() batchv1alpha1.LedgerEntry {
				e := outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, "")
				e.Count = 2
				return e
			}()),
			wantErr: "count 2 on a Succeeded entry",
		},
		"a first pod not named by its index": {
			ledger: ledgerOf(func() batchv1alpha1.LedgerEntry {
				e := three
				e.Pod = "sj-7-0"
				return e
			}()),
			wantErr: "does not name its first pod",
		},
		"seqs overlapping the next entry": {
			ledger:  batchv1alpha1.Ledger{Seq: 4, Entries: []batchv1alpha1.LedgerEntry{three, launched(3, 5, 0)}},
			wantErr: "seq 3 not above 3",
		},
		"ledger seq below its last launch": {
			ledger:  batchv1alpha1.Ledger{Seq: 2, Entries: []batchv1alpha1.LedgerEntry{three}},
			wantErr: "below its last entry 3",
		},
		"an index launched twice": {
			ledger: ledgerOf(launched(1, 1, 0), func() batchv1alpha1.LedgerEntry {
				e := three
				e.Seq = 2
				return e
			}()),
			wantErr: "launch of index 1 attempt 0, want attempt 1",
		},
		"a stop of pods not all open": {
			ledger: ledgerOf(three, func() batchv1alpha1.LedgerEntry {
				e := stopping(4, 1, EvictReasonSuspended)
				e.Count = 3
				return e
			}()),
			wantErr: "Stopping for pod sj-3-0 that is not open",
		},
		"seqs beyond the largest": {
			ledger: batchv1alpha1.Ledger{Seq: math.MaxInt64, Entries: []batchv1alpha1.LedgerEntry{func() batchv1alpha1.LedgerEntry {
				e := three
				e.Seq = math.MaxInt64 - 1
				return e
			}()}},
			wantErr: "the seqs of its 3 pods overflow",
		},
		"a count above the maximum": {
			ledger: batchv1alpha1.Ledger{Seq: 1 << 40, Entries: []batchv1alpha1.LedgerEntry{func() batchv1alpha1.LedgerEntry {
				e := three
				e.Count = 1 << 30
				return e
			}()}},
			wantErr: "overflows",
		},
	}
	checkRefused(t, cases)
}

// TestLedgerSizeIndependentOfParallelism drives the largest parallelism
// with pods that end in launch order, as a steady stream of equal pods
// does: the listed ledger holds a few entries per status write in flight,
// not one per open pod, and stays a few KiB where one entry per launch
// needed about 100 bytes per open pod.
func TestLedgerSizeIndependentOfParallelism(t *testing.T) {
	const par, completions = 2000, 10000
	dr := newDriver(indexedSpec(par, completions))
	largest, largestEntries := driveToComplete(t, dr, 400, func() {
		// The oldest 300 running pods succeed: about one wave's worth per write.
		ended := 0
		for k, p := range dr.pods {
			if p.Status.Phase == corev1.PodRunning && ended < 300 {
				dr.pods[k] = withPhase(p, corev1.PodSucceeded, 0)
				ended++
			}
		}
	})
	if dr.status.Succeeded != completions {
		t.Fatalf("succeeded %d, want %d", dr.status.Succeeded, completions)
	}
	if largestEntries > 2*par/WaveSize+8 || largest > 8<<10 {
		t.Errorf("largest status %d bytes with %d entries listed, want at most 8 KiB and %d entries", largest, largestEntries, 2*par/WaveSize+8)
	}
	t.Logf("largest status %d bytes, %d entries listed, parallelism %d", largest, largestEntries, par)
}

// driveToComplete steps dr, one second at a time, until its SafeJob is
// Complete and no pod holds the finalizer, calling end after each step to
// end some running pods. It returns the largest status written, in bytes
// of JSON, and the most entries it listed.
func driveToComplete(t *testing.T, dr *driver, maxSteps int, end func()) (largest, largestEntries int) {
	t.Helper()
	for step := 0; !findTrue(dr.status.Conditions, batchv1alpha1.ConditionComplete) || hasHeldPod(dr.pods); step++ {
		if step > maxSteps {
			t.Fatalf("not complete after %d steps: succeeded %d", step, dr.status.Succeeded)
		}
		dr.step(t, t0.Add(time.Duration(step)*time.Second))
		raw, err := json.Marshal(dr.status)
		if err != nil {
			t.Fatal(err)
		}
		largest, largestEntries = max(largest, len(raw)), max(largestEntries, len(dr.status.Ledger.Entries))
		end()
	}
	return largest, largestEntries
}

// TestStopsListedAsRuns suspends a SafeJob of the largest parallelism with
// every pod running: the ledger lists the stops of each wave as one entry,
// as it lists launches, so its size stays a few KiB while 2,000 pods are
// being stopped (about 200 KiB written one entry per pod) and after.
func TestStopsListedAsRuns(t *testing.T) {
	const par, completions = 2000, 10000
	dr := newDriver(indexedSpec(par, completions))
	now := t0
	step := func() {
		t.Helper()
		now = now.Add(time.Second)
		dr.step(t, now)
	}
	for len(dr.pods) < par {
		if now.Sub(t0) > 20*time.Second {
			t.Fatalf("%d pods created, want %d", len(dr.pods), par)
		}
		step()
	}
	dr.spec.Suspend = ptr.To(true)
	var largest int
	for stopping := 0; stopping < par; stopping = len(mustReplay(t, &dr.status.Ledger).Stopping) {
		if now.Sub(t0) > 60*time.Second {
			t.Fatalf("%d pods being stopped, want %d", stopping, par)
		}
		step()
		raw, err := json.Marshal(dr.status)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, len(raw))
	}
	if n := len(dr.status.Ledger.Entries); n > 2*par/WaveSize+4 || largest > 8<<10 {
		t.Errorf("%d pods being stopped: largest status %d bytes, %d entries listed; want at most 8 KiB and %d entries",
			par, largest, n, 2*par/WaveSize+4)
	}
	for k, p := range dr.pods {
		dr.pods[k] = withPhase(p, corev1.PodFailed, 137)
	}
	for hasHeldPod(dr.pods) {
		if now.Sub(t0) > 90*time.Second {
			t.Fatal("pods still held after they ended")
		}
		step()
	}
	st := mustReplay(t, &dr.status.Ledger)
	if len(st.Open) != 0 || st.Evicted != par || st.Succeeded.Len() != 0 {
		t.Errorf("after the stop: %d open, %d evicted, %d succeeded; want 0, %d, 0", len(st.Open), st.Evicted, st.Succeeded.Len(), par)
	}
	t.Logf("largest status %d bytes while %d pods were being stopped", largest, par)
}

// TestFollowsComparesEveryField checks that an entry joins a run only when
// every field of LedgerEntry agrees, field by field through reflection, so
// that a field added to the type is not left out of follows: the run would
// otherwise stand for pods whose entries said something else.
func TestFollowsComparesEveryField(t *testing.T) {
	first := named("sj", 10, 3)
	first.Run, first.Missed, first.Reason, first.UID = "run", 1, "reason", "uid"
	first.ScheduledTime = ptr.To(metav1.NewTime(t0))
	next := first
	next.Seq, next.Index, next.Pod = 11, 4, PodName("sj", 4, 0)
	prefix, ok := runPrefix(&first)
	if !ok || !follows(&first, prefix, &next) {
		t.Fatalf("the next pod's entry does not follow its run")
	}
	// Count says how many pods an entry stands for, not what they are:
	// an entry with a count may join a run too.
	ignored := map[string]bool{"Count": true}
	typ := reflect.TypeFor[batchv1alpha1.LedgerEntry]()
	for k := range typ.NumField() {
		f := typ.Field(k)
		if ignored[f.Name] {
			continue
		}
		other := next
		v := reflect.ValueOf(&other).Elem().Field(k)
		switch v.Interface().(type) {
		case string, batchv1alpha1.EntryType:
			v.SetString(v.String() + "x")
		case int32, int64:
			v.SetInt(v.Int() + 1)
		case metav1.Time:
			v.Set(reflect.ValueOf(metav1.NewTime(t0.Add(time.Second))))
		case *metav1.Time:
			v.Set(reflect.ValueOf((*metav1.Time)(nil)))
		default:
			t.Fatalf("field %s of type %s: teach this test how to change it", f.Name, f.Type)
		}
		if follows(&first, prefix, &other) {
			t.Errorf("an entry whose %s differs follows the run", f.Name)
		}
	}
}
