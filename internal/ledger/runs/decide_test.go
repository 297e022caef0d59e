package runs

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

var r0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// scheduled is the Scheduled entry of a run committed at its scheduled time.
func scheduled(seq int64, run string, at time.Time, missed int64) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: batchv1alpha1.EntryScheduled, Run: run,
		ScheduledTime: ptr.To(metav1.NewTime(at)), Missed: missed, Time: metav1.NewTime(at)}
}

// byHand is the Scheduled entry of a run asked for by hand at time at.
func byHand(seq int64, run string, at time.Time) batchv1alpha1.LedgerEntry {
	e := scheduled(seq, run, at, 0)
	e.Reason = batchv1alpha1.ReasonManual
	return e
}

// manualChild is a run started by hand.
func manualChild(name string, at time.Time, cond string) *batchv1alpha1.SafeJob {
	run := child(name, at, cond)
	run.Annotations[batchv1alpha1.InstantiateAnnotation] = batchv1alpha1.InstantiateManual
	return run
}

func runOutcome(seq int64, typ batchv1alpha1.EntryType, run string, at time.Time) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: typ, Run: run, ScheduledTime: ptr.To(metav1.NewTime(at))}
}

func TestReplayRejects(t *testing.T) {
	a, b := r0, r0.Add(time.Minute)
	cases := map[string]batchv1alpha1.Ledger{
		"time goes back":         {Seq: 2, Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-b", b, 0), scheduled(2, "x-a", a, 0)}},
		"same time twice":        {Seq: 2, Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-a", a, 0), scheduled(2, "x-a2", a, 0)}},
		"run twice":              {Seq: 2, Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-a", a, 0), scheduled(2, "x-a", b, 0)}},
		"outcome of unknown run": {Seq: 1, Entries: []batchv1alpha1.LedgerEntry{runOutcome(1, batchv1alpha1.EntrySucceeded, "x-a", a)}},
		"two outcomes": {Seq: 3, Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-a", a, 0),
			runOutcome(2, batchv1alpha1.EntrySucceeded, "x-a", a), runOutcome(3, batchv1alpha1.EntryFailed, "x-a", a)}},
		"pod launch in a parent": {Seq: 1, Entries: []batchv1alpha1.LedgerEntry{{Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "p-0-0"}}},
		"before the checkpoint": {Seq: 2, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 1, LastScheduleTime: ptr.To(metav1.NewTime(b))},
			Entries: []batchv1alpha1.LedgerEntry{scheduled(2, "x-a", a, 0)}},
		"seq below entries": {Seq: 0, Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-a", a, 0)}},
		"negative missed":   {Seq: 1, Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-a", a, -1)}},
		"manual run twice":  {Seq: 2, Entries: []batchv1alpha1.LedgerEntry{byHand(1, "x-h", a), byHand(2, "x-h", b)}},
		"manual run under a scheduled run's name": {Seq: 2,
			Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-a", a, 0), byHand(2, "x-a", b)}},
		"manual run with missed times": {Seq: 1, Entries: []batchv1alpha1.LedgerEntry{func() batchv1alpha1.LedgerEntry {
			e := byHand(1, "x-h", a)
			e.Missed = 1
			return e
		}()}},
	}
	// A run asked for by hand stands outside the schedule's order: before
	// or between scheduled times, and before the checkpoint's.
	ok := batchv1alpha1.Ledger{Seq: 3, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 0, LastScheduleTime: ptr.To(metav1.NewTime(b))},
		Entries: []batchv1alpha1.LedgerEntry{scheduled(1, "x-c", b.Add(time.Minute), 0), byHand(2, "x-h", a), byHand(3, "x-i", a)}}
	st, err := Replay(&ok)
	if err != nil {
		t.Fatalf("Replay refused manual runs outside the schedule's order: %v", err)
	}
	if st.LastManual != "x-i" || !st.LastScheduled.Equal(b.Add(time.Minute)) {
		t.Errorf("last manual %q, last scheduled %s; want x-i (the later of two in one second), %s", st.LastManual,
			st.LastScheduled, b.Add(time.Minute))
	}
	for name, l := range cases {
		if _, err := Replay(&l); err == nil {
			t.Errorf("%s: Replay accepted %+v", name, l)
		}
	}
}

// Two runs asked for by hand with one request time, as a ledger written
// before request times were made to increase can hold: whichever closes and
// is folded first, the ledger still names the later one as carried out, so
// its request is never committed again, and the earlier one stays known too.
func TestFoldManualRunsOfOneSecond(t *testing.T) {
	at := r0.Add(time.Minute)
	a, b := "p-by-hand-a", "p-by-hand-b"
	base := batchv1alpha1.Ledger{Seq: 2, Entries: []batchv1alpha1.LedgerEntry{byHand(1, a, at), byHand(2, b, at)}}
	closeRun := func(l batchv1alpha1.Ledger, run string) batchv1alpha1.Ledger {
		return ledger.Append(&l, []batchv1alpha1.LedgerEntry{runOutcome(0, batchv1alpha1.EntrySucceeded, run, at)})
	}
	for _, order := range [][]string{{b, a}, {a, b}} {
		l := base
		for k, run := range order {
			closed := closeRun(l, run)
			folded, err := Fold(&closed, 0)
			if err != nil {
				t.Fatal(err)
			}
			l = folded
			st := checkManualFold(t, fmt.Sprintf("closed in order %v, after %s", order, run), &closed, &l, b, at)
			if _, open := st.Open[a]; !open && k == 0 && run == b {
				t.Errorf("closed in order %v: %s, still running, is not listed open", order, a)
			}
			if k == 1 && (len(l.Entries) != 0 || st.Runs != 2) {
				t.Errorf("closed in order %v: both closed, yet %d entries listed and %d runs counted; want all folded, 2",
					order, len(l.Entries), st.Runs)
			}
		}
	}
	// I4 refuses a ledger that forgets the latest request: b folded alone,
	// a listed at its time and so read as the latest.
	prev, err := Replay(ptr.To(closeRun(base, b)))
	if err != nil {
		t.Fatal(err)
	}
	forgets := batchv1alpha1.Ledger{Seq: 3, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 3, Runs: 1, LastManualRun: b,
		LastManualTime: ptr.To(metav1.NewTime(at))}, Entries: []batchv1alpha1.LedgerEntry{byHand(1, a, at)}}
	if st, err := Replay(&forgets); err != nil || st.Covers(prev) == nil {
		t.Errorf("Covers accepts a ledger that forgets %s, the latest run asked for by hand (replay error %v)", b, err)
	}
}

// checkManualFold checks a fold of ledger before into after: it keeps every
// fact (I4), still knows latest, the last run asked for by hand, and does
// not commit a request for it again. It returns the state after.
func checkManualFold(t *testing.T, desc string, before, after *batchv1alpha1.Ledger, latest string, at time.Time) *State {
	t.Helper()
	st, err := Replay(after)
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	if prev, err := Replay(before); err != nil || st.Covers(prev) != nil {
		t.Errorf("%s: the fold loses a fact: %v, %v", desc, err, st.Covers(prev))
	}
	if !st.HasRun(latest) {
		t.Errorf("%s: the ledger forgets %s, the latest run asked for by hand (%+v)", desc, latest, after)
	}
	in := &Input{Name: "p", Created: r0, Spec: parentSpec("@every 5s", batchv1alpha1.AllowConcurrent),
		Status: &batchv1alpha1.SafeJobStatus{Ledger: *after}, Runs: map[string]*batchv1alpha1.SafeJob{}, Busy: map[string]int{},
		Seen: map[string]k8stypes.UID{}, Issued: map[string]bool{}, Gone: map[string]bool{}, Taken: map[string]bool{},
		RunRequest: latest, Now: at.Add(time.Second)}
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range plan.Append {
		if e.Run == latest {
			t.Errorf("%s: the request for %s is committed again", desc, latest)
		}
	}
	return st
}

// A request's time is after every earlier request's, also in the same
// second or after the clock stepped back, so a live run asked for by hand
// never shares its time with a folded one (which isClosed would take it for).
func TestManualRunTimesIncrease(t *testing.T) {
	last := r0.Add(time.Hour)
	folded := batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 2, Checkpoint: &batchv1alpha1.LedgerCheckpoint{
		Seq: 2, Runs: 1, LastManualRun: "p-by-hand-a", LastManualTime: ptr.To(metav1.NewTime(last))}}}
	for desc, c := range map[string]struct{ now, want time.Time }{
		"in the second of the last request": {last.Add(400 * time.Millisecond), last.Add(time.Second)},
		"after the clock stepped back":      {last.Add(-time.Minute), last.Add(time.Second)},
		"later":                             {last.Add(90*time.Second + 300*time.Millisecond), last.Add(90 * time.Second)},
	} {
		in := &Input{Name: "p", Created: r0, Spec: parentSpec("@every 5s", batchv1alpha1.AllowConcurrent),
			Status: folded.DeepCopy(), Runs: map[string]*batchv1alpha1.SafeJob{}, Busy: map[string]int{},
			Seen: map[string]k8stypes.UID{}, Issued: map[string]bool{}, Gone: map[string]bool{}, Taken: map[string]bool{},
			RunRequest: "p-by-hand-b", Now: c.now}
		plan, err := Decide(in)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(plan.Append, func(e batchv1alpha1.LedgerEntry) bool { return e.Run == "p-by-hand-b" })
		if i < 0 {
			t.Fatalf("%s: the request was not committed: %v", desc, entryKinds(plan.Append))
		}
		if got := plan.Append[i].ScheduledTime.Time; !got.Equal(c.want) {
			t.Errorf("%s: request time %s, want %s", desc, got, c.want)
		}
		// Seen by a process whose copy of the parent is older than the run.
		d := &decision{in: in}
		if d.st, err = Replay(&folded.Ledger); err != nil {
			t.Fatal(err)
		}
		if d.isClosed(manualChild("p-by-hand-b", plan.Append[i].ScheduledTime.Time, "")) {
			t.Errorf("%s: the live run is taken for one folded by a parent's copy older than it", desc)
		}
	}
}

