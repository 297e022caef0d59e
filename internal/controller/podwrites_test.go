package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// TestPodWritesShareProcessWideSlots checks that a pod write runs only
// while it holds one of the process-wide slots: with every slot taken
// elsewhere, a reconcile's writes wait, and are skipped with an error if
// the reconcile's context ends first.
func TestPodWritesShareProcessWideSlots(t *testing.T) {
	r := &SafeJobReconciler{podWrites: newSlots(2)}
	for range 2 {
		if !r.podWrites.acquire(context.Background()) {
			t.Fatal("acquire of a free slot failed")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var calls int
	done := make(chan error)
	go func() { done <- r.parallel(ctx, 5, func(int) { calls++ }) }()
	cancel()
	if err := <-done; err == nil {
		t.Error("parallel returned no error after its context ended with writes left")
	}
	if calls != 0 {
		t.Errorf("%d writes ran while every slot was held elsewhere", calls)
	}

	// One freed slot lets all the writes through, one after another.
	r.podWrites.release()
	var mu sync.Mutex
	err := r.parallel(context.Background(), 20, func(int) {
		mu.Lock()
		calls++
		mu.Unlock()
	})
	if err != nil || calls != 20 {
		t.Errorf("with one slot free: err %v, %d of 20 writes ran; want nil, 20", err, calls)
	}
}

func TestUnboundedPodWrites(t *testing.T) {
	r := &SafeJobReconciler{podWrites: newSlots(0)}
	// Every write waits for all the others to start: this returns only if
	// actWorkers writes can be in flight at once.
	var started sync.WaitGroup
	started.Add(actWorkers)
	if err := r.parallel(context.Background(), actWorkers, func(int) {
		started.Done()
		started.Wait()
	}); err != nil {
		t.Fatal(err)
	}
}

// TestActRequeuesForCreatesPastTheirWindow: a launch whose create window
// passed before its create was issued gets no create (the reconciler has no
// client to make one), and act asks for the SafeJob to be decided again when
// the launch's absence may be trusted, since no pod event will ever come for
// it: LostGrace after its commit, or at once if that has passed.
func TestActRequeuesForCreatesPastTheirWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"}}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	grace := ledger.DefaultFence.LostGrace()
	late := jobs.PodRef{Name: "a-0-0", Time: now.Add(-ledger.DefaultFence.CreateWindow - 5*time.Second)}
	lost := jobs.PodRef{Name: "a-1-0", Index: 1, Time: now.Add(-grace - time.Second)}
	for name, tc := range map[string]struct {
		create []jobs.PodRef
		want   time.Duration
	}{
		"window passed":     {create: []jobs.PodRef{late}, want: grace - ledger.DefaultFence.CreateWindow - 5*time.Second},
		"grace passed too":  {create: []jobs.PodRef{late, lost}, want: time.Millisecond},
		"nothing to create": {},
	} {
		t.Run(name, func(t *testing.T) {
			r := &SafeJobReconciler{tracker: newTracker(), Metrics: NewMetrics(), Clock: clocktesting.NewFakePassiveClock(now)}
			var launched []batchv1alpha1.LedgerEntry
			for _, ref := range tc.create {
				launched = append(launched, batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLaunched, Pod: ref.Name})
			}
			r.tracker.wrote(key, sj.UID, "1", now, launched)
			got, err := r.act(context.Background(), sj, &jobs.Plan{Create: tc.create}, nil)
			if err != nil || got != tc.want {
				t.Errorf("act = %s, %v; want %s, nil", got, err, tc.want)
			}
			if left := r.tracker.uncreated(key, sj.UID); len(left) != 0 {
				t.Errorf("launches still to create here: %v", left)
			}
			if n := testutil.ToFloat64(r.Metrics.CreatesExpired); int(n) != len(tc.create) {
				t.Errorf("%v creates counted expired, want %d", n, len(tc.create))
			}
		})
	}
}
