package controller

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
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
}

// newReleaseQueue returns an empty queue; gauge (may be nil) shows its length.
func newReleaseQueue(gauge prometheus.Gauge) *releaseQueue {
	return &releaseQueue{waiting: map[types.NamespacedName]bool{}, wake: make(chan struct{}, 1), gauge: gauge}
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
		q.mu.Lock()
		if len(q.order) > 0 {
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
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return releaseItem{}, false
		}
	}
}

// run serves the queue on workers goroutines until ctx ends; releases still
// waiting then are left to the next process, which plans them again from
// the ledger.
func (q *releaseQueue) run(ctx context.Context, workers int, release func(context.Context, releaseItem)) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				it, ok := q.next(ctx)
				if !ok {
					return
				}
				release(ctx, it)
			}
		})
	}
	wg.Wait()
}
