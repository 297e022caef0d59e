package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// pacer decides, for throughput alone, when a decided status is written and
// how many writes and launches are in flight. Each of its decisions is one
// of: write now or later (facts held back are decided again, from the
// ledger and the pods, by the reconcile that writes them), launch fewer
// pods now (a later decision launches the rest), or wait for a slot. None
// changes what a write says, and neither the ledger-first rule nor the
// fence reads anything it keeps: a process that loses it (a restart) only
// writes more often. The zero Pacing turns every decision off: each
// decision is written at once and nothing is bounded, as with a nil *pacer
// (unit tests that exercise safety alone).
type pacer struct {
	opts  Pacing
	clock clock.PassiveClock
	queue *workQueue
	// window bounds the launched pods not yet started (LaunchWindow); nil
	// when there is no bound.
	window *launchWindow
	// readyHeld keeps the SafeJobs whose ready-only writes are held while
	// backlogged, for the ticker to queue once the backlog clears; nil:
	// each held change is looked at again when its hold falls due.
	readyHeld *readyHeld
	// podWrites and statusWrites hold the slots of ConcurrentPodWrites and
	// ConcurrentStatusWrites.
	podWrites, statusWrites slots

	mu sync.Mutex
	// writes are the write spacing of each SafeJob, by name.
	writes map[types.NamespacedName]*writePacing
}

func newPacer(opts Pacing, clk clock.PassiveClock, q *workQueue) *pacer {
	return &pacer{opts: opts, clock: clk, queue: q, podWrites: newSlots(opts.ConcurrentPodWrites),
		statusWrites: newSlots(opts.ConcurrentStatusWrites), writes: map[types.NamespacedName]*writePacing{}}
}

// workQueue reaches the controller's work queue, set when the queue is
// built, before any reconcile; both are nil before (and in unit tests
// without a queue).
type workQueue struct {
	// waiting returns how many SafeJobs wait in the queue for a worker.
	waiting func() int
	// enqueue queues a SafeJob.
	enqueue func(types.NamespacedName)
}

// add queues key, when the queue is built.
func (q *workQueue) add(key types.NamespacedName) {
	if q != nil && q.enqueue != nil {
		q.enqueue(key)
	}
}

// backlog is how many SafeJobs wait for a worker; 0 when not known.
func (q *workQueue) backlog() int {
	if q == nil || q.waiting == nil {
		return 0
	}
	return q.waiting()
}

// writePacing spaces a SafeJob's status writes: facts held back join the
// next write.
type writePacing struct {
	uid       types.UID
	lastWrite time.Time
	// readySince is when a ready-count change alone was first held back,
	// and holdStart when its current hold began (readySince, or when the
	// hold was last renewed).
	readySince, holdStart time.Time
}

// spacing returns the write spacing of a SafeJob, afresh for a new UID.
// The lock must be held.
func (p *pacer) spacing(key types.NamespacedName, uid types.UID) *writePacing {
	w := p.writes[key]
	if w == nil || w.uid != uid {
		w = &writePacing{uid: uid}
		p.writes[key] = w
	}
	return w
}

// wrote notes a status write of the SafeJob.
func (p *pacer) wrote(key types.NamespacedName, uid types.UID, now time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spacing(key, uid).wrote(now)
}

// forget drops what is kept of a SafeJob that is gone.
func (p *pacer) forget(key types.NamespacedName) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.writes, key)
	p.mu.Unlock()
	if p.window != nil {
		p.window.gone(key)
	}
	p.readyHeld.drop(key)
}

// countsWritten notes that a write carried the SafeJob's pod counters:
// a ready-only change held for it is held no more.
func (p *pacer) countsWritten(key types.NamespacedName) {
	if p != nil {
		p.readyHeld.drop(key)
	}
}

// podSlots and statusSlots are the slots that bound pod writes and status
// writes that commit launches; nil slots bound nothing.
func (p *pacer) podSlots() slots {
	if p == nil {
		return nil
	}
	return p.podWrites
}

func (p *pacer) statusSlots() slots {
	if p == nil {
		return nil
	}
	return p.statusWrites
}

func (w *writePacing) wrote(now time.Time) {
	w.lastWrite, w.readySince, w.holdStart = now, time.Time{}, time.Time{}
}

// spacingLeft returns how much of period is left since the last write: 0
// when there was none or period has passed.
func (w *writePacing) spacingLeft(now time.Time, period time.Duration) time.Duration {
	if w.lastWrite.IsZero() {
		return 0
	}
	return max(w.lastWrite.Add(period).Sub(now), 0)
}

