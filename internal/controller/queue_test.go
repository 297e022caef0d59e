package controller

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestQueueShutdownReturns runs workers that add and take items as fast as
// they can, shuts the queue down and waits for every worker to see it: the
// race of kubernetes-sigs/controller-runtime#3538, which leaves the bare
// priority queue of v0.23 blocked within a few rounds.
func TestQueueShutdownReturns(t *testing.T) {
	for round := range 30 {
		q := &stoppableQueue{PriorityQueue: priorityqueue.New[reconcile.Request]("test"), done: make(chan struct{})}
		var wg sync.WaitGroup
		for w := range 20 {
			wg.Go(func() {
				for k := 0; ; k++ {
					req := reconcile.Request{NamespacedName: types.NamespacedName{Name: fmt.Sprintf("%d-%d", w, k)}}
					q.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(k % 7)}, req)
					got, _, shutdown := q.GetWithPriority()
					if shutdown {
						return
					}
					q.Done(got)
				}
			})
		}
		time.Sleep(5 * time.Millisecond) // let the workers run before the shutdown
		q.ShutDown()
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: workers still waiting on the queue 10s after its shutdown", round)
		}
	}
}
