package controller

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// statusWritesUnderTest commits a status write for each of n SafeJobs at
// once through a client whose writes all wait at a gate, and counts them.
type statusWritesUnderTest struct {
	r                            *SafeJobReconciler
	c                            client.Client
	jobs                         []*batchv1alpha1.SafeJob
	inFlight, most, writes, late atomic.Int32
	gate                         chan struct{}
	wg                           sync.WaitGroup
	errs                         chan error
}

func newStatusWritesUnderTest(t *testing.T, n, slots int) *statusWritesUnderTest {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := &statusWritesUnderTest{gate: make(chan struct{})}
	var objs []client.Object
	for i := range n {
		sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sj-%d", i), Namespace: "ns"}}
		s.jobs = append(s.jobs, sj)
		objs = append(objs, sj)
	}
	s.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&batchv1alpha1.SafeJob{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if ctx.Err() != nil { // a cancelled commit, had it been let through
					s.late.Add(1)
					return ctx.Err()
				}
				now := s.inFlight.Add(1)
				defer s.inFlight.Add(-1)
				for {
					m := s.most.Load()
					if now <= m || s.most.CompareAndSwap(m, now) {
						break
					}
				}
				<-s.gate
				s.writes.Add(1)
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	s.r = &SafeJobReconciler{Client: s.c, Clock: clk, Metrics: NewMetrics(), tracker: newTracker(),
		pacer: newPacer(Pacing{ConcurrentStatusWrites: slots}, clk, nil)}
	return s
}

// commitAll starts every SafeJob's commit, appending one entry of type
// entry; finish lets them through.
func (s *statusWritesUnderTest) commitAll(t *testing.T, entry batchv1alpha1.EntryType) {
	t.Helper()
	s.errs = make(chan error, len(s.jobs))
	for _, sj := range s.jobs {
		cur := &batchv1alpha1.SafeJob{}
		if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(sj), cur); err != nil {
			t.Fatal(err)
		}
		s.wg.Go(func() {
			appended := []batchv1alpha1.LedgerEntry{{Type: entry, Pod: cur.Name + "-0-0"}}
			status := *cur.Status.DeepCopy()
			status.Active = 1
			status.Ledger.Entries = appended
			_, err := s.r.commit(context.Background(), cur, status, appended)
			s.errs <- err
		})
	}
}

// finish opens the gate and checks that every commit was written.
func (s *statusWritesUnderTest) finish(t *testing.T) {
	t.Helper()
	close(s.gate)
	s.wg.Wait()
	close(s.errs)
	for err := range s.errs {
		if err != nil {
			t.Errorf("commit: %v", err)
		}
	}
	if got := s.writes.Load(); got != int32(len(s.jobs)) {
		t.Errorf("%d status writes made, want %d", got, len(s.jobs))
	}
}

// waitInFlight waits until n writes are at the gate, or a deadline passes.
func (s *statusWritesUnderTest) waitInFlight(n int32) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); goruntime.Gosched() {
		if s.inFlight.Load() >= n {
			return true
		}
	}
	return false
}

// testCommits SafeJobs commit at once through testSlots slots.
const testCommits, testSlots = 12, 3

// startCommits starts testCommits SafeJobs' commits, each appending an entry of
// type entry, through a reconciler with testSlots status-write slots.
func startCommits(t *testing.T, entry batchv1alpha1.EntryType) *statusWritesUnderTest {
	t.Helper()
	s := newStatusWritesUnderTest(t, testCommits, testSlots)
	s.commitAll(t, entry)
	return s
}

// TestLaunchCommitsBounded checks that no more status writes committing
// launches are in flight at once than ConcurrentStatusWrites, however many
// reconciles commit together; that every one of them is still made; and
// that a commit whose context ends while it waits for a slot writes nothing
// and says so.
func TestLaunchCommitsBounded(t *testing.T) {
	s := startCommits(t, batchv1alpha1.EntryLaunched)
	if !s.waitInFlight(testSlots) {
		t.Fatalf("%d status writes in flight, want every one of the %d slots taken", s.inFlight.Load(), testSlots)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	launch := []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched, Pod: "sj-0-0-1"}}
	if _, err := s.r.commit(cancelled, s.jobs[0].DeepCopy(), batchv1alpha1.SafeJobStatus{Active: 2}, launch); err == nil {
		t.Error("a commit whose context ended while waiting for a slot reported no error")
	}
	if s.late.Load() != 0 {
		t.Error("a commit whose context ended while every slot was held reached the API server")
	}
	s.finish(t)
	if got := s.most.Load(); got > testSlots {
		t.Errorf("%d status writes were in flight at once, want at most %d", got, testSlots)
	}
}

// TestOtherStatusWritesUnbounded checks that the bound applies only to
// writes that commit launches: outcomes are written at the workers' pace.
func TestOtherStatusWritesUnbounded(t *testing.T) {
	s := startCommits(t, batchv1alpha1.EntrySucceeded)
	if !s.waitInFlight(testCommits) {
		t.Errorf("%d outcome writes in flight, want all %d", s.inFlight.Load(), testCommits)
	}
	s.finish(t)
}

// TestLostAnswerForgetsClosedLaunches: a status write that closes a launch
// this process has yet to create lands, but its answer is lost. The next
// pass may decide on the version before it, where the launch is open: the
// process must no longer hold it for creation. A write refused for a
// stale version (which did not land) leaves the memory as it was.
func TestLostAnswerForgetsClosedLaunches(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		answer        error
		lands         bool
		wantUncreated map[string]bool
	}{
		{"answer lost", apierrors.NewTimeoutError("request timed out", 1), true, map[string]bool{"sj-1-0": true}},
		{"connection reset", errors.New("connection reset by peer"), true, map[string]bool{"sj-1-0": true}},
		{"refused: stale version", apierrors.NewConflict(schema.GroupResource{}, "sj", errors.New("modified")), false,
			map[string]bool{"sj-0-0": true, "sj-1-0": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns", UID: "u1"}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(sj).
				WithStatusSubresource(&batchv1alpha1.SafeJob{}).
				WithInterceptorFuncs(interceptor.Funcs{
					SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
						if tc.lands {
							if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
								return err
							}
						}
						return tc.answer
					},
				}).Build()
			r := &SafeJobReconciler{Client: c, Clock: clocktesting.NewFakePassiveClock(time.Now()), Metrics: NewMetrics(),
				tracker: newTracker()}
			key := client.ObjectKeyFromObject(sj)
			launched := []batchv1alpha1.LedgerEntry{
				{Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "sj-0-0"}, {Seq: 2, Type: batchv1alpha1.EntryLaunched, Pod: "sj-1-0"}}
			r.tracker.wrote(key, sj.UID, "1", r.Clock.Now(), launched, nil)
			cur := &batchv1alpha1.SafeJob{}
			if err := c.Get(context.Background(), key, cur); err != nil {
				t.Fatal(err)
			}
			evicted := []batchv1alpha1.LedgerEntry{{Seq: 3, Type: batchv1alpha1.EntryEvicted, Pod: "sj-0-0"}}
			status := *cur.Status.DeepCopy()
			status.Ledger.Seq, status.Ledger.Entries = 3, append(slices.Clone(launched), evicted...)
			if _, err := r.commit(context.Background(), cur, status, evicted); err == nil {
				t.Fatal("commit reported no error")
			}
			if diff := cmp.Diff(tc.wantUncreated, r.tracker.uncreated(key, sj.UID)); diff != "" {
				t.Errorf("launches still to create here (-want,+got):\n%s", diff)
			}
		})
	}
}
