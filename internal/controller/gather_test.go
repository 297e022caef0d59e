package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
)

// TestDecisionTimedAfterLiveReads checks that a decision that needed live
// reads is timed after them: on a slow API server they take seconds, and a
// launch committed with the time from before them had its create window
// spent by the reads, so that it was never created and went Lost again.
func TestDecisionTimedAfterLiveReads(t *testing.T) {
	start := time.Unix(1000, 0)
	const readTakes = 12 * time.Second
	clk := clocktesting.NewFakePassiveClock(start)
	sj := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"},
		Spec:       batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)},
		Status: batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{
			{Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "a-0-0",
				Time: metav1.NewTime(start.Add(-ledger.DefaultFence.LostGrace() - time.Second))}}}},
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reads := 0
	live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads++
			clk.SetTime(clk.Now().Add(readTakes))
			return c.Get(ctx, key, obj, opts...) // not found: the launch's pod never came
		},
	}).Build()
	cached := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&corev1.Pod{}, controllerUIDIndex, indexActivePodController).Build()
	r := &SafeJobReconciler{Client: cached, APIReader: live, tracker: newTracker(), Metrics: NewMetrics(), Clock: clk}

	obs, _, err := r.gather(context.Background(), sj)
	if err != nil {
		t.Fatal(err)
	}
	in := obs.Input()
	if reads != 1 || !in.Gone["a-0-0"] {
		t.Fatalf("live reads %d, gone %v; want the open launch read once and found gone", reads, in.Gone)
	}
	plan, err := jobs.Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	var relaunch *batchv1alpha1.LedgerEntry
	for i, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched {
			relaunch = &plan.Append[i]
		}
	}
	if relaunch == nil {
		t.Fatalf("appended %v; want the index launched again", plan.Append)
	}
	if want := start.Add(readTakes); !relaunch.Time.Time.Equal(want) {
		t.Errorf("new launch committed at %s; want %s, after the live read", relaunch.Time.Time, want)
	}
}

// TestRunDecisionTimedAfterLiveReads is TestDecisionTimedAfterLiveReads for
// a schedule's runs: the decision that follows live reads of open runs is
// timed after them.
func TestRunDecisionTimedAfterLiveReads(t *testing.T) {
	start := time.Unix(100_000, 0)
	const readTakes = 12 * time.Second
	clk := clocktesting.NewFakePassiveClock(start)
	committed := start.Add(-ledger.DefaultFence.LostGrace() - time.Second)
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cron", UID: "u1"},
		Status: batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{
			{Seq: 1, Type: batchv1alpha1.EntryScheduled, Run: "cron-1666",
				ScheduledTime: ptr.To(metav1.NewTime(committed)), Time: metav1.NewTime(committed)}}}}}
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			clk.SetTime(clk.Now().Add(readTakes))
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	r := &SafeJobReconciler{APIReader: live, Clock: clk}
	in := &runs.Input{Name: sj.Name, Status: &sj.Status, Runs: map[string]*batchv1alpha1.SafeJob{},
		Gone: map[string]bool{}, Taken: map[string]bool{}, Now: start}
	if err := r.confirmRuns(context.Background(), sj, in); err != nil {
		t.Fatal(err)
	}
	if !in.Gone["cron-1666"] {
		t.Fatalf("gone %v; want the open run read and found gone", in.Gone)
	}
	if want := start.Add(readTakes); !in.Now.Equal(want) {
		t.Errorf("runs decided at %s; want %s, after the live read", in.Now, want)
	}
}

// liveReadFixture is a reconciler whose live reads go through get, with
// sj a SafeJob of n open launches committed at the given times.
func liveReadFixture(t *testing.T, clk *clocktesting.FakePassiveClock, committed []time.Time,
	get func(ctx context.Context) error) (*SafeJobReconciler, *batchv1alpha1.SafeJob) {
	t.Helper()
	n := int32(len(committed))
	sj := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"},
		Spec: batchv1alpha1.SafeJobSpec{Completions: ptr.To(n), Parallelism: ptr.To(n),
			CompletionMode: batchv1alpha1.IndexedCompletion},
	}
	for i, at := range committed {
		sj.Status.Ledger.Entries = append(sj.Status.Ledger.Entries, batchv1alpha1.LedgerEntry{
			Seq: int64(i + 1), Type: batchv1alpha1.EntryLaunched, Pod: jobs.PodName("a", int32(i), 0),
			Index: int32(i), Time: metav1.NewTime(at)})
	}
	sj.Status.Ledger.Seq = int64(len(committed))
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := get(ctx); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...) // not found: no pod came
		},
	}).Build()
	cached := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&corev1.Pod{}, controllerUIDIndex, indexActivePodController).Build()
	return &SafeJobReconciler{Client: cached, APIReader: live, tracker: newTracker(), Metrics: NewMetrics(), Clock: clk}, sj
}

// TestLiveReadsOverlap checks that the launches a pass reads live are read
// several at a time: a SafeJob whose pods all vanished while no operator ran
// has as many to read as its parallelism, and one after another its
// decision waits for every round trip. Each read here waits until
// liveReadsAtOnce are in flight, which reads made one by one never reach.
func TestLiveReadsOverlap(t *testing.T) {
	start := time.Unix(1000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	long := start.Add(-ledger.DefaultFence.LostGrace() - time.Second)
	committed := make([]time.Time, 3*liveReadsAtOnce)
	for i := range committed {
		committed[i] = long
	}
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
	)
	r, sj := liveReadFixture(t, clk, committed, func(ctx context.Context) error {
		mu.Lock()
		arrived++
		if arrived == liveReadsAtOnce {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("no other live read in flight beside this one")
		}
	})
	obs, _, err := r.gather(context.Background(), sj)
	if err != nil {
		t.Fatal(err)
	}
	in := obs.Input()
	if len(in.Gone) != len(committed) {
		t.Fatalf("%d launches found gone; want all %d", len(in.Gone), len(committed))
	}
}

// TestNextLiveReadCountedAfterReads checks the wait gather asks for until
// the next launch is due for its live read: counted from when the reads
// ended, so that a launch whose grace passed while others were read is
// asked for at once, not one read's length late.
func TestNextLiveReadCountedAfterReads(t *testing.T) {
	start := time.Unix(1000, 0)
	grace := ledger.DefaultFence.LostGrace()
	const readTakes = 12 * time.Second
	for _, tc := range []struct {
		name     string
		dueAfter time.Duration // from start, of the launch not yet due
		want     time.Duration
	}{
		{"due during the reads", 5 * time.Second, time.Millisecond},
		{"due after the reads", 20 * time.Second, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(start)
			committed := []time.Time{start.Add(-grace - time.Second), start.Add(tc.dueAfter - grace)}
			var reads atomic.Int32
			r, sj := liveReadFixture(t, clk, committed, func(context.Context) error {
				reads.Add(1)
				clk.SetTime(clk.Now().Add(readTakes))
				return nil
			})
			obs, wait, err := r.gather(context.Background(), sj)
			if err != nil {
				t.Fatal(err)
			}
			in := obs.Input()
			if reads.Load() != 1 || len(in.Gone) != 1 {
				t.Fatalf("%d reads, gone %v; want the launch past its grace read alone", reads.Load(), in.Gone)
			}
			if wait != tc.want {
				t.Errorf("next pass in %s; want %s", wait, tc.want)
			}
		})
	}
}
