package recorder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeAPI stores events as the API server would: by name, created once,
// patched only while they exist. fail, when set, answers a call first.
type fakeAPI struct {
	mu     sync.Mutex
	events map[string]*eventsv1.Event
	calls  []string
	fail   func(verb string, ev *eventsv1.Event) error
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{events: map[string]*eventsv1.Event{}}
}

func (f *fakeAPI) call(verb string, ev *eventsv1.Event) error {
	f.calls = append(f.calls, verb+" "+ev.Reason)
	if f.fail != nil {
		return f.fail(verb, ev)
	}
	return nil
}

func (f *fakeAPI) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("create", ev); err != nil {
		return nil, err
	}
	if _, ok := f.events[ev.Name]; ok {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, ev.Name)
	}
	f.events[ev.Name] = ev.DeepCopy()
	return ev, nil
}

func (f *fakeAPI) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return nil, errors.New("the recorder does not update events")
}

func (f *fakeAPI) Patch(_ context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("patch", ev); err != nil {
		return nil, err
	}
	cur, ok := f.events[ev.Name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, ev.Name)
	}
	raw, err := json.Marshal(cur)
	if err != nil {
		return nil, err
	}
	if raw, err = strategicpatch.StrategicMergePatch(raw, data, eventsv1.Event{}); err != nil {
		return nil, err
	}
	next := &eventsv1.Event{}
	if err := json.Unmarshal(raw, next); err != nil {
		return nil, err
	}
	f.events[ev.Name] = next
	return next, nil
}

// stored is every stored event, in a form two recorders' events compare
// in: without the names and times each makes up, and with a series shown
// as one (count=N says how many times it was written as seen).
func (f *fakeAPI) stored() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, ev := range f.events {
		related := ""
		if ev.Related != nil {
			related = ev.Related.Kind + "/" + ev.Related.Name
		}
		shape := "single"
		if ev.Series != nil {
			shape = fmt.Sprintf("series count=%d", ev.Series.Count)
		}
		out = append(out, fmt.Sprintf("%s %s/%s rv=%s %s %s action=%s by=%s related=%s note=%q %s",
			ev.Namespace, ev.Regarding.Kind, ev.Regarding.Name, ev.Regarding.ResourceVersion, ev.Type, ev.Reason,
			ev.Action, ev.ReportingController, related, ev.Note, shape))
	}
	slices.Sort(out)
	return out
}

func (f *fakeAPI) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func pod(name, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv}}
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
}

