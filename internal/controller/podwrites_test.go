package controller

import (
	"context"
	"sync"
	"testing"
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
