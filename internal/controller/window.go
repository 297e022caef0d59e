package controller

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// launchWindow bounds the operator's pods that are launched but not yet
// started, across all SafeJobs. A burst of SafeJobs otherwise has thousands
// of pods committed and created at once, each then waiting its turn at the
// kubelets while every one of them costs the API server its writes: the pods
// of the first SafeJobs succeed later than if the later ones had waited
// (docs/performance.md, "A launch window"). The Job controller's few
// workers bound it the same way, less deliberately.
//
// A pod holds its place from the write that commits its launch until it is
// seen running or finished, deleted, or refused by the scheduler, and never
// longer than the timeout: a pod that never starts (an image that cannot be
// pulled, a node that never runs it) frees its place then, so that it slows
// the SafeJobs behind it and never stops them. SafeJobs that found no room
// wait in arrival order; room that frees is set aside for the oldest of them
// and the SafeJob is queued, so a stream of new SafeJobs cannot pass those
// already waiting. Safety never depends on the window: it only delays
// launches, and every launch it lets through is decided and committed as
// any other.
//
// Its size follows how fast pods start (startedAfter): about twice the pods
// that start in a second times the quickest start seen lately, between
// least and size. Pods that start within a second need a few dozen places
// to keep the kubelets busy, and more only queue there, where they slow
// the kubelets' own writes; pods that take seconds to start (image pulls, a
// node being added) get the whole size. It keeps its size while no pod
// starts: a burst after a quiet spell gets the room the last one had.
type launchWindow struct {
	// size is the most places; current the places now (size unless the
	// window follows the starts).
	size, current int
	// least is the fewest places the window follows the starts down to; 0
	// when it stays at size.
	least   int
	timeout time.Duration
	clock   clock.PassiveClock
	// since is when this process's window began, to the second below (as
	// creation times are kept): a pod created before it may be one an
	// earlier process left waiting; one created since was placed by this
	// process's own write, or is not this process's.
	since time.Time
	// wake queues a SafeJob that room was set aside for; called without the
	// lock held.
	wake func(types.NamespacedName)
	// gauges (may be nil) show the places held, the SafeJobs waiting and
	// those whose outcomes are held.
	held, waitingGauge, outcomesGauge prometheus.Gauge
	// sizeGauge (may be nil) shows the size the window follows.
	sizeGauge prometheus.Gauge

	mu sync.Mutex
	// pending holds the pods holding a place, with when they took it.
	pending map[types.NamespacedName]time.Time
	// order lists pending's pods by when they took their place, for expiry;
	// a pod that left pending, or took its place again, is skipped.
	order []place
	// reserved counts the places taken by decisions not written yet.
	reserved int
	// waiters are the SafeJobs that found no room, oldest first, each once.
	waiters []waiter
	waiting map[types.NamespacedName]bool
	// granted is the room set aside for woken SafeJobs until they come back
	// for it, or the timeout passes; grantedSum is its total.
	granted    map[types.NamespacedName]grant
	grantedSum int
	// outcomes are the SafeJobs whose status writes, recording nothing but
	// successes, are held while SafeJobs wait, with when each was held, for
	// at most outcomeHold.
	outcomes    map[types.NamespacedName]time.Time
	outcomeHold time.Duration
	// starts counts, second by second over the last startHorizon, the
	// places given up by pods that started (or that the timeout ended), and
	// the quickest of them.
	starts [startHorizon]startSecond
}

// startHorizon is how many seconds the quickest start is taken over. It
// must outlast a queue of pods waiting to start: once every pod seen
// starting had waited behind others, the quickest would be the queue's own
// wait, and the window would grow with the queue it makes.
const startHorizon = 60

// paceHorizon is how many seconds the pace of starts is taken over (the
// most pods that started in one of them): long enough to see a burst's
// pace between the kubelets' rounds, short enough to follow it.
const paceHorizon = 10

// startGain is how many times the pods that start while the quickest of
// them waits the window holds: room for the pace to double, as the window
// grows while pods start as quickly as before and stops where they begin
// to queue.
const startGain = 2