// record sends the same events to any recorder.
func record(rec events.EventRecorder) {
	a := pod("a", "1")
	rec.Eventf(a, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod: %s", "a-0")
	// Repeats: the first makes a series of two, the others are counted.
	for range 3 {
		rec.Eventf(a, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod: %s", "a-0")
	}
	// The same reason about another version of the object: not a repeat.
	rec.Eventf(pod("a", "2"), nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod: %s", "a-1")
	rec.Eventf(a, configMap("w"), corev1.EventTypeWarning, "Queued", "Queue", "waits in %s", "q")
	rec.Eventf(pod("b", "7"), nil, corev1.EventTypeNormal, "Completed", "Finish", "done")
	// Refused by both: not a type events may have.
	rec.Eventf(pod("c", "1"), nil, "Bogus", "Nothing", "Finish", "never written")
}

// waitStored waits until api holds want events, one of them a series.
func waitStored(t *testing.T, who string, api *fakeAPI, want int) []string {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			got = api.stored()
			return len(got) == want && strings.Contains(strings.Join(got, "\n"), " series "), nil
		})
	if err != nil {
		t.Fatalf("%s stored events %q, want %d of them, one a series", who, got, want)
	}
	return got
}

// seriesCounts drops the series' counts: client-go's broadcaster writes
// a series of two at its first repeat, and every series it holds when its
// first refresh runs, which it starts at once but which may run after the
// repeats; the recorder's counts are checked exactly below and elsewhere.
func seriesCounts(stored []string) []string {
	out := make([]string, len(stored))
	for i, e := range stored {
		if at := strings.Index(e, " count="); at >= 0 {
			e = e[:at]
		}
		out[i] = e
	}
	return out
}

// TestSameEventsAsClientGo sends the same events through client-go's
// events broadcaster and through the recorder: the API server is left
// with the same events.
func TestSameEventsAsClientGo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	theirs := newFakeAPI()
	b := events.NewBroadcaster(theirs)
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	record(b.NewRecorder(clientgoscheme.Scheme, "ctl"))

	ours := newFakeAPI()
	rec := New(clientgoscheme.Scheme, ours, Options{Controller: "ctl"}, testr.New(t))
	go func() { _ = rec.Start(ctx) }()
	record(rec)

	want := seriesCounts(waitStored(t, "client-go's broadcaster", theirs, 4))
	stored := waitStored(t, "the recorder", ours, 4)
	if got := seriesCounts(stored); !slices.Equal(got, want) {
		t.Errorf("the recorder stored\n%s\nclient-go's broadcaster stored\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !slices.ContainsFunc(stored, func(e string) bool { return strings.HasSuffix(e, "series count=2") }) {
		t.Errorf("the recorder stored %q, want the repeats written as a series of two", stored)
	}
}

// started runs a recorder until the test ends, on a fake clock unless
// opts names one.
func started(t *testing.T, api *fakeAPI, opts Options) (*Recorder, *clocktesting.FakeClock) {
	t.Helper()
	var clk *clocktesting.FakeClock
	if opts.Clock == nil {
		clk = clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		opts.Clock = clk
	}
	opts.Controller = "ctl"
	rec := New(clientgoscheme.Scheme, api, opts, testr.New(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = rec.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if clk != nil {
		// The sweeps run on the clock's ticker: wait for it.
		waitFor(t, clk.HasWaiters, "the sweep's ticker")
	}
	return rec, clk
}

// waitCount waits until the one event about pod a is a series of count.
func waitCount(t *testing.T, api *fakeAPI, count int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			for _, s := range api.stored() {
				if strings.Contains(s, "/a ") && strings.HasSuffix(s, fmt.Sprintf("series count=%d", count)) {
					return true, nil
				}
			}
			return false, nil
		})
	if err != nil {
		t.Fatalf("no event about a with count %d: %q (calls %q)", count, api.stored(), api.callList())
	}
}

// sweepAt moves the clock on by d in sweep periods, so that every sweep
// in between runs.
func sweepAt(clk *clocktesting.FakeClock, d time.Duration) {
	for step := time.Duration(0); step < d; step += sweepEvery {
		clk.Step(sweepEvery)
	}
}

// TestSeriesEndsWithItsCount: repeats past the second are written once
// the series stops repeating, and the event is then forgotten.
func TestSeriesEndsWithItsCount(t *testing.T) {
	api := newFakeAPI()
	rec, clk := started(t, api, Options{})
	a := pod("a", "1")
	for range 5 {
		rec.Eventf(a, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod")
	}
	waitCount(t, api, 2)
	if n := rec.cached(); n != 1 {
		t.Fatalf("%d events kept, want the one", n)
	}
	sweepAt(clk, seriesEnd-sweepEvery)
	if n := rec.cached(); n != 1 {
		t.Fatalf("%d events kept before the series ended, want 1", n)
	}
	sweepAt(clk, 2*sweepEvery)
	waitCount(t, api, 5)
	if n := rec.cached(); n != 0 {
		t.Errorf("%d events kept after the series ended, want none", n)
	}
	// A repeat after the end starts anew, as client-go's does.
	rec.Eventf(a, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod")
	waitFor(t, func() bool { return len(api.stored()) == 2 }, "a second event about a")
}

// TestSeriesRefreshed: a series that keeps repeating is written every
// seriesRefresh.
func TestSeriesRefreshed(t *testing.T) {
	api := newFakeAPI()
	rec, clk := started(t, api, Options{})
	a := pod("a", "1")
	rec.Eventf(a, nil, corev1.EventTypeNormal, "Repeats", "Act", "again")
	n := int32(1)
	for step := time.Duration(0); step < seriesRefresh; step += sweepEvery {
		rec.Eventf(a, nil, corev1.EventTypeNormal, "Repeats", "Act", "again")
		n++
		clk.Step(sweepEvery)
	}
	waitCount(t, api, n)
}

// TestCacheBounded: however many distinct events, the recorder keeps at
// most CacheSize, writes every one, and a series pushed out of the cache
// has its last count written.
func TestCacheBounded(t *testing.T) {
	api := newFakeAPI()
	rec, _ := started(t, api, Options{CacheSize: 100, QueueLength: 2000})
	a := pod("a", "1")
	for range 3 {
		rec.Eventf(a, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod")
	}
	for i := range 1000 {
		rec.Eventf(pod(fmt.Sprintf("p%d", i), "1"), nil, corev1.EventTypeNormal, "Completed", "Finish", "done")
	}
	if n := rec.cached(); n != 100 {
		t.Errorf("%d events kept, want 100", n)
	}
	waitCount(t, api, 3)
	waitFor(t, func() bool { return len(api.stored()) == 1001 }, "1,001 events stored")
}

// TestQueueFullDrops: with no writer running and the queue full, events
// are dropped and counted, recording never blocks, and the log says so at
// most once a minute, with how many.
func TestQueueFullDrops(t *testing.T) {
	dropped := 0
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := New(clientgoscheme.Scheme, newFakeAPI(), Options{Controller: "ctl", QueueLength: 10, Writers: 1,
		Dropped: func() { dropped++ }, Clock: clk}, log)
	for i := range 15 {
		rec.Eventf(pod(fmt.Sprintf("p%d", i), "1"), nil, corev1.EventTypeNormal, "Completed", "Finish", "done")
	}
	if dropped != 5 {
		t.Errorf("%d events dropped, want 5", dropped)
	}
	clk.Step(time.Minute)
	rec.Eventf(pod("late", "1"), nil, corev1.EventTypeNormal, "Completed", "Finish", "done")
	want := []string{`"dropped"=1 "queueLength"=10`, `"dropped"=5 "queueLength"=10`}
	if len(lines) != len(want) {
		t.Fatalf("log lines %q, want two", lines)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("log line %q, want it to say %s", lines[i], w)
		}
	}
}

// TestRetries: a write that cannot reach the API server is tried again;
// one it refuses is not.
func TestRetries(t *testing.T) {
	api := newFakeAPI()
	failures := map[string]int{"Unreachable": 2}
	api.fail = func(verb string, ev *eventsv1.Event) error {
		if ev.Reason == "Refused" {
			return apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, ev.Name, nil)
		}
		if failures[ev.Reason] > 0 {
			failures[ev.Reason]--
			return errors.New("connection refused")
		}
		return nil
	}
	rec, _ := started(t, api, Options{RetryAfter: time.Millisecond, Clock: clock.RealClock{}})
	rec.Eventf(pod("a", "1"), nil, corev1.EventTypeWarning, "Refused", "Act", "bad")
	rec.Eventf(pod("b", "1"), nil, corev1.EventTypeNormal, "Unreachable", "Act", "later")
	waitFor(t, func() bool { return len(api.stored()) == 1 }, "the event about b stored")
	calls := api.callList()
	if got := countOf(calls, "create Refused"); got != 1 {
		t.Errorf("the refused event was tried %d times, want once (calls %q)", got, calls)
	}
	if got := countOf(calls, "create Unreachable"); got != 3 {
		t.Errorf("the event the API server could not take was tried %d times, want 3 (calls %q)", got, calls)
	}
}

func countOf(calls []string, c string) int {
	n := 0
	for _, x := range calls {
		if x == c {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// BenchmarkRetained reports the heap each recorder still holds after it
// has written b.N events about distinct objects (as one-pod SafeJobs make
// them): client-go's broadcaster keeps a copy of each for six minutes or
// more, the recorder at most its cache.
func BenchmarkRetained(b *testing.B) {
	for _, kind := range []string{"client-go", "bounded"} {
		b.Run(kind, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			api := &countingSink{}
			var rec events.EventRecorder
			switch kind {
			case "client-go":
				br := events.NewBroadcaster(api)
				if err := br.StartRecordingToSinkWithContext(ctx); err != nil {
					b.Fatal(err)
				}
				defer br.Shutdown()
				rec = br.NewRecorder(clientgoscheme.Scheme, "ctl")
			default:
				// One writer, so that the queue takes all b.N at once.
				r := New(clientgoscheme.Scheme, api, Options{Controller: "ctl", QueueLength: b.N + 1, Writers: 1}, logr.Discard())
				go func() { _ = r.Start(ctx) }()
				rec = r
			}
			objs := make([]k8sruntime.Object, b.N)
			for i := range objs {
				objs[i] = pod(fmt.Sprintf("safejob-%06d", i), "12345")
			}
			before := heapInUse()
			b.ResetTimer()
			// In rounds the writers keep up with: client-go's broadcaster,
			// like the recorder, drops what its queue cannot hold.
			const round = 500
			for start := 0; start < b.N; start += round {
				end := min(start+round, b.N)
				for i := start; i < end; i++ {
					rec.Eventf(objs[i], nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod: %s-0", "safejob")
				}
				deadline := time.Now().Add(time.Minute)
				for api.n() < end {
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d events written after a minute", api.n(), end)
					}
					time.Sleep(time.Millisecond)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(heapInUse()-before)/float64(b.N), "retained-B/event")
			runtime.KeepAlive(objs)
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// countingSink takes every write and keeps nothing.
type countingSink struct {
	mu      sync.Mutex
	written int
}

func (s *countingSink) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

func (s *countingSink) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written++
	return ev, nil
}

func (s *countingSink) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return ev, nil
}

func (s *countingSink) Patch(_ context.Context, ev *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	return ev, nil
}