func TestRunName(t *testing.T) {
	dns := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	onMinute := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if got, want := Name("nightly", onMinute), fmt.Sprintf("nightly-%d", onMinute.Unix()/60); got != want {
		t.Errorf("Name on a minute = %q, want %q (CronJob's minutes)", got, want)
	}
	if got, want := Name("fast", onMinute.Add(5*time.Second)), fmt.Sprintf("fast-%d", onMinute.Unix()+5); got != want {
		t.Errorf("Name off a minute = %q, want %q (seconds)", got, want)
	}
	long := strings.Repeat("a", 70) + "-" + strings.Repeat("b", 70)
	seen := map[string]bool{}
	for k := range 120 {
		n := Name(long, onMinute.Add(time.Duration(k)*5*time.Second))
		if len(n) > 63 || !dns.MatchString(n) {
			t.Errorf("Name = %q: not a valid label value", n)
		}
		if seen[n] {
			t.Errorf("Name %q repeated for two times", n)
		}
		seen[n] = true
	}
	if Name(long, onMinute) == Name(long+"c", onMinute) {
		t.Error("two long parents share a run name")
	}
}

func TestFoldRunsKeepsMeaning(t *testing.T) {
	var l batchv1alpha1.Ledger
	at := r0
	for k := range 60 {
		at = at.Add(time.Minute)
		name := Name("p", at)
		l = ledger.Append(&l, []batchv1alpha1.LedgerEntry{scheduled(0, name, at, int64(k%3))})
		if k%7 != 3 { // every seventh run stays open
			l = ledger.Append(&l, []batchv1alpha1.LedgerEntry{runOutcome(0, batchv1alpha1.EntrySucceeded, name, at)})
		}
	}
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
	if len(folded.Entries) >= len(l.Entries) {
		t.Errorf("fold kept %d of %d entries", len(folded.Entries), len(l.Entries))
	}
	if !after.LastScheduled.Equal(before.LastScheduled) || after.Runs != before.Runs || after.Missed != before.Missed ||
		len(after.Open) != len(before.Open) || len(after.Closed) != 5 {
		t.Errorf("fold changed the meaning: before %+v after %+v", before, after)
	}
	if err := after.Covers(before); err != nil {
		t.Errorf("folded state does not cover the original: %v", err)
	}
	// Appending after the fold still works and still refuses old times.
	late := ledger.Append(&folded, []batchv1alpha1.LedgerEntry{scheduled(0, "p-old", r0.Add(30*time.Minute), 0)})
	if _, err := Replay(&late); err == nil {
		t.Error("a time before the folded ones was accepted after the fold")
	}
}

// parent builds a scheduled SafeJob's spec for Decide tests.
func parentSpec(schedule string, policy batchv1alpha1.ConcurrencyPolicy) *batchv1alpha1.SafeJobSpec {
	return &batchv1alpha1.SafeJobSpec{Schedule: &schedule, ConcurrencyPolicy: policy}
}

func child(name string, at time.Time, cond string) *batchv1alpha1.SafeJob {
	run := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name),
		Finalizers:  []string{batchv1alpha1.RunFinalizer},
		Annotations: map[string]string{batchv1alpha1.ScheduledTimeAnnotation: at.UTC().Format(time.RFC3339)}}}
	if cond != "" {
		run.Status.Conditions = []metav1.Condition{{Type: cond, Status: metav1.ConditionTrue, Reason: "R"}}
		run.Status.CompletionTime = ptr.To(metav1.NewTime(at.Add(time.Second)))
	}
	return run
}

func entryKinds(es []batchv1alpha1.LedgerEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, string(e.Type)+":"+e.Run)
	}
	return out
}

// decideCase is one case of TestDecideRuns: the input and what the plan must hold.
type decideCase struct {
	spec        *batchv1alpha1.SafeJobSpec
	status      batchv1alpha1.SafeJobStatus
	runs        []*batchv1alpha1.SafeJob
	busy        map[string]int
	seen        []string
	issued      []string
	gone        []string
	taken       []string
	now         time.Time
	wantAppend  []string
	wantCreate  []string
	wantDelete  []string
	wantRelease []string
	wantMissed  int64
	wantReason  string            // of the last appended entry
	wantUID     string            // of the last appended entry
	wantCond    map[string]string // type -> reason
	request     string            // RunNowAnnotation
	wantWaits   bool              // the request is not started, and the plan says why
}