// slowStart is the average wait for a start from which the window takes the
// wait for the cluster's own (image pulls, nodes being added) and has its
// whole size: a queue at kubelets that start pods within a second, which
// the window keeps short, does not reach it.
const slowStart = 10 * time.Second

// startSecond is one second of places given up: by pods that started (n),
// their waits in all and the quickest, and by pods the timeout ended
// (expired).
type startSecond struct {
	at         int64 // the second, Unix time
	n, expired int
	waited     time.Duration
	quickest   time.Duration
}

// place is a pod's place, taken at a time.
type place struct {
	pod types.NamespacedName
	at  time.Time
}

// grant is room set aside for a SafeJob at a time.
type grant struct {
	n  int
	at time.Time
}

// waiter is a SafeJob waiting for room, and how many launches it wanted.
type waiter struct {
	job  types.NamespacedName
	want int
}

// newLaunchWindow returns a window of size places, each held at most
// timeout, that holds outcomes at most outcomeHold (0: never).
func newLaunchWindow(size int, timeout, outcomeHold time.Duration, clk clock.PassiveClock, wake func(types.NamespacedName)) *launchWindow {
	return &launchWindow{size: size, current: size, timeout: timeout, outcomeHold: outcomeHold, clock: clk,
		since: clk.Now().Truncate(time.Second), wake: wake,
		pending: map[types.NamespacedName]time.Time{}, waiting: map[types.NamespacedName]bool{},
		granted: map[types.NamespacedName]grant{}, outcomes: map[types.NamespacedName]time.Time{}}
}

// following makes the window follow how fast pods start, from least
// places up to its size (0: it stays at its size). Call it before use.
func (w *launchWindow) following(least int) {
	if least > 0 && least < w.size {
		w.least, w.current = least, least
	}
}

// free is the room nobody holds; the lock must be held.
func (w *launchWindow) free() int {
	return w.current - len(w.pending) - w.reserved - w.grantedSum
}

// startedAfter records a place given up after held by a pod that started
// (expired false), or that the timeout ended, and sizes the window from the
// pods that started: startGain times the most that started in one second of
// the last paceHorizon times the quickest start of the last startHorizon,
// within least and size. Where they took slowStart or longer to start, on
// average over the last startHorizon, their wait is the cluster's (image
// pulls, nodes being added), not a queue the window made: the window has
// its whole size. Places that timed out size it only when no pod started
// within startHorizon (nothing starts, or not within the timeout), as pods
// that took the timeout; else they are one SafeJob's pods that never start
// (an image that cannot be pulled) amid others that do. With no start seen
// lately the size stays as it was. The lock must be held.
func (w *launchWindow) startedAfter(held time.Duration, expired bool) {
	if w.least == 0 {
		return
	}
	now := w.clock.Now().Unix()
	s := &w.starts[now%startHorizon]
	if s.at != now {
		*s = startSecond{at: now}
	}
	if expired {
		s.expired++
	} else {
		if s.n == 0 || held < s.quickest {
			s.quickest = held
		}
		s.n++
		s.waited += held
	}
	most, n, quickest, waited := w.startsSince(now)
	size := startGain * float64(most) * quickest.Seconds()
	if waited >= slowStart*time.Duration(n) || size >= float64(w.size) {
		w.current = w.size
		return
	}
	w.current = max(int(math.Ceil(size)), w.least)
}

// startsSince sums the starts up to now (a Unix second): the most pods that
// started in one second of the last paceHorizon, how many started in the
// last startHorizon, the quickest of them and their waits in all; or, if
// none started, the places that timed out, as pods that took the timeout.
// The lock must be held.
func (w *launchWindow) startsSince(now int64) (most, n int, quickest, waited time.Duration) {
	mostExpired := 0
	for _, s := range w.starts {
		// A second from after now (the clock stepped back) is as stale as
		// one from before the horizon.
		if s.at <= now-startHorizon || s.at > now {
			continue
		}
		if s.n > 0 && (n == 0 || s.quickest < quickest) {
			quickest = s.quickest
		}
		n += s.n
		waited += s.waited
		if s.at > now-paceHorizon {
			most, mostExpired = max(most, s.n), max(mostExpired, s.expired)
		}
	}
	if n == 0 {
		// Nothing started within the horizon: the places that timed out
		// tell the pace, as pods that took the timeout.
		return mostExpired, 1, w.timeout, w.timeout
	}
	return most, n, quickest, waited
}

