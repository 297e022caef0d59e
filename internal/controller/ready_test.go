package controller

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// readyHolds is a reconciler whose ready-only holds are 1s, 5s while
// backlogged, renewed up to limit, on a fake clock starting at 1000s. step
// moves the clock on by after, sets the backlog, and checks how much longer
// a change of the ready count alone is held.
type readyHolds struct {
	t       *testing.T
	clk     *clocktesting.FakePassiveClock
	r       *SafeJobReconciler
	sj      *batchv1alpha1.SafeJob
	waiting int
}

func newReadyHolds(t *testing.T, limit time.Duration) *readyHolds {
	h := &readyHolds{t: t, clk: clocktesting.NewFakePassiveClock(time.Unix(1000, 0)),
		sj: &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"}}}
	q := &workQueue{waiting: func() int { return h.waiting }}
	h.r = &SafeJobReconciler{Clock: h.clk, tracker: newTracker(), queue: q,
		pacer: newPacer(Pacing{ReadyBatchPeriod: time.Second, ReadyBusyPeriod: 5 * time.Second, ReadyBusyLimit: limit}, h.clk, q)}
	return h
}

var readyOnly = &jobs.Plan{Status: batchv1alpha1.SafeJobStatus{Ready: 2}}

func (h *readyHolds) step(after time.Duration, backlog int, want time.Duration) {
	h.t.Helper()
	h.clk.SetTime(h.clk.Now().Add(after))
	h.waiting = backlog
	if got := h.r.pacer.deferReadyOnly(h.sj, readyOnly); got != want {
		h.t.Errorf("at +%s with %d waiting, a ready-only change is held %s more, want %s",
			h.clk.Now().Sub(time.Unix(1000, 0)), backlog, got, want)
	}
}

// TestReadyOnlyWritesWaitLongerWhileBacklogged checks that a change of the
// ready count alone waits ReadyBatchPeriod while no SafeJob waits for a
// worker, ReadyBusyPeriod while some do, and never holds a ledger fact.
func TestReadyOnlyWritesWaitLongerWhileBacklogged(t *testing.T) {
	h := newReadyHolds(t, 5*time.Second)
	h.step(0, 3, 5*time.Second)             // first seen while backlogged
	h.step(2*time.Second, 3, 3*time.Second) // still backlogged: 5s from first seen
	h.step(0, 0, 0)                         // the backlog cleared, 2s after it was first seen: due
	h.step(0, 0, time.Second)               // a new change on an idle controller: the batch period
	h.step(time.Second, 0, 0)

	// A ledger fact is never held, backlog or not.
	h.waiting = 3
	withFact := &jobs.Plan{Status: batchv1alpha1.SafeJobStatus{Ready: 2},
		Append: []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntrySucceeded, Pod: "a-0-0"}}}
	if got := h.r.pacer.deferReadyOnly(h.sj, withFact); got != 0 {
		t.Errorf("a write with a ledger fact is held %s while backlogged, want 0", got)
	}
	// Without a known queue (nil waiting) only the batch period applies.
	h.r.queue.waiting = nil
	if got := h.r.pacer.deferReadyOnly(h.sj, readyOnly); got != time.Second {
		t.Errorf("with no queue length known the hold is %s, want 1s", got)
	}
}

// TestReadyHoldRenewedWhileBacklogged checks that a ready-only change that
// falls due while SafeJobs still wait for a worker is held again, one
// ReadyBusyPeriod at a time, never past ReadyBusyLimit from when it was
// first held, and is written at the first look after the backlog clears.
func TestReadyHoldRenewedWhileBacklogged(t *testing.T) {
	h := newReadyHolds(t, 12*time.Second)
	h.step(0, 3, 5*time.Second)             // +0: first held while backlogged
	h.step(5*time.Second, 3, 5*time.Second) // +5: due, still backlogged: renewed
	h.step(2*time.Second, 3, 3*time.Second) // +7: within the renewal
	h.step(3*time.Second, 3, 2*time.Second) // +10: renewed again, but only up to the limit (+12)
	h.step(2*time.Second, 3, 0)             // +12: the limit: due however long the queue

	h.step(0, 3, 5*time.Second)             // a new change: held again from now
	h.step(5*time.Second, 3, 5*time.Second) // renewed
	h.step(time.Second, 0, 0)               // the backlog cleared: the batch period since the renewal has passed

	// A change first held on an idle controller, looked at again once a
	// backlog has built up: the busy period from when it was first held,
	// then renewed.
	h.step(0, 0, time.Second)
	h.step(time.Second, 3, 4*time.Second)
	h.step(4*time.Second, 3, 5*time.Second)
	h.step(5*time.Second, 0, 0)

	// With the limit at the busy period nothing is renewed.
	h.r.pacer.opts.ReadyBusyLimit = 5 * time.Second
	h.step(0, 3, 5*time.Second)
	h.step(5*time.Second, 3, 0)
}

// TestReadyHeldWokenWhenBacklogClears checks that, with the ticker's set, a
// ready-only change held while backlogged is queued again at the limit
// rather than at every renewal, and sooner by the ticker once the backlog
// has cleared and its hold has fallen due; a write forgets it.
func TestReadyHeldWokenWhenBacklogClears(t *testing.T) {
	h := newReadyHolds(t, 30*time.Second)
	var queued []string
	h.r.pacer.readyHeld = newReadyHeld()
	h.r.queue.enqueue = func(key types.NamespacedName) { queued = append(queued, key.String()) }
	tick := func(after time.Duration, backlog int, want ...string) {
		t.Helper()
		h.clk.SetTime(h.clk.Now().Add(after))
		h.waiting, queued = backlog, nil
		h.r.wakeReadyHeld()
		if !slices.Equal(queued, want) {
			t.Errorf("at +%s with %d waiting the ticker queued %v, want %v", h.clk.Now().Sub(time.Unix(1000, 0)), backlog, queued, want)
		}
	}

	h.step(0, 3, 30*time.Second) // +0: held while backlogged: queued again at the limit, not at +5
	tick(2*time.Second, 3)       // +2: not due
	tick(4*time.Second, 3)       // +6: due, but still backlogged: no reconcile to renew it
	tick(2*time.Second, 0, "ns/a")
	tick(time.Second, 0) // taken once
	h.step(0, 0, 0)      // the woken reconcile writes it

	h.step(0, 3, 30*time.Second) // +9: held again
	tick(time.Second, 0)         // +10: the backlog cleared before the hold fell due (+14)
	tick(4*time.Second, 0, "ns/a")
	h.step(0, 0, 0)

	h.step(0, 3, 30*time.Second)
	// Written meanwhile, with a ledger fact (writeStatus): nothing is left
	// to wake it for.
	key := client.ObjectKeyFromObject(h.sj)
	h.r.pacer.wrote(key, h.sj.UID, h.clk.Now())
	h.r.pacer.readyHeld.drop(key)
	tick(10*time.Second, 0)

	// Past the limit's renewals nothing is held for the ticker: the
	// reconcile at the limit writes it.
	h.r.pacer.opts.ReadyBusyLimit = 5 * time.Second
	h.step(time.Minute, 3, 5*time.Second)
	if n := h.r.pacer.readyHeld.len(); n != 0 {
		t.Errorf("with the limit at the busy period %d SafeJobs are held for the ticker, want 0", n)
	}
}
