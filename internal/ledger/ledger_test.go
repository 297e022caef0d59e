package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestMinPositive(t *testing.T) {
	cases := map[string]struct{ a, b, want time.Duration }{
		"both":       {a: 3, b: 2, want: 2},
		"a zero":     {a: 0, b: 2, want: 2},
		"b zero":     {a: 3, b: 0, want: 3},
		"both zero":  {want: 0},
		"a negative": {a: -1, b: 5, want: 5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := MinPositive(tc.a, tc.b); got != tc.want {
				t.Errorf("MinPositive(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestAppend(t *testing.T) {
	l := batchv1alpha1.Ledger{Seq: 4, Entries: []batchv1alpha1.LedgerEntry{{Seq: 4, Pod: "a"}}}
	got := Append(&l, []batchv1alpha1.LedgerEntry{{Pod: "b"}, {Pod: "c", Seq: 99}})
	want := batchv1alpha1.Ledger{Seq: 6, Entries: []batchv1alpha1.LedgerEntry{{Seq: 4, Pod: "a"}, {Seq: 5, Pod: "b"}, {Seq: 6, Pod: "c"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Append (-want,+got):\n%s", diff)
	}
	if len(l.Entries) != 1 || l.Seq != 4 {
		t.Errorf("Append changed its input: %+v", l)
	}
}

func TestWalk(t *testing.T) {
	entries := func(seqs ...int64) []batchv1alpha1.LedgerEntry {
		out := make([]batchv1alpha1.LedgerEntry, len(seqs))
		for k, s := range seqs {
			out[k].Seq = s
		}
		return out
	}
	cases := map[string]struct {
		ledger    batchv1alpha1.Ledger
		refuse    int64 // apply refuses the entry of this seq
		wantSeqs  []int64
		wantError string
	}{
		"in order":             {ledger: batchv1alpha1.Ledger{Seq: 3, Entries: entries(1, 2, 3)}, wantSeqs: []int64{1, 2, 3}},
		"gaps are fine":        {ledger: batchv1alpha1.Ledger{Seq: 9, Entries: entries(2, 7)}, wantSeqs: []int64{2, 7}},
		"empty":                {ledger: batchv1alpha1.Ledger{}},
		"seq repeated":         {ledger: batchv1alpha1.Ledger{Seq: 3, Entries: entries(1, 1)}, wantSeqs: []int64{1}, wantError: "entry 1: seq 1 not above 1"},
		"seq back":             {ledger: batchv1alpha1.Ledger{Seq: 3, Entries: entries(2, 1)}, wantSeqs: []int64{2}, wantError: "entry 1: seq 1 not above 2"},
		"ledger seq too low":   {ledger: batchv1alpha1.Ledger{Seq: 2, Entries: entries(1, 3)}, wantSeqs: []int64{1, 3}, wantError: "below its last entry 3"},
		"below checkpoint":     {ledger: batchv1alpha1.Ledger{Seq: 2, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 5}}, wantError: "below its last entry 5"},
		"refused by apply":     {ledger: batchv1alpha1.Ledger{Seq: 3, Entries: entries(1, 2, 3)}, refuse: 2, wantSeqs: []int64{1, 2}, wantError: "entry 1 (seq 2): refused"},
		"checkpoint then more": {ledger: batchv1alpha1.Ledger{Seq: 7, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 5}, Entries: entries(6, 7)}, wantSeqs: []int64{6, 7}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var seqs []int64
			err := Walk(&tc.ledger, func(e *batchv1alpha1.LedgerEntry) error {
				seqs = append(seqs, e.Seq)
				if e.Seq == tc.refuse {
					return errRefused
				}
				return nil
			})
			if diff := cmp.Diff(tc.wantSeqs, seqs); diff != "" {
				t.Errorf("entries applied (-want,+got):\n%s", diff)
			}
			if (err == nil) != (tc.wantError == "") || (err != nil && !strings.Contains(err.Error(), tc.wantError)) {
				t.Errorf("Walk error = %v, want one containing %q", err, tc.wantError)
			}
		})
	}
}

var errRefused = errorString("refused")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestFence(t *testing.T) {
	f := Fence{CreateWindow: 10 * time.Second, CreateTimeout: 4 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		after time.Duration
		want  bool
	}{
		"at the commit":       {after: 0, want: true},
		"just inside":         {after: 10*time.Second - time.Nanosecond, want: true},
		"at the window's end": {after: 10 * time.Second, want: false},
		"long after":          {after: time.Hour, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := f.MayCreate(t0, t0.Add(tc.after)); got != tc.want {
				t.Errorf("MayCreate at +%s = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
	if got, want := f.CreateDeadline(t0), t0.Add(14*time.Second); !got.Equal(want) {
		t.Errorf("CreateDeadline = %s, want %s", got, want)
	}
	if got, want := f.LostGrace(), 14*time.Second+ClockMargin; got != want {
		t.Errorf("LostGrace = %s, want %s", got, want)
	}
	// The grace outlasts every create's deadline: a live read that may
	// declare an object Lost comes after any create of it has ended.
	if !t0.Add(f.LostGrace()).After(f.CreateDeadline(t0)) {
		t.Error("LostGrace ends before the create deadline")
	}
	if (Fence{}).OrDefault() != DefaultFence || (Fence{CreateWindow: time.Second}).OrDefault() != DefaultFence || f.OrDefault() != f {
		t.Error("OrDefault: the zero or partial fence is DefaultFence, a full one is itself")
	}
}

func TestShortName(t *testing.T) {
	long := strings.Repeat("x", 100)
	cases := map[string]struct {
		name string
		n    int
		want string
	}{
		"fits":           {name: "etl", n: 10, want: "etl"},
		"exactly":        {name: "abcdefghij", n: 10, want: "abcdefghij"},
		"hashed":         {name: long, n: 20, want: "xxxxxxxxxxx-" + ShortName(long, 20)[12:]},
		"no dash before": {name: "abcdefghij-klmnop", n: 20, want: "abcdefghij-klmnop"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ShortName(tc.name, tc.n); got != tc.want || len(got) > tc.n {
				t.Errorf("ShortName(%q, %d) = %q, want %q", tc.name, tc.n, got, tc.want)
			}
		})
	}
	if got := ShortName(strings.Repeat("a", 10)+"-"+long, 20); strings.Contains(got, "--") {
		t.Errorf("ShortName left a dash before its hash: %q", got)
	}
	if ShortName(long, 20) == ShortName(long+"y", 20) {
		t.Error("two long names share a short name")
	}
}

func TestFinishedAndSetCondition(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var conds []metav1.Condition
	if Finished(conds) != nil {
		t.Fatal("Finished with no conditions")
	}
	if !SetCondition(&conds, batchv1alpha1.ConditionComplete, metav1.ConditionFalse, "Running", "", now) {
		t.Fatal("SetCondition reported no change on a new condition")
	}
	if Finished(conds) != nil {
		t.Error("Finished with Complete=False")
	}
	if SetCondition(&conds, batchv1alpha1.ConditionComplete, metav1.ConditionFalse, "Running", "", now.Add(time.Hour)) {
		t.Error("SetCondition reported a change for the same condition")
	}
	SetCondition(&conds, batchv1alpha1.ConditionFailed, metav1.ConditionTrue, "BackoffLimitExceeded", "m", now)
	if c := Finished(conds); c == nil || c.Type != batchv1alpha1.ConditionFailed || !c.LastTransitionTime.Time.Equal(now) {
		t.Errorf("Finished = %+v, want the Failed condition set at %s", c, now)
	}
	SetCondition(&conds, batchv1alpha1.ConditionLedgerValid, metav1.ConditionFalse, batchv1alpha1.ReasonLedgerCorrupt, "x", now)
	MarkLedgerValid(&conds, now)
	if c := conds[len(conds)-1]; c.Status != metav1.ConditionTrue || c.Reason != batchv1alpha1.ReasonLedgerOK {
		t.Errorf("after MarkLedgerValid: %+v", c)
	}
}

func TestDueForLiveRead(t *testing.T) {
	f := Fence{CreateWindow: 10 * time.Second, CreateTimeout: 4 * time.Second} // LostGrace 19s
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	cases := map[string]struct {
		ago      []time.Duration
		wantDue  []time.Duration
		wantWait time.Duration
	}{
		"none":                    {},
		"all due":                 {ago: []time.Duration{19 * time.Second, time.Minute}, wantDue: []time.Duration{19 * time.Second, time.Minute}},
		"none due: next first":    {ago: []time.Duration{time.Second, 15 * time.Second}, wantWait: 4 * time.Second},
		"some due":                {ago: []time.Duration{30 * time.Second, 18 * time.Second}, wantDue: []time.Duration{30 * time.Second}, wantWait: time.Second},
		"a create may still land": {ago: []time.Duration{19*time.Second - time.Millisecond}, wantWait: time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			due, wait := DueForLiveRead(f, tc.ago, func(ago time.Duration) time.Time { return now.Add(-ago) }, now)
			if diff := cmp.Diff(tc.wantDue, due); diff != "" || wait != tc.wantWait {
				t.Errorf("due (-want,+got):\n%s\nwait %s, want %s", diff, wait, tc.wantWait)
			}
		})
	}
}