// take reserves up to want places for the launches of job's next write and
// returns how many; the caller gives back (placed or giveBack) exactly
// that. A SafeJob woken for room set aside gets that room first; others get
// free room only while no SafeJob waits for it. One that gets less than it
// wants waits for room (behind those already waiting).
func (w *launchWindow) take(job types.NamespacedName, want int) int {
	if want <= 0 {
		return 0
	}
	w.mu.Lock()
	w.expire()
	got := 0
	if g, ok := w.granted[job]; ok {
		got = min(want, g.n)
		w.grantedSum -= g.n
		delete(w.granted, job)
	}
	if len(w.waiters) == 0 {
		got += min(want-got, max(w.free(), 0))
	}
	w.reserved += got
	if got < want && !w.waiting[job] {
		w.waiting[job] = true
		w.waiters = append(w.waiters, waiter{job: job, want: want - got})
	}
	w.unlock()
	return got
}

// placed gives back n places reserved by take and places the pods whose
// launches the write committed (a pod already holding one keeps it): as
// many as were reserved, or more for a SafeJob that was running already.
func (w *launchWindow) placed(n int, pods []types.NamespacedName) {
	w.mu.Lock()
	w.reserved -= n
	now := w.clock.Now()
	for _, p := range pods {
		if _, ok := w.pending[p]; ok {
			continue
		}
		w.pending[p] = now
		w.order = append(w.order, place{pod: p, at: now})
	}
	w.unlock()
}

// giveBack returns n places reserved by take and not written.
func (w *launchWindow) giveBack(n int) {
	if n <= 0 {
		return
	}
	w.placed(n, nil)
}

// started frees pod's place, if it holds one: it runs or finished (ran),
// is deleted, or the scheduler refused it. Only a pod that ran, placed by
// this process, tells how fast pods start: one an earlier process left
// holds its place from its creation, by the API server's clock.
func (w *launchWindow) started(pod types.NamespacedName, ran bool) {
	w.mu.Lock()
	at, ok := w.pending[pod]
	if !ok {
		w.mu.Unlock()
		return
	}
	delete(w.pending, pod)
	if ran && !at.Before(w.since) {
		w.startedAfter(w.clock.Since(at), false)
	}
	w.unlock()
}

// seen gives a pod not yet started that was created before this process
// began a place from when it was created, unless that is past the timeout:
// the window then counts the pods an earlier process left waiting. A pod
// created since then that this process did not place is not its own (a
// stranger's object naming a SafeJob as controller) and takes no place.
func (w *launchWindow) seen(pod types.NamespacedName, created time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pending[pod]; ok || !created.Before(w.since) || !w.clock.Now().Before(created.Add(w.timeout)) {
		return
	}
	w.pending[pod] = created
	w.order = append(w.order, place{pod: pod, at: created})
	w.measured()
}

// forget drops job's wait and the room set aside for it (it is gone).
func (w *launchWindow) forget(job types.NamespacedName) {
	w.mu.Lock()
	if _, ok := w.granted[job]; !ok && !w.waiting[job] {
		w.mu.Unlock() // every reconcile of a SafeJob that launches nothing comes here
		return
	}
	if g, ok := w.granted[job]; ok {
		w.grantedSum -= g.n
		delete(w.granted, job)
	}
	if w.waiting[job] {
		delete(w.waiting, job)
		for i, x := range w.waiters {
			if x.job == job {
				w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
				break
			}
		}
	}
	w.unlock()
}

// busy reports whether SafeJobs wait for room.
func (w *launchWindow) busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiters) > 0
}

// gone drops everything the window keeps of job: it is deleted.
func (w *launchWindow) gone(job types.NamespacedName) {
	w.forget(job)
	w.dropOutcomes(job)
}

// dropOutcomes forgets that job's outcomes were held: it is deleted, or
// its next write is not one to hold (it records more than successes).
func (w *launchWindow) dropOutcomes(job types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.outcomes[job]; ok {
		delete(w.outcomes, job)
		w.measured()
	}
}