func TestDecideRuns(t *testing.T) {
	every := time.Minute
	tick := func(k int) time.Time { return r0.Add(time.Duration(k) * every) }
	name := func(k int) string { return Name("p", tick(k)) }
	ledgerOf := func(es ...batchv1alpha1.LedgerEntry) batchv1alpha1.SafeJobStatus {
		l := ledger.Append(&batchv1alpha1.Ledger{}, es)
		return batchv1alpha1.SafeJobStatus{Ledger: l}
	}
	cases := map[string]decideCase{
		"first tick commits, creates nothing yet": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(time.Second),
			wantAppend: []string{"Scheduled:" + name(1)},
			wantCond:   map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonScheduled},
		},
		"observed commit creates the run": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(2 * time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0)),
			wantCreate: []string{name(1)},
		},
		"created run is not created again, next tick waits": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(3 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0)),
			runs:   []*batchv1alpha1.SafeJob{child(name(1), tick(1), "")},
		},
		"more than 100 missed: the most recent runs, the rest counted": {
			spec: parentSpec("* * * * *", ""), now: tick(300).Add(time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(1), tick(1))),
			wantAppend: []string{"Scheduled:" + name(300)}, wantMissed: 298,
			wantCond: map[string]string{batchv1alpha1.ConditionMissedRuns: batchv1alpha1.ReasonTooManyMissedTimes},
		},
		"startingDeadlineSeconds passed: nothing runs, the miss is reported": {
			spec: func() *batchv1alpha1.SafeJobSpec {
				s := parentSpec("* * * * *", "")
				s.StartingDeadlineSeconds = ptr.To[int64](10)
				return s
			}(),
			now:      tick(5).Add(20 * time.Second),
			status:   ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(1), tick(1))),
			wantCond: map[string]string{batchv1alpha1.ConditionMissedRuns: batchv1alpha1.ReasonMissedSchedule},
		},
		"finished run: outcome recorded with the run's UID": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(30 * time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0)),
			runs:       []*batchv1alpha1.SafeJob{child(name(1), tick(1), batchv1alpha1.ConditionComplete)},
			wantAppend: []string{"Succeeded:" + name(1)},
			wantUID:    "uid-" + name(1),
		},
		"closed run releases its finalizer": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(30 * time.Second),
			status:      ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(1), tick(1))),
			runs:        []*batchv1alpha1.SafeJob{child(name(1), tick(1), batchv1alpha1.ConditionComplete)},
			wantRelease: []string{name(1)},
		},
		"history limits delete the oldest finished runs": {
			spec: func() *batchv1alpha1.SafeJobSpec {
				s := parentSpec("* * * * *", "")
				s.SuccessfulRunsHistoryLimit, s.FailedRunsHistoryLimit = ptr.To[int32](1), ptr.To[int32](0)
				return s
			}(),
			now: tick(3).Add(30 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(1), tick(1)),
				scheduled(0, name(2), tick(2), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(2), tick(2)),
				scheduled(0, name(3), tick(3), 0), runOutcome(0, batchv1alpha1.EntryFailed, name(3), tick(3))),
			runs: []*batchv1alpha1.SafeJob{child(name(1), tick(1), batchv1alpha1.ConditionComplete),
				child(name(2), tick(2), batchv1alpha1.ConditionComplete), child(name(3), tick(3), batchv1alpha1.ConditionFailed)},
			wantRelease: []string{name(1), name(2), name(3)},
			wantDelete:  []string{name(1), name(3)},
		},
		"vanished run waits for the live read after its fence": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(10 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0)),
			seen:   []string{name(1)},
		},
		"vanished run is Lost once read absent, never created again": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(30 * time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0)),
			seen:       []string{name(1)},
			gone:       []string{name(1)},
			wantAppend: []string{"Lost:" + name(1)},
			wantReason: ReasonVanished,
			wantUID:    "uid-" + name(1),
		},
		"run created here and not in the cache yet is not created again": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(2 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0)),
			issued: []string{name(1)},
		},
		"run past its create window is not created (restarted process, run removed by hand)": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(ledger.DefaultFence.CreateWindow),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0)),
		},
		"run never seen and read absent after its fence: Lost NotCreated": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(ledger.DefaultFence.LostGrace()),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0)),
			gone:       []string{name(1)},
			wantAppend: []string{"Lost:" + name(1)},
			wantReason: ReasonNotCreated,
		},
		"run read absent whose UID status recorded: Lost Vanished": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(ledger.DefaultFence.LostGrace()),
			status: func() batchv1alpha1.SafeJobStatus {
				st := ledgerOf(scheduled(0, name(1), tick(1), 0))
				st.ActiveRuns = []corev1.ObjectReference{{Name: name(1), UID: "uid-1"}}
				return st
			}(),
			gone:       []string{name(1)},
			wantAppend: []string{"Lost:" + name(1)},
			wantReason: ReasonVanished,
			wantUID:    "uid-1",
		},
		"name held by a stranger: Lost NameTaken, and the schedule goes on": {
			spec: parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent), now: tick(1).Add(ledger.DefaultFence.LostGrace()),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0)),
			taken:      []string{name(1)},
			wantAppend: []string{"Lost:" + name(1)},
			wantReason: ledger.ReasonNameTaken,
			wantCond:   map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonScheduled},
		},
		"closed run keeps its finalizer while a create of it may still land": {
			spec: parentSpec("* * * * *", ""), now: tick(1).Add(ledger.DefaultFence.LostGrace() - time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(1), tick(1))),
			runs:   []*batchv1alpha1.SafeJob{child(name(1), tick(1), batchv1alpha1.ConditionComplete)},
		},
		"Forbid: open run blocks the next tick": {
			spec: parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent), now: tick(2).Add(time.Second),
			status:   ledgerOf(scheduled(0, name(1), tick(1), 0)),
			runs:     []*batchv1alpha1.SafeJob{child(name(1), tick(1), "")},
			wantCond: map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonWaitingForRun},
		},
		"Forbid: a pod of a finished, deleted run still terminating blocks": {
			spec: parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent), now: tick(2).Add(time.Second),
			status:   ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntryEvicted, name(1), tick(1))),
			busy:     map[string]int{name(1): 1},
			wantCond: map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonWaitingForRun},
		},
		"Forbid: finished run does not block": {
			spec: parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent), now: tick(2).Add(time.Second),
			status:      ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(1), tick(1))),
			runs:        []*batchv1alpha1.SafeJob{child(name(1), tick(1), batchv1alpha1.ConditionComplete)},
			wantAppend:  []string{"Scheduled:" + name(2)},
			wantRelease: []string{name(1)},
		},
		"Replace: the old run is deleted, the new time waits uncommitted": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0)),
			runs:       []*batchv1alpha1.SafeJob{child(name(1), tick(1), "")},
			wantDelete: []string{name(1)},
			wantCond:   map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonWaitingForRun},
		},
		"Replace: the deleted old run is recorded replaced while the new time is due": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(2 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0)),
			runs: []*batchv1alpha1.SafeJob{func() *batchv1alpha1.SafeJob {
				c := child(name(1), tick(1), "")
				c.DeletionTimestamp = ptr.To(metav1.NewTime(tick(2)))
				return c
			}()},
			busy:       map[string]int{name(1): 1},
			wantAppend: []string{"Evicted:" + name(1)},
			wantCond:   map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonWaitingForRun},
		},
		"Replace: the old run's pods gone, the due time is committed": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(9 * time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0), runOutcome(0, batchv1alpha1.EntryEvicted, name(1), tick(1))),
			wantAppend: []string{"Scheduled:" + name(2)},
		},
		"Replace: old run deleted, new one waits": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(2 * time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0), scheduled(0, name(2), tick(2), 0)),
			runs:       []*batchv1alpha1.SafeJob{child(name(1), tick(1), "")},
			wantDelete: []string{name(1)},
			wantCond:   map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonWaitingForRun},
		},
		"Replace: deleting old run recorded as replaced, pods still there": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(3 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0), scheduled(0, name(2), tick(2), 0)),
			runs: []*batchv1alpha1.SafeJob{func() *batchv1alpha1.SafeJob {
				c := child(name(1), tick(1), "")
				c.DeletionTimestamp = ptr.To(metav1.NewTime(tick(2)))
				return c
			}()},
			busy:       map[string]int{name(1): 2},
			wantAppend: []string{"Evicted:" + name(1)},
		},
		"Replace: old pods gone, new run created": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(9 * time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0), scheduled(0, name(2), tick(2), 0),
				runOutcome(0, batchv1alpha1.EntryEvicted, name(1), tick(1))),
			wantCreate: []string{name(2)},
		},
		"schedule edited: no surprise run for a time before the edit": {
			spec: parentSpec("*/15 * * * *", ""), now: r0.Add(20 * time.Minute),
			status: func() batchv1alpha1.SafeJobStatus {
				st := ledgerOf(scheduled(0, name(0), r0, 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(0), r0))
				st.ObservedSchedule = &batchv1alpha1.ObservedSchedule{Schedule: "0 * * * *", Since: metav1.NewTime(r0)}
				return st
			}(),
			wantCond: map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonScheduled},
		},
		"schedule edited: the first time after the edit runs": {
			spec: parentSpec("*/15 * * * *", ""), now: r0.Add(30*time.Minute + time.Second),
			status: func() batchv1alpha1.SafeJobStatus {
				st := ledgerOf(scheduled(0, name(0), r0, 0), runOutcome(0, batchv1alpha1.EntrySucceeded, name(0), r0))
				st.ObservedSchedule = &batchv1alpha1.ObservedSchedule{Schedule: "*/15 * * * *", Since: metav1.NewTime(r0.Add(20 * time.Minute))}
				return st
			}(),
			wantAppend: []string{"Scheduled:" + name(30)},
		},
		"suspended: nothing scheduled": {
			spec: func() *batchv1alpha1.SafeJobSpec {
				s := parentSpec("* * * * *", "")
				s.Suspend = ptr.To(true)
				return s
			}(),
			now:      tick(5),
			wantCond: map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonScheduleSuspended},
		},
		"asked by hand: committed while suspended and while a run is active under Forbid": {
			spec: func() *batchv1alpha1.SafeJobSpec {
				s := parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent)
				s.Suspend = ptr.To(true)
				return s
			}(),
			now:     tick(1).Add(20 * time.Second),
			status:  ledgerOf(scheduled(0, name(1), tick(1), 0)),
			runs:    []*batchv1alpha1.SafeJob{child(name(1), tick(1), "")},
			request: "p-by-hand", wantAppend: []string{"Scheduled:p-by-hand"}, wantReason: batchv1alpha1.ReasonManual,
		},
		"asked by hand: created once observed, whatever runs under Forbid": {
			spec: parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent), now: tick(1).Add(21 * time.Second),
			status:     ledgerOf(scheduled(0, name(1), tick(1), 0), byHand(0, "p-by-hand", tick(1).Add(20*time.Second))),
			runs:       []*batchv1alpha1.SafeJob{child(name(1), tick(1), "")},
			busy:       map[string]int{name(1): 1},
			request:    "p-by-hand",
			wantCreate: []string{"p-by-hand"},
		},
		"a run started by hand does not hold back a scheduled time under Forbid": {
			spec: parentSpec("* * * * *", batchv1alpha1.ForbidConcurrent), now: tick(1).Add(time.Second),
			status:     ledgerOf(byHand(0, "p-by-hand", tick(0).Add(20*time.Second))),
			runs:       []*batchv1alpha1.SafeJob{manualChild("p-by-hand", tick(0).Add(20*time.Second), "")},
			busy:       map[string]int{"p-by-hand": 1},
			request:    "p-by-hand",
			wantAppend: []string{"Scheduled:" + name(1)},
		},
		"Replace never replaces a run started by hand": {
			spec: parentSpec("* * * * *", batchv1alpha1.ReplaceConcurrent), now: tick(2).Add(time.Second),
			status: ledgerOf(scheduled(0, name(1), tick(1), 0), byHand(0, "p-by-hand", tick(1).Add(20*time.Second))),
			runs: []*batchv1alpha1.SafeJob{child(name(1), tick(1), ""),
				manualChild("p-by-hand", tick(1).Add(20*time.Second), "")},
			busy:       map[string]int{name(1): 1, "p-by-hand": 1},
			request:    "p-by-hand",
			wantDelete: []string{name(1)},
			wantCond:   map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonWaitingForRun},
		},
		"asked by hand and recorded: nothing more": {
			spec: parentSpec("* * * * *", ""), now: tick(0).Add(50 * time.Second),
			status: ledgerOf(byHand(0, "p-by-hand", tick(0).Add(20*time.Second)),
				runOutcome(0, batchv1alpha1.EntrySucceeded, "p-by-hand", tick(0).Add(20*time.Second))),
			request: "p-by-hand",
		},
		"asked by hand and folded into the checkpoint: nothing more": {
			spec: parentSpec("* * * * *", ""), now: tick(0).Add(50 * time.Second),
			status: batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 2, Checkpoint: &batchv1alpha1.LedgerCheckpoint{
				Seq: 2, Runs: 1, LastManualRun: "p-by-hand", LastManualTime: ptr.To(metav1.NewTime(tick(0).Add(20 * time.Second)))}}},
			request: "p-by-hand",
		},
		"asked by hand under the name of an earlier run: not started": {
			spec: parentSpec("* * * * *", ""), now: tick(0).Add(50 * time.Second),
			runs:    []*batchv1alpha1.SafeJob{manualChild("p-by-hand", tick(0).Add(-time.Hour), batchv1alpha1.ConditionComplete)},
			request: "p-by-hand", wantWaits: true,
		},
		"asked by hand under a scheduled run's form of name: not started": {
			spec: parentSpec("* * * * *", ""), now: tick(0).Add(50 * time.Second),
			request: name(1), wantWaits: true,
		},
		"asked by hand under a name that is not a DNS label: not started": {
			spec: parentSpec("* * * * *", ""), now: tick(0).Add(50 * time.Second),
			request: "By.Hand", wantWaits: true,
		},
		"invalid schedule: said in a condition": {
			spec: parentSpec("61 * * * *", ""), now: tick(5),
			wantCond: map[string]string{batchv1alpha1.ConditionScheduling: batchv1alpha1.ReasonInvalidSchedule},
		},
	}
	for desc, tc := range cases {
		t.Run(desc, func(t *testing.T) { tc.run(t) })
	}
}

