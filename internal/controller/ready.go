package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// readyHeld keeps the SafeJobs whose ready-count-only status writes are
// held while the operator is backlogged, each with when its hold falls
// due. A held SafeJob is queued again at ReadyBusyLimit, and sooner by the
// ticker once the backlog has cleared and its hold has fallen due: a busy
// controller looks at each held change twice at most, instead of once per
// ReadyBusyPeriod while the backlog lasts, a reconcile each that only
// renewed the hold and added to the backlog it waited out.
type readyHeld struct {
	mu  sync.Mutex
	due map[types.NamespacedName]time.Time
}

func newReadyHeld() *readyHeld {
	return &readyHeld{due: map[types.NamespacedName]time.Time{}}
}

// hold notes that job's ready-only change is held until due, or for as
// long as the backlog lasts after that.
func (h *readyHeld) hold(job types.NamespacedName, due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.due[job] = due
}

// drop forgets job: its status was written, or it is gone. A nil
// readyHeld keeps nothing.
func (h *readyHeld) drop(job types.NamespacedName) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.due, job)
}

// take forgets and returns the SafeJobs whose holds have fallen due by now.
func (h *readyHeld) take(now time.Time) []types.NamespacedName {
	h.mu.Lock()
	defer h.mu.Unlock()
	var due []types.NamespacedName
	for job, at := range h.due {
		if !now.Before(at) {
			due = append(due, job)
			delete(h.due, job)
		}
	}
	return due
}

// len is how many SafeJobs are held.
func (h *readyHeld) len() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.due)
}

// wakeReadyHeld queues the SafeJobs whose ready-only holds have fallen due,
// once the operator is no longer backlogged.
func (r *SafeJobReconciler) wakeReadyHeld() {
	if r.pacer.readyHeld.len() == 0 || r.pacer.backlogged() || r.queue.enqueue == nil {
		return
	}
	for _, job := range r.pacer.readyHeld.take(r.Clock.Now()) {
		r.queue.add(job)
	}
}

// readyTick is how often held ready-only changes are looked at: at most
// how long one waits past the backlog's end.
const readyTick = time.Second

// setupReadyHeld runs the ticker that wakes held ready-only changes, with
// the controller, under the same leader election.
func (r *SafeJobReconciler) setupReadyHeld(mgr manager.Manager) error {
	r.pacer.readyHeld = newReadyHeld()
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		wait.UntilWithContext(ctx, func(context.Context) { r.wakeReadyHeld() }, readyTick)
		return nil
	})); err != nil {
		return fmt.Errorf("adding the ready-hold ticker: %w", err)
	}
	return nil
}
