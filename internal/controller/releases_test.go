package controller

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// len reports how many releases wait for a worker.
func (q *releaseQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

func podItem(name string) releaseItem {
	return releaseItem{pod: types.NamespacedName{Namespace: "ns", Name: name}, job: types.NamespacedName{Namespace: "ns", Name: "j"}, uid: "u"}
}

func TestReleaseQueueOrderAndOnce(t *testing.T) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	q := newReleaseQueue(gauge)
	q.add(podItem("a"), podItem("b"))
	q.add(podItem("a"), podItem("c")) // a is already waiting
	if q.len() != 3 {
		t.Fatalf("waiting = %d, want 3 (a pod asked for twice waits once)", q.len())
	}
	if got := testutil.ToFloat64(gauge); got != 3 {
		t.Errorf("the gauge shows %v waiting, want 3", got)
	}
	ctx := context.Background()
	for _, want := range []string{"a", "b"} {
		if it, ok := q.next(ctx); !ok || it.pod.Name != want {
			t.Fatalf("next = %v %v, want %s (the order asked)", it.pod.Name, ok, want)
		}
	}
	q.add(podItem("a")) // taken already: asked again, it waits again
	for _, want := range []string{"c", "a"} {
		if it, ok := q.next(ctx); !ok || it.pod.Name != want {
			t.Fatalf("next = %v %v, want %s", it.pod.Name, ok, want)
		}
	}
	if got := testutil.ToFloat64(gauge); got != 0 {
		t.Errorf("the gauge shows %v waiting once all were taken, want 0", got)
	}
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if it, ok := q.next(stopped); ok {
		t.Fatalf("next on an empty queue after its context ended = %v, want nothing", it)
	}
}

// TestReleaseQueueBoundedWorkers checks that however many releases wait,
// no more than the workers are issued at once, every one is issued once,
// and waiting costs no goroutine.
func TestReleaseQueueBoundedWorkers(t *testing.T) {
	const workers, n = 3, 2000
	q := newReleaseQueue(nil)
	ctx, cancel := context.WithCancel(context.Background())
	gate := make(chan struct{})
	var inFlight, most atomic.Int32
	var mu sync.Mutex
	issued := map[string]int{}
	done := make(chan struct{})
	go func() {
		q.run(ctx, workers, 0, func(_ context.Context, _ <-chan struct{}, it releaseItem) {
			now := inFlight.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			<-gate
			mu.Lock()
			issued[it.pod.Name]++
			mu.Unlock()
			inFlight.Add(-1)
		})
		close(done)
	}()
	before := runtime.NumGoroutine()
	for i := range n {
		q.add(podItem(fmt.Sprintf("p-%d", i)))
	}
	waitUntil(t, func() bool { return inFlight.Load() == workers })
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Errorf("%d releases waiting took %d goroutines more, want none", n, g-before)
	}
	close(gate)
	waitUntil(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(issued) == n
	})
	if m := most.Load(); m > workers {
		t.Errorf("%d releases issued at once, want at most %d", m, workers)
	}
	mu.Lock()
	for pod, k := range issued {
		if k != 1 {
			t.Errorf("%s released %d times, want once", pod, k)
		}
	}
	mu.Unlock()
	cancel()
	<-done
}

// TestReleasesWaitWithoutGoroutines checks the reconciler's side: releases
// asked for while the workers are busy wait in the queue (counted released
// by the tracker) and start no goroutine each.
func TestReleasesWaitWithoutGoroutines(t *testing.T) {
	r := &SafeJobReconciler{Clock: clock.RealClock{}, tracker: newTracker(), releases: newReleaseQueue(nil)}
	key := types.NamespacedName{Namespace: "ns", Name: "j"}
	before := runtime.NumGoroutine()
	const n = 5000
	for i := range n {
		r.releaseInBackground(key, "u", []string{fmt.Sprintf("j-%d-0", i)})
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Errorf("%d releases asked for took %d goroutines, want none", n, g-before)
	}
	if got := r.releases.len(); got != n {
		t.Errorf("releases waiting = %d, want %d", got, n)
	}
	if got := r.tracker.unreleased(key, "u", []string{"j-0-0", "j-1-0"}, r.Clock.Now()); len(got) != 0 {
		t.Errorf("releases waiting planned again: %v", got)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReleaseQueueDrainsOnStop: when the manager stops, the release in
// flight is not cancelled and the releases still waiting are issued, under
// a context that outlives the manager's by the drain; with no drain they
// are left to the next process. A stopping operator (a rollout, an
// uninstall) would otherwise leave pods holding the ledger finalizer.
func TestReleaseQueueDrainsOnStop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain time.Duration
		want  int // releases issued to the end, of 1 in flight and 20 waiting
	}{
		{"drained", time.Minute, 21},
		{"no drain", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newReleaseQueue(nil)
			ctx, cancel := context.WithCancel(context.Background())
			started, gate := make(chan struct{}, 1), make(chan struct{})
			var finished atomic.Int32
			done := make(chan struct{})
			go func() {
				q.run(ctx, 1, tc.drain, func(work context.Context, stopping <-chan struct{}, _ releaseItem) {
					select {
					case started <- struct{}{}:
					default:
					}
					<-gate
					select {
					case <-stopping:
					default:
						t.Error("stopping not closed when the manager's context ended")
					}
					if work.Err() == nil { // the request would go through
						finished.Add(1)
					}
				})
				close(done)
			}()
			q.add(podItem("in-flight"))
			<-started
			for i := range 20 {
				q.add(podItem(fmt.Sprintf("p-%d", i)))
			}
			cancel()
			close(gate)
			<-done
			if got := int(finished.Load()); got != tc.want {
				t.Errorf("releases that went through after the stop: %d, want %d", got, tc.want)
			}
			if tc.drain > 0 && q.len() != 0 {
				t.Errorf("%d releases left waiting after the drain", q.len())
			}
		})
	}
}

// TestOutliveEndsAfterGrace: the context outlive returns survives ctx's
// end by grace, no more.
func TestOutliveEndsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	work, stop := outlive(ctx, 50*time.Millisecond)
	defer stop()
	cancel()
	if work.Err() != nil {
		t.Fatal("ended with ctx, before its grace")
	}
	select {
	case <-work.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not ended 10s after a grace of 50ms")
	}
	now, stopNow := outlive(ctx, 0)
	defer stopNow()
	waitUntil(t, func() bool { return now.Err() != nil })
}