// deferReady holds back a ready-only status change for hold from when it
// was first seen. Once that has passed, renew holds it for another hold
// from now, but never past limit from when it was first seen. It returns
// the time left, 0 when the change is due, and the time left to the limit.
func (w *writePacing) deferReady(now time.Time, hold time.Duration, renew bool, limit time.Duration) (left, toLimit time.Duration) {
	if w.readySince.IsZero() {
		w.readySince, w.holdStart = now, now
	}
	end := w.readySince.Add(max(limit, hold))
	if renew && !now.Before(w.holdStart.Add(hold)) && now.Before(end) {
		w.holdStart = now
	}
	due := w.holdStart.Add(hold)
	if end.Before(due) {
		due = end
	}
	left = due.Sub(now)
	if left <= 0 {
		w.readySince, w.holdStart = time.Time{}, time.Time{}
		return 0, 0
	}
	return left, end.Sub(now)
}

// spaceWrites returns how long to hold a status write that appends to the
// ledger of a SafeJob running several pods at once, so that it writes at
// most once per PodBatchPeriod: the outcomes of pods that finish meanwhile
// join the next write instead of costing one each. 0 means write now.
func (p *pacer) spaceWrites(sj *batchv1alpha1.SafeJob, plan *jobs.Plan) time.Duration {
	if p == nil || p.opts.PodBatchPeriod <= 0 || len(plan.Append) == 0 || ptr.Deref(sj.Spec.Parallelism, 1) <= 1 {
		return 0
	}
	return p.spacingLeft(client.ObjectKeyFromObject(sj), sj.UID, p.clock.Now(), p.opts.PodBatchPeriod)
}

// spacingLeft is what is left of period since this process's last status
// write of the SafeJob (writePacing.spacingLeft).
func (p *pacer) spacingLeft(key types.NamespacedName, uid types.UID, now time.Time, period time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spacing(key, uid).spacingLeft(now, period)
}

// deferReady holds back a ready-only status change (writePacing.deferReady).
func (p *pacer) deferReady(key types.NamespacedName, uid types.UID, now time.Time, hold time.Duration, renew bool,
	limit time.Duration) (left, toLimit time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spacing(key, uid).deferReady(now, hold, renew, limit)
}

// deferReadyOnly returns how long to hold a status write whose only change
// is in the pod counters (active, ready, terminating); 0 means write now.
func (p *pacer) deferReadyOnly(sj *batchv1alpha1.SafeJob, plan *jobs.Plan) time.Duration {
	// The pod counters (active, ready, terminating) follow the pods, not
	// the ledger: a change of them alone travels with the next write.
	if p == nil || p.opts.ReadyBatchPeriod <= 0 || len(plan.Append) > 0 || !countsOnly(&sj.Status, &plan.Status) {
		return 0
	}
	hold, busy := p.opts.ReadyBatchPeriod, p.backlogged()
	if p.opts.ReadyBusyPeriod > hold && busy {
		hold = p.opts.ReadyBusyPeriod
	}
	// A change that falls due while the backlog lasts is held again, up to
	// ReadyBusyLimit: the pods of a busy cluster stay ready for longer than
	// one hold before their outcomes come.
	key, now := client.ObjectKeyFromObject(sj), p.clock.Now()
	left, limit := p.deferReady(key, sj.UID, now, hold, busy, p.opts.ReadyBusyLimit)
	if left > 0 && busy && p.readyHeld != nil && limit > left {
		// Looked at again once the backlog has cleared (wakeReadyHeld), or
		// at the limit: not at every renewal while the backlog lasts.
		p.readyHeld.hold(key, now.Add(left))
		return limit
	}
	return left
}

// countsOnly reports whether after differs from before in the pod counters
// (active, ready, terminating) and nothing else.
func countsOnly(before, after *batchv1alpha1.SafeJobStatus) bool {
	if after.Active == before.Active && after.Ready == before.Ready && ptr.Equal(after.Terminating, before.Terminating) {
		return false
	}
	same := *after // shallow: only its counters are set, the rest is only read
	same.Active, same.Ready, same.Terminating = before.Active, before.Ready, before.Terminating
	return equality.Semantic.DeepEqual(same, *before)
}

// backlogged reports whether SafeJobs wait in the queue for a worker, or
// for room in the launch window.
func (p *pacer) backlogged() bool {
	if p == nil {
		return false
	}
	return p.queue.backlog() > 0 || (p.window != nil && p.window.busy())
}
