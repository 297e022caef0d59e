package controller

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// releaseItem is one pod whose ledger finalizer is to be released: the pod,
// and the SafeJob (name and UID) whose ledger records its outcome.
type releaseItem struct {
	pod types.NamespacedName
	job types.NamespacedName
	uid types.UID
}

// releaseQueue holds the finalizer releases issued in the background until
// one of a fixed set of workers takes them, in the order they were asked
// for, each pod at most once while it waits. A release waiting here costs a
// few words, where a goroutine of its own cost a stack: under a load the API
// server cannot keep up with, thousands wait, and the operator's memory must
// not grow with them.
type releaseQueue struct {
	mu      sync.Mutex
	waiting map[types.NamespacedName]bool
	order   []releaseItem
	// wake holds a token when items may be waiting.
	wake chan struct{}
	// gauge, if set, shows how many wait.
	gauge prometheus.Gauge
	// retry queues a SafeJob again when one of its releases failed
	// (releaseOne).
	retry chan event.GenericEvent
}

// newReleaseQueue returns an empty queue; gauge (may be nil) shows its length.
func newReleaseQueue(gauge prometheus.Gauge) *releaseQueue {
	return &releaseQueue{waiting: map[types.NamespacedName]bool{}, wake: make(chan struct{}, 1), gauge: gauge,
		retry: make(chan event.GenericEvent)}
}

// measured updates the gauge; the lock must be held.
func (q *releaseQueue) measured() {
	if q.gauge != nil {
		q.gauge.Set(float64(len(q.order)))
	}
}

// add queues the releases of pods not already waiting.
func (q *releaseQueue) add(items ...releaseItem) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range items {
		if q.waiting[it.pod] {
			continue
		}
		q.waiting[it.pod] = true
		q.order = append(q.order, it)
	}
	q.measured()
	q.poke()
}

// poke leaves a token for an idle worker, unless one is already there.
func (q *releaseQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest waiting release, waiting for one; false once ctx ends.
func (q *releaseQueue) next(ctx context.Context) (releaseItem, bool) {
	for {
		if it, ok := q.take(); ok {
			return it, true
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return releaseItem{}, false
		}
	}
}

// take takes the oldest waiting release without waiting; false when none
// waits.
func (q *releaseQueue) take() (releaseItem, bool) {
	q.mu.Lock()
	if len(q.order) == 0 {
		q.mu.Unlock()
		return releaseItem{}, false
	}
	it := q.order[0]
	q.order[0] = releaseItem{}
	q.order = q.order[1:]
	delete(q.waiting, it.pod)
	q.measured()
	more := len(q.order) > 0
	q.mu.Unlock()
	if more { // pass the token on to the next idle worker
		q.poke()
	}
	return it, true
}

// run serves the queue on workers goroutines until ctx ends, then drains
// it: the releases in flight go on, and those still waiting are issued,
// for up to drain after ctx ended. A stopping process (a rollout, an
// uninstall) would otherwise leave pods holding the ledger finalizer with
// no operator to release them. release is given the context its request
// runs under, which outlives ctx by drain, and stopping, closed once ctx
// ends. What is left when the drain ends is planned again from the ledger
// by the next process.
func (q *releaseQueue) run(ctx context.Context, workers int, drain time.Duration,
	release func(work context.Context, stopping <-chan struct{}, it releaseItem)) {
	work, cancel := outlive(ctx, drain)
	defer cancel()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				it, ok := q.next(ctx)
				if !ok {
					break
				}
				release(work, ctx.Done(), it)
			}
			for work.Err() == nil {
				it, ok := q.take()
				if !ok {
					return
				}
				release(work, ctx.Done(), it)
			}
		})
	}
	wg.Wait()
}

// outlivesKey marks a context outlive made: one that outlives its parent
// already is not stretched again, so that grace bounds a drain.
type outlivesKey struct{}

// outlive returns a context that carries ctx's values but ends grace after
// ctx ends (with ctx if grace is 0 or less, or if ctx is one outlive made),
// or when cancel is called.
func outlive(ctx context.Context, grace time.Duration) (_ context.Context, cancel context.CancelFunc) {
	if grace <= 0 || ctx.Value(outlivesKey{}) != nil {
		return context.WithCancel(ctx)
	}
	work, end := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), outlivesKey{}, true))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, end) })
	return work, func() { stop(); end() }
}
