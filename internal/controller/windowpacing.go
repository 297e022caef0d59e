package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// pacedWrite is what the pacer makes of one decided plan.
type pacedWrite struct {
	// plan is the plan to act on: as decided, or decided again with the
	// room the launch window had.
	plan *jobs.Plan
	// deferred is true when nothing is written now: what was decided
	// joins a later write, which decides it again from the ledger and the
	// pods.
	deferred bool
	// countsOnly is true when what is deferred changes the pod counters
	// alone; the SafeJob's Workload hears of them at once all the same.
	countsOnly bool
	// room is the places reserved in the launch window (settleWindow).
	room int
	// wait is when to look again at a deferred write; 0: the launch window
	// queues the SafeJob once it has room.
	wait time.Duration
}

// pace decides whether the plan decided for sj is written now: spaced from
// the SafeJob's last write (PodBatchPeriod), fitted into the launch window,
// its successes held while new SafeJobs wait for the window (OutcomeHold),
// or its counters alone held for the next write (ReadyBatchPeriod). obs is
// the input plan was decided from, to decide again within the window. An
// error is a ledger that does not read.
func (p *pacer) pace(sj *batchv1alpha1.SafeJob, obs *jobs.Observation, plan *jobs.Plan) (pacedWrite, error) {
	if wait := p.spaceWrites(sj, plan); wait > 0 {
		// Written too recently: the facts decided now join the next write.
		return pacedWrite{plan: plan, deferred: true, wait: wait}, nil
	}
	plan, room, noRoom, err := p.fitWindow(sj, obs, plan)
	if err != nil {
		return pacedWrite{}, err
	}
	if outcomesHeld := p.holdOutcomes(sj, plan); noRoom || outcomesHeld {
		// Waiting for room in the launch window, or its outcomes held while
		// others wait: the window queues it again.
		return pacedWrite{plan: plan, deferred: true, room: room}, nil
	}
	if wait := p.deferReadyOnly(sj, plan); wait > 0 {
		// Nothing but the pod counters changed: they travel with the next
		// change.
		return pacedWrite{plan: plan, deferred: true, countsOnly: true, room: room, wait: wait}, nil
	}
	return pacedWrite{plan: plan, room: room}, nil
}

// heard is the plan the SafeJob's Workload hears of: what is written. The
// pod work acted on observed facts only, and a Workload that heard of
// facts not yet written could give back quota or finish before the ledger
// says so.
func (w pacedWrite) heard(sj *batchv1alpha1.SafeJob) *jobs.Plan {
	if !w.deferred || w.countsOnly {
		return w.plan
	}
	unwritten := *w.plan
	unwritten.Status, unwritten.Stopped = sj.Status, false
	return &unwritten
}

// fitWindow fits the launches of plan into the launch window: it reserves a
// place for each and, when the window holds fewer, decides again with that
// room. It returns the plan to write and the places reserved, which
// settleWindow gives back or keeps once the write is done. held is true
// when the window left the SafeJob no launch and no ledger fact to write:
// the write then waits for room, so that a SafeJob waiting its turn costs
// no write of its own (its start time and counts travel with its first
// launch).
func (p *pacer) fitWindow(sj *batchv1alpha1.SafeJob, obs *jobs.Observation,
	plan *jobs.Plan) (_ *jobs.Plan, room int, held bool, _ error) {
	if p == nil || p.window == nil {
		return plan, 0, false, nil
	}
	key := client.ObjectKeyFromObject(sj)
	want := launches(plan.Append)
	if want == 0 || plan.OpenBefore > 0 {
		// Nothing to launch, or started already (launches open): a SafeJob
		// waits its turn to start, never again while it runs (its waves,
		// and its pods up to parallelism, follow one another), so that the
		// window paces new SafeJobs and never one's own parallelism. Its
		// launches hold places all the same (settleWindow). Room set aside
		// for it goes to the next.
		p.window.forget(key)
		return plan, 0, false, nil
	}
	got := p.window.take(key, want)
	switch {
	case got == want:
		return plan, got, false, nil
	case got == 0 && want == len(plan.Append):
		// Nothing but launches, and no room: deciding again would append
		// nothing.
		return plan, 0, true, nil
	}
	obs.Input().LaunchRoom = ptr.To(int32(got))
	fitted, err := obs.Decide()
	if err != nil {
		p.window.giveBack(got)
		return nil, 0, false, fmt.Errorf("deciding within the launch window: %w", err)
	}
	return fitted, got, len(fitted.Append) == 0, nil
}

// holdOutcomes reports whether to hold a status write that records nothing
// but pod successes, while new SafeJobs wait for the launch window: the
// Job controller's pods run ahead of its status writes the same way. Not
// for a SafeJob whose finish something waits on (a deadline, a queue's
// quota, a schedule's next run).
func (p *pacer) holdOutcomes(sj *batchv1alpha1.SafeJob, plan *jobs.Plan) bool {
	if p == nil || p.window == nil {
		return false
	}
	key := client.ObjectKeyFromObject(sj)
	onlySuccesses := len(plan.Append) > 0 && !slices.ContainsFunc(plan.Append, func(e batchv1alpha1.LedgerEntry) bool {
		return e.Type != batchv1alpha1.EntrySucceeded
	})
	if !onlySuccesses || sj.Spec.ActiveDeadlineSeconds != nil || queueName(sj) != "" || batchv1alpha1.RunParent(sj) != nil {
		// Held before, if at all: the write it waits for is another now.
		p.window.dropOutcomes(key)
		return false
	}
	return p.window.holdOutcomes(key)
}

// settleWindow keeps the places reserved for the launches a status write
// committed, and gives back the rest.
func (p *pacer) settleWindow(sj *batchv1alpha1.SafeJob, room int, written bool, appended []batchv1alpha1.LedgerEntry) {
	if p == nil || p.window == nil {
		return
	}
	if !written {
		p.window.giveBack(room)
		return
	}
	var pods []types.NamespacedName
	for _, e := range appended {
		if e.Type == batchv1alpha1.EntryLaunched {
			pods = append(pods, types.NamespacedName{Namespace: sj.Namespace, Name: e.Pod})
		}
	}
	if room > 0 || len(pods) > 0 {
		p.window.placed(room, pods)
	}
}

// launches counts the Launched entries among appended.
func launches(appended []batchv1alpha1.LedgerEntry) int {
	n := 0
	for _, e := range appended {
		if e.Type == batchv1alpha1.EntryLaunched {
			n++
		}
	}
	return n
}

// windowTick is how often places that time out are freed.
const windowTick = time.Second

// setupWindow builds the launch window and runs its ticker with the
// controller, under the same leader election; m (may be nil) shows it.
func (p *pacer) setupWindow(mgr manager.Manager, m *Metrics) error {
	timeout := p.opts.LaunchWindowTimeout
	if timeout <= 0 {
		timeout = DefaultLaunchWindowTimeout
	}
	p.window = newLaunchWindow(p.opts.LaunchWindow, timeout, p.opts.OutcomeHold, p.clock, p.queue.add)
	p.window.following(p.opts.LaunchWindowMin)
	if m != nil {
		p.window.held, p.window.waitingGauge = m.LaunchWindowHeld, m.LaunchWindowWaiting
		p.window.outcomesGauge, p.window.sizeGauge = m.LaunchWindowHeldOutcomes, m.LaunchWindowSize
		p.window.mu.Lock()
		p.window.measured()
		p.window.mu.Unlock()
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		p.window.run(ctx, windowTick)
		return nil
	})); err != nil {
		return fmt.Errorf("adding the launch window: %w", err)
	}
	return nil
}