// holdOutcomes reports whether job's status write, which records nothing but
// successes, is to wait: while SafeJobs wait for room, the API server's
// time goes to starting pods first. Held outcomes are recorded as soon as
// no SafeJob waits (each held is queued then), or after outcomeHold.
func (w *launchWindow) holdOutcomes(job types.NamespacedName) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	since, ok := w.outcomes[job]
	switch {
	case len(w.waiters) == 0 || w.outcomeHold <= 0 || ok && !now.Before(since.Add(w.outcomeHold)):
		delete(w.outcomes, job)
		w.measured()
		return false
	case !ok:
		w.outcomes[job] = now
		w.measured()
	}
	return true
}

// tick frees the places and the room set aside that the timeout ended, and
// serves the SafeJobs waiting for them and those whose outcomes were held
// the timeout.
func (w *launchWindow) tick() {
	w.mu.Lock()
	w.expire()
	var due []types.NamespacedName
	now := w.clock.Now()
	for job, since := range w.outcomes {
		if !now.Before(since.Add(w.outcomeHold)) {
			due = append(due, job)
		}
	}
	w.unlock(due...)
}

// run ticks every period until ctx ends: places that time out free room
// with no event to say so.
func (w *launchWindow) run(ctx context.Context, period time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) { w.tick() }, period)
}

// expire frees the places held, and the room set aside, for the timeout or
// longer; the lock must be held. Places taken out of order (seen) may
// outlive it by as much as they are out of order.
func (w *launchWindow) expire() {
	now := w.clock.Now()
	i := 0
	for ; i < len(w.order); i++ {
		p := w.order[i]
		if now.Before(p.at.Add(w.timeout)) {
			break
		}
		if at, ok := w.pending[p.pod]; ok && at.Equal(p.at) {
			delete(w.pending, p.pod)
			// A pod (placed by this process or left by an earlier one)
			// that takes the whole timeout to start: where no pod starts,
			// the window grows as for pods that take that long.
			w.startedAfter(w.timeout, true)
		}
	}
	w.order = w.order[i:]
	for job, g := range w.granted {
		if !now.Before(g.at.Add(w.timeout)) {
			w.grantedSum -= g.n
			delete(w.granted, job)
		}
	}
}

// dispatch sets free room aside for the oldest waiting SafeJobs and returns
// them, to be woken; the lock must be held.
func (w *launchWindow) dispatch() []types.NamespacedName {
	var woken []types.NamespacedName
	now := w.clock.Now()
	for len(w.waiters) > 0 && w.free() > 0 {
		x := w.waiters[0]
		w.waiters[0] = waiter{}
		w.waiters = w.waiters[1:]
		delete(w.waiting, x.job)
		n := min(x.want, w.free())
		w.granted[x.job] = grant{n: w.granted[x.job].n + n, at: now}
		w.grantedSum += n
		woken = append(woken, x.job)
	}
	return woken
}

// unlock serves the SafeJobs waiting for room that is free now, and those
// whose outcomes were held once none waits, updates the gauges, releases the
// lock and wakes those served and also.
func (w *launchWindow) unlock(also ...types.NamespacedName) {
	woken := append(w.dispatch(), also...)
	if len(w.waiters) == 0 && len(w.outcomes) > 0 {
		for job := range w.outcomes {
			woken = append(woken, job)
		}
		clear(w.outcomes)
	}
	w.measured()
	w.mu.Unlock()
	w.wakeAll(woken)
}

// wakeAll queues the woken SafeJobs; called without the lock.
func (w *launchWindow) wakeAll(keys []types.NamespacedName) {
	if w.wake == nil {
		return
	}
	for _, j := range keys {
		w.wake(j)
	}
}

// measured updates the gauges; the lock must be held.
func (w *launchWindow) measured() {
	if w.held != nil {
		w.held.Set(float64(len(w.pending)))
	}
	if w.sizeGauge != nil {
		w.sizeGauge.Set(float64(w.current))
	}
	if w.waitingGauge != nil {
		w.waitingGauge.Set(float64(len(w.waiters)))
	}
	if w.outcomesGauge != nil {
		w.outcomesGauge.Set(float64(len(w.outcomes)))
	}
}