// input builds the Input of a case.
func (tc *decideCase) input() *Input {
	in := &Input{Name: "p", Created: r0, Spec: tc.spec, Status: &tc.status, Runs: map[string]*batchv1alpha1.SafeJob{},
		Busy: tc.busy, Seen: map[string]k8stypes.UID{}, Now: tc.now}
	for _, r := range tc.runs {
		in.Runs[r.Name] = r
	}
	for _, s := range tc.seen {
		in.Seen[s] = k8stypes.UID("uid-" + s)
	}
	in.Issued, in.Gone, in.Taken = set(tc.issued), set(tc.gone), set(tc.taken)
	in.RunRequest = tc.request
	return in
}

func set(names []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// run decides the case and checks the plan.
func (tc *decideCase) run(t *testing.T) {
	t.Helper()
	in := tc.input()
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	var creates []string
	for _, c := range plan.Create {
		creates = append(creates, c.Name)
	}
	check := func(what string, got, want []string) {
		if !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("appended", entryKinds(plan.Append), tc.wantAppend)
	check("created", creates, tc.wantCreate)
	check("deleted", plan.Delete, tc.wantDelete)
	check("released", plan.Release, tc.wantRelease)
	tc.checkLast(t, plan)
	if (plan.RequestWaits != "") != tc.wantWaits {
		t.Errorf("request waits %q, want waiting %v", plan.RequestWaits, tc.wantWaits)
	}
	if got := plan.Status.MissedRuns; got != tc.wantMissed {
		t.Errorf("missedRuns = %d, want %d", got, tc.wantMissed)
	}
	for typ, reason := range tc.wantCond {
		c := findCond(plan.Status.Conditions, typ)
		if c == nil || c.Reason != reason {
			t.Errorf("condition %s = %+v, want reason %s", typ, c, reason)
		}
	}
	if _, err := Replay(&plan.Status.Ledger); err != nil {
		t.Errorf("planned ledger does not replay: %v", err)
	}
}

// checkLast checks the reason and UID of the last appended entry.
func (tc *decideCase) checkLast(t *testing.T, plan *Plan) {
	t.Helper()
	if n := len(plan.Append); tc.wantReason != "" && (n == 0 || plan.Append[n-1].Reason != tc.wantReason) {
		t.Errorf("appended %+v, want the last with reason %s", plan.Append, tc.wantReason)
	}
	if n := len(plan.Append); tc.wantUID != "" && (n == 0 || plan.Append[n-1].UID != tc.wantUID) {
		t.Errorf("appended %+v, want the last with uid %s", plan.Append, tc.wantUID)
	}
}

// TestRunsCap: a parent under Allow whose runs never finish keeps at most
// MaxOpen open; a due time at the cap does not start, is reported and
// is counted missed when a run starts again, once a run has finished. At
// the cap, with long names, the status stays small.
func TestRunsCap(t *testing.T) {
	c := newCapParent()
	plan := c.decide(t, c.tick(MaxOpen+1).Add(time.Second))
	checkCapped(t, plan, "1 scheduled time(s)")
	c.status = plan.Status
	raw, err := json.Marshal(c.status)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.status.ActiveRuns) != MaxOpen || len(raw) > 48<<10 {
		t.Errorf("status at the cap: %d active runs, %d bytes (want %d, at most 48 KiB)", len(c.status.ActiveRuns), len(raw), MaxOpen)
	}
	t.Logf("status at the cap of %d open runs: %d bytes", MaxOpen, len(raw))
	checkCapped(t, c.decide(t, c.tick(MaxOpen+2).Add(time.Second)), "2 scheduled time(s)")

	// The first run finishes: the due time starts, the one before counted missed.
	c.runs[c.name(1)] = child(c.name(1), c.tick(1), batchv1alpha1.ConditionComplete)
	plan = c.decide(t, c.tick(MaxOpen+2).Add(2*time.Second))
	want := []string{"Succeeded:" + c.name(1), "Scheduled:" + c.name(MaxOpen+2)}
	if got := entryKinds(plan.Append); !slices.Equal(got, want) || plan.Append[1].Missed != 1 || plan.Status.MissedRuns != 1 {
		t.Errorf("after a run finished: appended %+v (missedRuns %d), want %v with 1 missed", plan.Append, plan.Status.MissedRuns, want)
	}
	if cond := findCond(plan.Status.Conditions, batchv1alpha1.ConditionScheduling); cond == nil ||
		cond.Reason != batchv1alpha1.ReasonScheduled {
		t.Errorf("Scheduling = %+v, want Scheduled", cond)
	}
}

// capParent is a per-minute parent under Allow, with a long name and
// namespace, whose MaxOpen runs all run.
type capParent struct {
	parent string
	name   func(k int) string
	tick   func(k int) time.Time
	runs   map[string]*batchv1alpha1.SafeJob
	status batchv1alpha1.SafeJobStatus
}

const capNamespace = "team-reports-production"

func newCapParent() *capParent {
	parent := strings.Repeat("nightly-report-", 3) + "x" // 46 characters
	c := &capParent{parent: parent, runs: map[string]*batchv1alpha1.SafeJob{}}
	c.tick = func(k int) time.Time { return r0.Add(time.Duration(k) * time.Minute) }
	c.name = func(k int) string { return Name(parent, c.tick(k)) }
	for k := 1; k <= MaxOpen; k++ {
		c.status.Ledger = ledger.Append(&c.status.Ledger, []batchv1alpha1.LedgerEntry{scheduled(0, c.name(k), c.tick(k), 0)})
		run := child(c.name(k), c.tick(k), "")
		run.Namespace, run.UID = capNamespace, k8stypes.UID(fmt.Sprintf("6f1c2d3e-4a5b-4c6d-8e9f-%012d", k))
		c.runs[c.name(k)] = run
	}
	return c
}

func (c *capParent) decide(t *testing.T, now time.Time) *Plan {
	t.Helper()
	in := &Input{Name: c.parent, Namespace: capNamespace,
		Created: r0, Spec: parentSpec("* * * * *", ""), Status: &c.status, Runs: c.runs, Now: now}
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// checkCapped checks a plan made at the cap: nothing starts, and the due
// times are reported as missed.
func checkCapped(t *testing.T, plan *Plan, missed string) {
	t.Helper()
	if len(plan.Append) != 0 || len(plan.Create) != 0 {
		t.Errorf("at the cap: appended %v, created %v", entryKinds(plan.Append), plan.Create)
	}
	if c := findCond(plan.Status.Conditions, batchv1alpha1.ConditionScheduling); c == nil ||
		c.Reason != batchv1alpha1.ReasonTooManyActiveRuns || c.Status != metav1.ConditionFalse {
		t.Errorf("Scheduling = %+v, want False TooManyActiveRuns", c)
	}
	if c := findCond(plan.Status.Conditions, batchv1alpha1.ConditionMissedRuns); c == nil ||
		c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, missed) {
		t.Errorf("MissedRuns = %+v, want True saying %q", c, missed)
	}
}

// TestRunUIDs: the pods that hold back Forbid and Replace are those of the
// runs whose UID the parent knows, from the cluster, its own memory or its
// status, and of no one else.
func TestRunUIDs(t *testing.T) {
	l := ledger.Append(&batchv1alpha1.Ledger{}, []batchv1alpha1.LedgerEntry{
		scheduled(0, "p-1", r0, 0), func() batchv1alpha1.LedgerEntry {
			e := runOutcome(0, batchv1alpha1.EntryEvicted, "p-1", r0)
			e.UID = "uid-gone" // deleted, its pods still terminating
			return e
		}(),
		scheduled(0, "p-2", r0.Add(time.Minute), 0), runOutcome(0, batchv1alpha1.EntryLost, "p-2", r0.Add(time.Minute)),
		scheduled(0, "p-3", r0.Add(2*time.Minute), 0), scheduled(0, "p-4", r0.Add(3*time.Minute), 0),
		scheduled(0, "p-5", r0.Add(4*time.Minute), 0),
	})
	in := &Input{
		Status: &batchv1alpha1.SafeJobStatus{Ledger: l, ActiveRuns: []corev1.ObjectReference{
			{Name: "p-3", UID: "uid-recorded"}, {Name: "p-4"}}},
		Runs: map[string]*batchv1alpha1.SafeJob{"p-5": {ObjectMeta: metav1.ObjectMeta{Name: "p-5", UID: "uid-live"}}},
		Seen: map[string]k8stypes.UID{"p-4": "uid-seen"},
	}
	want := map[k8stypes.UID]string{"uid-gone": "p-1", "uid-recorded": "p-3", "uid-seen": "p-4", "uid-live": "p-5"}
	if got := UIDs(in); !maps.Equal(got, want) {
		t.Errorf("UIDs = %v, want %v", got, want)
	}
}

func findCond(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// TestRunsWorldModel drives Decide through a random world: stale caches
// of the parent and of its runs, crashes that drop a plan's actions,
// restarts that drop the process's memory, creates that land late (before
// their deadline) or never, runs removed by hand with their finalizer
// stripped, runs that finish, TTL and history deletions, and all three
// concurrency policies. After every step: no scheduled time has two runs, no
// run is created before its commit is observed (I8), every create lands
// before its fence deadline and never for a run whose outcome is recorded,
// no run deleted once its outcome was recorded is created again, and a run
// removed by hand only by a create started within its window; a stranger's
// object under a run's name is never deleted, released or counted. After a calm phase no run
// is left open that does not exist.
func TestRunsWorldModel(t *testing.T) {
	outcomes := map[string]int{}
	capped := 0
	for seed := range uint64(200) {
		policies := []batchv1alpha1.ConcurrencyPolicy{batchv1alpha1.AllowConcurrent, batchv1alpha1.ForbidConcurrent, batchv1alpha1.ReplaceConcurrent}
		policy := policies[seed%3]
		t.Run(fmt.Sprintf("seed%d-%s", seed, policy), func(t *testing.T) {
			w := runWorld(t, rand.New(rand.NewPCG(seed, 7)), policy, seed%9 == 0)
			for k, n := range w.outcomes {
				outcomes[k] += n
			}
			if w.maxOpen == MaxOpen {
				capped++
			}
		})
	}
	// The faults are exercised: runs removed by hand, and runs whose create
	// never landed, are recorded Lost.
	for _, reason := range []string{ReasonVanished, ReasonNotCreated, ledger.ReasonNameTaken} {
		if outcomes["Lost/"+reason] == 0 {
			t.Errorf("no run recorded Lost (%s) in any seed: %v", reason, outcomes)
		}
	}
	if capped == 0 {
		t.Error("no seed reached MaxOpen open runs")
	}
	t.Logf("outcomes: %v; %d seeds reached the cap of open runs", outcomes, capped)
}

type worldRun struct {
	obj      *batchv1alpha1.SafeJob
	finishAt time.Time
	// visibleAt is when the controller's cache shows the run.
	visibleAt time.Time
}

// lateCreate is a create request sent and not yet answered.
type lateCreate struct {
	ref    Ref
	landAt time.Time
}

// runsWorld is the API server and the cluster as far as runs go.
type runsWorld struct {
	t       *testing.T
	rng     *rand.Rand
	spec    *batchv1alpha1.SafeJobSpec
	status  batchv1alpha1.SafeJobStatus // the API server's copy
	cached  batchv1alpha1.SafeJobStatus // the controller's cache, maybe stale
	runs    map[string]*worldRun        // children in the API server
	created map[string]int              // creates that succeeded, by name
	deleted map[string]bool             // children deleted once their finalizer was released
	byHand  map[string]bool             // children removed by hand, finalizer stripped
	late    []lateCreate                // creates in flight
	// strangers hold names the parent will use; they never go, and the
	// parent must never touch or count them.
	strangers map[string]bool
	// pods holds, by the UID of the run that controls them, until when the
	// pods of each run ever created run or terminate: they outlive their
	// run when it is deleted. A stranger's pod (UID "stranger") runs forever.
	pods map[k8stypes.UID]time.Time
	// seen and issued are the process's memory (tracker), lost on restart.
	seen   map[string]k8stypes.UID
	issued map[string]bool
	calm   bool
	now    time.Time
	// stuck runs never finish (under Allow they pile up to the cap).
	stuck bool
	// maxOpen is the most open runs any written ledger had.
	maxOpen int
	// outcomes counts the committed outcomes by type/reason.
	outcomes map[string]int
	// request is the parent's RunNowAnnotation; requested counts how many
	// times each name was asked for, recorded how many times each manual
	// run was committed.
	request             string
	requested, recorded map[string]int
}

func runWorld(t *testing.T, rng *rand.Rand, policy batchv1alpha1.ConcurrencyPolicy, stuck bool) *runsWorld {
	w := &runsWorld{t: t, rng: rng, spec: parentSpec("@every 5s", policy), runs: map[string]*worldRun{},
		created: map[string]int{}, deleted: map[string]bool{}, byHand: map[string]bool{}, seen: map[string]k8stypes.UID{},
		issued: map[string]bool{}, outcomes: map[string]int{}, strangers: map[string]bool{},
		pods: map[k8stypes.UID]time.Time{"stranger": r0.Add(100 * time.Hour)}, stuck: stuck, now: r0,
		requested: map[string]int{}, recorded: map[string]int{}}
	w.spec.SuccessfulRunsHistoryLimit, w.spec.FailedRunsHistoryLimit = ptr.To[int32](int32(rng.IntN(2))), ptr.To[int32](0)
	for step := range 500 {
		w.calm = step >= 400 // no faults: every open run must settle
		w.step(step)
	}
	w.checkEnd()
	return w
}

// step advances the clock, lets the world move and the faults strike, and
// runs one reconcile of the parent.
func (w *runsWorld) step(step int) {
	w.now = w.now.Add(time.Duration(w.rng.IntN(3000)) * time.Millisecond)
	w.land(step)
	w.finishRuns()
	if w.calm || w.rng.IntN(3) > 0 { // the cache catches up most of the time
		w.cached = *w.status.DeepCopy()
	}
	if !w.calm {
		w.strike()
		w.askByHand(step)
	}
	plan := w.decide(step)
	if !w.calm && w.rng.IntN(8) == 0 {
		return // crashed before acting: nothing of the plan happens
	}
	w.act(step, plan)
}

// strike brings the faults: restarts, runs removed by hand, strangers
// taking names.
func (w *runsWorld) strike() {
	if w.rng.IntN(40) == 0 { // restart: the process's memory is gone
		w.seen, w.issued = map[string]k8stypes.UID{}, map[string]bool{}
	}
	if w.rng.IntN(25) == 0 {
		w.removeByHand()
	}
	if w.rng.IntN(30) == 0 {
		w.takeName()
	}
}

// askByHand asks for a run by hand now and then, as kubectl safejob run
// does: a new name once the API server's ledger records the previous one.
func (w *runsWorld) askByHand(step int) {
	st, err := Replay(&w.status.Ledger)
	if err != nil {
		w.t.Fatal(err)
	}
	if w.rng.IntN(12) > 0 || (w.request != "" && !st.HasRun(w.request)) {
		return
	}
	w.request = fmt.Sprintf("p-by-hand-%c%c", 'a'+rune(step/26%26), 'a'+rune(step%26))
	w.requested[w.request]++
}

// checkEnd checks the world after the calm phase.
func (w *runsWorld) checkEnd() {
	t := w.t
	for name, n := range w.created {
		if n > 1 {
			t.Errorf("run %s created %d times", name, n)
		}
	}
	final, err := Replay(&w.status.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if final.Runs+int64(len(final.Open)) == 0 {
		t.Error("no run was ever scheduled")
	}
	// Every run asked for by hand was committed exactly once; the last
	// may wait while the schedule has the most runs open it keeps.
	if plan, err := Decide(w.gather(-1)); err == nil && plan.RequestWaits != "" && w.recorded[w.request] == 0 {
		delete(w.requested, w.request)
	}
	if !maps.Equal(w.requested, w.recorded) {
		t.Errorf("runs asked for by hand %v, committed %v", w.requested, w.recorded)
	}
	// No time is dropped silently: every time up to the last one scheduled
	// is a run or counted missed.
	manual := int64(len(w.recorded))
	if times := int64(final.LastScheduled.Sub(r0) / (5 * time.Second)); final.Runs+int64(len(final.Open))+final.Missed-manual != times {
		t.Errorf("%d scheduled times up to %s, but %d runs, %d open, %d missed and %d by hand", times, final.LastScheduled,
			final.Runs, len(final.Open), final.Missed, manual)
	}
	settle := ledger.DefaultFence.LostGrace() + 10*time.Second
	for name, r := range final.Open {
		if w.runs[name] == nil && w.now.Sub(r.Time) > settle {
			t.Errorf("run %s committed at %s is still open at %s and does not exist", name, r.Time, w.now)
		}
	}
}

// land carries out the creates whose time has come, and checks the fence:
// a create lands before its deadline, never for a run whose outcome is
// recorded, never for a run that was deleted.
func (w *runsWorld) land(step int) {
	var left []lateCreate
	for _, c := range w.late {
		if c.landAt.After(w.now) {
			left = append(left, c)
			continue
		}
		w.create(step, c.ref, c.landAt)
	}
	w.late = left
}

// create makes the run in the API server at time at, unless its name exists.
func (w *runsWorld) create(step int, ref Ref, at time.Time) {
	if w.runs[ref.Name] != nil || w.strangers[ref.Name] {
		return // AlreadyExists
	}
	w.checkCreate(step, ref, at)
	w.created[ref.Name]++
	obj := child(ref.Name, ref.ScheduledTime, "")
	if ref.Manual {
		obj.Annotations[batchv1alpha1.InstantiateAnnotation] = batchv1alpha1.InstantiateManual
	}
	obj.UID = k8stypes.UID(fmt.Sprintf("uid-%s-%d", obj.Name, w.created[ref.Name]))
	d := time.Duration(1+w.rng.IntN(15)) * time.Second
	if w.stuck {
		d = 100 * time.Hour
	}
	w.runs[ref.Name] = &worldRun{obj: obj, finishAt: at.Add(d),
		visibleAt: at.Add(time.Duration(w.rng.IntN(2000)) * time.Millisecond)}
	w.pods[obj.UID] = at.Add(d + time.Second)
}

// checkCreate checks the fence on a create that lands at time at.
func (w *runsWorld) checkCreate(step int, ref Ref, at time.Time) {
	if !at.Before(ledger.DefaultFence.CreateDeadline(ref.Time)) {
		w.t.Fatalf("step %d: run %s created at %s, past its deadline %s", step, ref.Name, at, ledger.DefaultFence.CreateDeadline(ref.Time))
	}
	if w.deleted[ref.Name] {
		w.t.Fatalf("step %d: run %s created again after it was deleted", step, ref.Name)
	}
	if w.byHand[ref.Name] {
		// Only a create started within the run's window, by a process that
		// does not know it created the run (restarted, or its create timed
		// out), lands again; the deadline check above holds it to the fence.
		w.created[ref.Name]--
	}
	if st, _ := Replay(&w.status.Ledger); st != nil {
		// A run removed by hand may be created again by a create started
		// within its window; never once it was recorded Lost.
		out := w.outcome(ref.Name)
		if _, closed := st.Closed[ref.Name]; closed && out.Reason != ReasonReplaced &&
			(!w.byHand[ref.Name] || out.Type == batchv1alpha1.EntryLost) {
			w.t.Fatalf("step %d: run %s created after its outcome %+v was recorded", step, ref.Name, w.outcome(ref.Name))
		}
	}
}

func (w *runsWorld) outcome(name string) batchv1alpha1.LedgerEntry {
	for _, e := range w.status.Ledger.Entries {
		if e.Run == name && e.Type != batchv1alpha1.EntryScheduled {
			return e
		}
	}
	return batchv1alpha1.LedgerEntry{}
}

// takeName makes a stranger's object under the name of one of the next
// scheduled times, before the parent commits it.
func (w *runsWorld) takeName() {
	st, err := Replay(&w.status.Ledger)
	if err != nil {
		w.t.Fatal(err)
	}
	last := st.LastScheduled
	if last.IsZero() {
		last = r0
	}
	if name := Name("p", last.Add(time.Duration(1+w.rng.IntN(3))*5*time.Second)); w.runs[name] == nil {
		w.strangers[name] = true
	}
}

// removeByHand strips a run's finalizer and deletes it, as a user can.
func (w *runsWorld) removeByHand() {
	for _, name := range ledger.SortedKeys(w.runs) {
		if w.rng.IntN(3) == 0 {
			delete(w.runs, name)
			w.byHand[name] = true
			return
		}
	}
}

// finishRuns ends the runs whose time has come.
func (w *runsWorld) finishRuns() {
	for _, name := range ledger.SortedKeys(w.runs) { // in order: the draws follow the seed alone
		r := w.runs[name]
		if r.obj.DeletionTimestamp != nil || ledger.Finished(r.obj.Status.Conditions) != nil || w.now.Before(r.finishAt) {
			continue
		}
		cond := batchv1alpha1.ConditionComplete
		if w.rng.IntN(4) == 0 {
			cond = batchv1alpha1.ConditionFailed
		}
		r.obj.Status.Conditions = []metav1.Condition{{Type: cond, Status: metav1.ConditionTrue, Reason: "R"}}
		r.obj.Status.CompletionTime = ptr.To(metav1.NewTime(w.now))
	}
}

// decide gathers as the controller does (the cached runs, the live read of
// the unobserved ones), runs Decide, and checks I8 and no re-run on the
// plan's creates.
func (w *runsWorld) decide(step int) *Plan {
	in := w.gather(step)
	plan, err := Decide(in)
	if err != nil {
		w.t.Fatalf("step %d: %v", step, err)
	}
	w.checkPlan(step, plan)
	return plan
}

// gather builds the input as the controller does: the cached runs, the
// process's memory, a live read of the unobserved runs past their fence,
// and the pods of the runs whose UID the parent knows.
func (w *runsWorld) gather(step int) *Input {
	obsRuns := map[string]*batchv1alpha1.SafeJob{}
	for name, r := range w.runs {
		if w.now.Before(r.visibleAt) {
			continue // not in the cache yet
		}
		obsRuns[name] = r.obj.DeepCopy()
		w.seen[name] = r.obj.UID
	}
	in := &Input{Name: "p", Created: r0, Spec: w.spec, Status: &w.cached, Runs: obsRuns, Busy: map[string]int{},
		Seen: maps.Clone(w.seen), Issued: maps.Clone(w.issued), Gone: map[string]bool{}, RunRequest: w.request, Now: w.now}
	unobserved, _, err := Unobserved(in)
	if err != nil {
		w.t.Fatalf("step %d: %v", step, err)
	}
	in.Taken = map[string]bool{}
	for _, ref := range unobserved {
		switch r := w.runs[ref.Name]; {
		case r != nil:
			obsRuns[ref.Name] = r.obj.DeepCopy()
		case w.strangers[ref.Name]:
			in.Taken[ref.Name] = true
		default:
			in.Gone[ref.Name] = true
		}
	}
	for uid, name := range UIDs(in) {
		if w.now.Before(w.pods[uid]) {
			in.Busy[name]++
		}
	}
	return in
}

// checkPlan checks I8, the fence and ownership on a plan.
func (w *runsWorld) checkPlan(step int, plan *Plan) {
	observed, err := Replay(&w.cached.Ledger)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, name := range slices.Concat(plan.Delete, plan.Release) {
		if w.strangers[name] {
			w.t.Fatalf("step %d: the plan deletes or releases %s, a stranger's object", step, name)
		}
	}
	for _, c := range plan.Create {
		if _, ok := observed.Open[c.Name]; !ok {
			w.t.Fatalf("step %d: I8: run %s created without an observed, open Scheduled entry", step, c.Name)
		}
		if slices.ContainsFunc(plan.Append, func(e batchv1alpha1.LedgerEntry) bool {
			return e.Run == c.Name && e.Type != batchv1alpha1.EntryScheduled
		}) {
			w.t.Fatalf("step %d: run %s created by the plan that records its outcome", step, c.Name)
		}
		if !ledger.DefaultFence.MayCreate(c.Time, w.now) {
			w.t.Fatalf("step %d: run %s planned for creation past its window", step, c.Name)
		}
	}
}

// act carries the plan out, lets TTL delete some finished runs, and writes
// status if the plan was made on the current version. A create is answered
// at once, or lands later before its deadline, or never.
func (w *runsWorld) act(step int, plan *Plan) {
	w.issue(step, plan.Create)
	for _, name := range plan.Release {
		if r := w.runs[name]; r != nil {
			r.obj.Finalizers = nil
		}
	}
	w.deleteRuns(plan.Delete)
	for _, name := range ledger.SortedKeys(w.runs) {
		r := w.runs[name]
		if ledger.Finished(r.obj.Status.Conditions) != nil && w.rng.IntN(5) == 0 && r.obj.DeletionTimestamp == nil {
			r.obj.DeletionTimestamp = ptr.To(metav1.NewTime(w.now)) // TTL
		}
	}
	for name, r := range w.runs {
		if r.obj.DeletionTimestamp != nil && len(r.obj.Finalizers) == 0 {
			delete(w.runs, name)
			w.deleted[name] = true
		}
	}
	w.commit(step, plan)
}

// issue sends the creates of a plan: each is answered at once, or lands
// later before its deadline, or never.
func (w *runsWorld) issue(step int, creates []Ref) {
	for _, c := range creates {
		switch k := w.rng.IntN(10); {
		case w.calm || k < 7:
			w.create(step, c, w.now)
			w.issued[c.Name] = true
		case k < 9:
			deadline := ledger.DefaultFence.CreateDeadline(c.Time)
			w.late = append(w.late, lateCreate{ref: c, landAt: w.now.Add(time.Duration(w.rng.Int64N(int64(deadline.Sub(w.now)))))})
		default: // lost on the way
		}
	}
}

// deleteRuns marks runs deleted; their pods terminate within a few seconds.
func (w *runsWorld) deleteRuns(names []string) {
	for _, name := range names {
		if r := w.runs[name]; r != nil && r.obj.DeletionTimestamp == nil {
			r.obj.DeletionTimestamp = ptr.To(metav1.NewTime(w.now))
			if till := w.now.Add(time.Duration(w.rng.IntN(4000)) * time.Millisecond); till.Before(w.pods[r.obj.UID]) {
				w.pods[r.obj.UID] = till
			}
		}
	}
}

// commit writes the plan's status if it was made on the current version.
func (w *runsWorld) commit(step int, plan *Plan) {
	if w.cached.Ledger.Seq != w.status.Ledger.Seq || len(plan.Append) == 0 {
		return // a conflict, or nothing to commit
	}
	prev, _ := Replay(&w.status.Ledger)
	w.status = *plan.Status.DeepCopy()
	next, err := Replay(&w.status.Ledger)
	if err != nil {
		w.t.Fatalf("step %d: written ledger invalid: %v", step, err)
	}
	if err := next.Covers(prev); err != nil {
		w.t.Fatalf("step %d: I4: %v", step, err)
	}
	if len(next.Open) > MaxOpen {
		w.t.Fatalf("step %d: %d runs open, more than %d", step, len(next.Open), MaxOpen)
	}
	w.maxOpen = max(w.maxOpen, len(next.Open))
	for _, e := range plan.Append {
		if e.Type != batchv1alpha1.EntryScheduled {
			w.outcomes[string(e.Type)+"/"+e.Reason]++
		} else if e.Reason == batchv1alpha1.ReasonManual {
			w.recorded[e.Run]++
		}
		if w.strangers[e.Run] && e.Type != batchv1alpha1.EntryScheduled && e.Reason != ledger.ReasonNameTaken && e.Reason != ReasonReplaced {
			w.t.Fatalf("step %d: run %s, whose name a stranger holds, recorded %s (%s)", step, e.Run, e.Type, e.Reason)
		}
	}
}

// TestUnreadRunPastGraceAskedBackAtOnce checks that an open run the parent
// does not observe asks for a decision at its grace, when a live read may
// close it, and at once when its grace has passed without that read: the
// grace can pass while the decision's live reads of other runs take long,
// and the decision, timed after them, must not leave the run open until the
// next scheduled time.
func TestUnreadRunPastGraceAskedBackAtOnce(t *testing.T) {
	grace := ledger.DefaultFence.LostGrace()
	tick := func(k int) time.Time { return r0.Add(time.Duration(k) * time.Minute) }
	name := func(k int) string { return Name("p", tick(k)) }
	open := batchv1alpha1.SafeJobStatus{Ledger: ledger.Append(&batchv1alpha1.Ledger{}, []batchv1alpha1.LedgerEntry{scheduled(0, name(1), tick(1), 0)})}
	for desc, tc := range map[string]struct {
		now  time.Time
		gone []string
		want time.Duration
	}{
		"before its grace":              {now: tick(1).Add(grace - 10*time.Second), want: 10 * time.Second},
		"grace passed, not read":        {now: tick(1).Add(grace + time.Second), want: time.Millisecond},
		"grace passed, read and absent": {now: tick(1).Add(grace + time.Second), gone: []string{name(1)}, want: tick(2).Sub(tick(1).Add(grace + time.Second))},
	} {
		t.Run(desc, func(t *testing.T) {
			c := decideCase{spec: parentSpec("* * * * *", ""), now: tc.now, status: *open.DeepCopy(), gone: tc.gone}
			plan, err := Decide(c.input())
			if err != nil {
				t.Fatal(err)
			}
			if plan.RequeueAfter != tc.want {
				t.Errorf("RequeueAfter = %s, want %s", plan.RequeueAfter, tc.want)
			}
		})
	}
}
