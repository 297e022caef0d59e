package controller

import (
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// windowUnderTest is a launch window on a fake clock that records whom it
// wakes.
type windowUnderTest struct {
	*launchWindow
	t     *testing.T
	clk   *clocktesting.FakePassiveClock
	woken []string
}

func newWindowUnderTest(t *testing.T, size int, timeout time.Duration) *windowUnderTest {
	w := &windowUnderTest{t: t, clk: clocktesting.NewFakePassiveClock(time.Unix(1000, 0))}
	w.launchWindow = newLaunchWindow(size, timeout, 0, w.clk, func(job types.NamespacedName) { w.woken = append(w.woken, job.Name) })
	return w
}

func job(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
func pod(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

// take asks for want places for job and checks how many it gets.
func (w *windowUnderTest) take(name string, want, wantGot int) {
	w.t.Helper()
	if got := w.launchWindow.take(job(name), want); got != wantGot {
		w.t.Fatalf("take(%s, %d) = %d, want %d", name, want, got, wantGot)
	}
}

// place keeps n reserved places for the named pods.
func (w *windowUnderTest) place(n int, pods ...string) {
	var keys []types.NamespacedName
	for _, p := range pods {
		keys = append(keys, pod(p))
	}
	w.placed(n, keys)
}

// wokenNow checks whom the window woke since the last check.
func (w *windowUnderTest) wokenNow(want ...string) {
	w.t.Helper()
	if !slices.Equal(w.woken, want) {
		w.t.Fatalf("woken %v, want %v", w.woken, want)
	}
	w.woken = nil
}

// TestWindowServesInArrivalOrder checks that the window holds no more pods
// than its size, that a SafeJob that found no room waits, behind those that
// waited before it, and that room freed by a started pod is set aside for
// the oldest waiting SafeJob, which is woken, and taken by nobody else.
func TestWindowServesInArrivalOrder(t *testing.T) {
	w := newWindowUnderTest(t, 3, time.Minute)
	w.take("a", 2, 2)
	w.place(2, "a-0", "a-1")
	w.take("b", 2, 1) // one place left; b waits for the other
	w.take("c", 1, 0) // b waits: c queues behind it, though nothing is free either way
	w.place(1, "b-0")
	w.wokenNow()

	w.started(pod("a-0"), true)
	w.wokenNow("b") // the place goes to b, the oldest waiting
	w.take("d", 1, 0)
	w.take("c", 1, 0) // set aside for b: c still waits
	w.take("b", 1, 1)
	w.place(1, "b-1")

	w.started(pod("a-1"), true)
	w.started(pod("b-0"), true)
	w.wokenNow("c", "d") // c came before d
	w.take("d", 1, 1)
	w.take("c", 1, 1)
	w.place(1, "c-0")
	w.place(1, "d-0")
	if n := len(w.pending); n != 3 {
		t.Fatalf("%d places held, want 3", n)
	}
	w.started(pod("b-0"), true) // twice: nothing more to free
	w.started(pod("x-0"), true) // never placed
	w.take("e", 1, 0)
	w.wokenNow()
}

// TestWindowGivesBackUnwritten checks that places reserved for a write that
// did not happen, or that committed fewer launches, return to the window
// and go to the SafeJobs waiting.
func TestWindowGivesBackUnwritten(t *testing.T) {
	w := newWindowUnderTest(t, 2, time.Minute)
	w.take("a", 2, 2)
	w.take("b", 1, 0)
	w.giveBack(2) // a's write conflicted
	w.wokenNow("b")
	w.take("a", 2, 1) // b holds one place now; a waits for the other
	w.take("b", 1, 1)
	w.place(1, "b-0")
	w.place(1) // a wrote none of its launch after all
	w.wokenNow("a")
	w.take("a", 1, 1)
	w.place(1, "a-0")
	if n := w.free(); n != 0 {
		t.Fatalf("free %d after two pods placed in a window of 2", n)
	}
}

// TestWindowTimeout checks that a pod that never starts frees its place
// once the timeout passes, as does room set aside for a SafeJob that never
// came back for it, so that neither holds the SafeJobs behind them.
func TestWindowTimeout(t *testing.T) {
	w := newWindowUnderTest(t, 1, 30*time.Second)
	w.take("a", 1, 1)
	w.place(1, "a-0")
	w.take("b", 1, 0)
	w.clk.SetTime(w.clk.Now().Add(29 * time.Second))
	w.tick()
	w.wokenNow()
	w.clk.SetTime(w.clk.Now().Add(time.Second))
	// The place a-0 held is free now, with no tick yet to say so: c, asking
	// first, still comes after b.
	w.take("c", 1, 0)
	w.wokenNow("b")
	// b never comes back (its SafeJob needs no pod any more, or its worker
	// is slow): its room goes to c after the timeout.
	w.clk.SetTime(w.clk.Now().Add(30 * time.Second))
	w.tick()
	w.wokenNow("c")
	w.take("c", 1, 1)
	w.place(1, "c-0")
	w.started(pod("a-0"), true) // a-0 starts late: its place was freed already
	if n := w.free(); n != 0 {
		t.Fatalf("free %d, want 0: c-0 holds the only place", n)
	}
}

// TestWindowSeesEarlierPods checks that pods not started when the process
// starts hold places from when they were created, until the timeout.
func TestWindowSeesEarlierPods(t *testing.T) {
	w := newWindowUnderTest(t, 2, 30*time.Second)
	now := w.clk.Now()
	w.seen(pod("old"), now.Add(-time.Minute)) // past the timeout: not counted
	w.seen(pod("a-0"), now.Add(-20*time.Second))
	w.seen(pod("a-0"), now.Add(-20*time.Second)) // its create seen twice
	w.take("b", 2, 1)
	w.clk.SetTime(w.clk.Now().Add(10 * time.Second))
	w.tick()
	w.wokenNow("b")
}

// TestWindowIgnoresStrangers checks that a pending pod created after the
// window began that it never placed (not the operator's: someone else's pod
// naming a SafeJob as controller) holds no place.
func TestWindowIgnoresStrangers(t *testing.T) {
	w := newWindowUnderTest(t, 1, 30*time.Second)
	w.clk.SetTime(w.clk.Now().Add(time.Second))
	w.seen(pod("stranger"), w.clk.Now())
	w.take("a", 1, 1)
}

// TestWindowForget checks that a SafeJob that is gone, or no longer wants
// to launch, leaves the line, and that room set aside for it goes to the
// next.
func TestWindowForget(t *testing.T) {
	w := newWindowUnderTest(t, 1, time.Minute)
	w.take("a", 1, 1)
	w.place(1, "a-0")
	w.take("b", 1, 0)
	w.take("c", 1, 0)
	w.take("d", 1, 0)
	w.forget(job("c"))
	w.started(pod("a-0"), true)
	w.wokenNow("b")
	w.forget(job("b")) // deleted before it came back
	w.wokenNow("d")
	w.take("d", 1, 1)
}

// TestWindowHoldsOutcomes checks that a status write recording successes
// only is held while a SafeJob waits for room, and that the SafeJob is woken
// as soon as none waits, or once held for outcomeHold; never held when
// outcomeHold is 0.
func TestWindowHoldsOutcomes(t *testing.T) {
	w := newWindowUnderTest(t, 1, time.Hour)
	w.take("a", 1, 1)
	w.place(1, "a-0")
	w.take("b", 1, 0)
	if w.holdOutcomes(job("x")) {
		t.Fatal("held with outcomeHold 0")
	}

	w = newWindowUnderTest(t, 1, time.Hour)
	w.outcomeHold = time.Minute
	if w.holdOutcomes(job("x")) {
		t.Fatal("held while no SafeJob waits")
	}
	w.take("a", 1, 1)
	w.place(1, "a-0")
	if w.busy() {
		t.Fatal("busy while no SafeJob waits")
	}
	w.take("b", 1, 0)
	if !w.busy() {
		t.Fatal("not busy while b waits")
	}
	for range 2 { // held, and held again when decided again
		if !w.holdOutcomes(job("x")) {
			t.Fatal("not held while b waits")
		}
	}
	w.started(pod("a-0"), true) // b gets the room: nothing waits any more
	w.wokenNow("b", "x")
	if w.holdOutcomes(job("x")) {
		t.Fatal("held again while no SafeJob waits")
	}

	// c waits all along: y is held for outcomeHold, not longer.
	w.take("b", 1, 1)
	w.place(1, "b-0")
	w.take("c", 1, 0)
	if !w.holdOutcomes(job("y")) {
		t.Fatal("not held while c waits")
	}
	w.clk.SetTime(w.clk.Now().Add(59 * time.Second))
	w.tick()
	w.wokenNow()
	if !w.holdOutcomes(job("y")) {
		t.Fatal("not held before outcomeHold passed")
	}
	w.clk.SetTime(w.clk.Now().Add(time.Second))
	w.tick()
	w.wokenNow("y")
	if w.holdOutcomes(job("y")) {
		t.Fatal("held past outcomeHold")
	}

	// A SafeJob deleted while its outcomes are held is not woken for them.
	if !w.holdOutcomes(job("z")) {
		t.Fatal("not held while c waits")
	}
	w.gone(job("z"))
	w.started(pod("b-0"), true)
	w.wokenNow("c")
}

// TestWindowDropsOutcomes checks that a SafeJob whose held write is no
// longer one to hold is not woken for it again.
func TestWindowDropsOutcomes(t *testing.T) {
	w := newWindowUnderTest(t, 1, time.Hour)
	w.outcomeHold = time.Minute
	w.take("a", 1, 1)
	w.place(1, "a-0")
	w.take("b", 1, 0)
	if !w.holdOutcomes(job("x")) {
		t.Fatal("not held while b waits")
	}
	w.dropOutcomes(job("x"))
	w.clk.SetTime(w.clk.Now().Add(time.Minute))
	w.tick()
	w.wokenNow()
	w.started(pod("a-0"), true)
	w.wokenNow("b")
}

// TestHoldOutcomesWhich checks which status writes are held while a
// SafeJob waits for room: those that record nothing but successes, and
// never for a SafeJob whose finish something waits on.
func TestHoldOutcomesWhich(t *testing.T) {
	entries := func(kinds ...batchv1alpha1.EntryType) *jobs.Plan {
		p := &jobs.Plan{}
		for i, typ := range kinds {
			p.Append = append(p.Append, batchv1alpha1.LedgerEntry{Type: typ, Pod: "p-" + string(rune('a'+i))})
		}
		return p
	}
	successes := entries(batchv1alpha1.EntrySucceeded, batchv1alpha1.EntrySucceeded)
	for _, c := range []struct {
		name   string
		change func(*batchv1alpha1.SafeJob)
		plan   *jobs.Plan
		want   bool
	}{
		{name: "successes", plan: successes, want: true},
		{name: "nothing appended", plan: entries()},
		{name: "a failure too", plan: entries(batchv1alpha1.EntrySucceeded, batchv1alpha1.EntryFailed)},
		{name: "a launch too", plan: entries(batchv1alpha1.EntrySucceeded, batchv1alpha1.EntryLaunched)},
		{name: "a lost pod", plan: entries(batchv1alpha1.EntryLost)},
		{name: "a deadline", plan: successes,
			change: func(sj *batchv1alpha1.SafeJob) { sj.Spec.ActiveDeadlineSeconds = ptr.To[int64](600) }},
		{name: "queued through Kueue", plan: successes,
			change: func(sj *batchv1alpha1.SafeJob) { sj.Labels = map[string]string{QueueNameLabel: "q"} }},
		{name: "a run of a schedule", plan: successes, change: func(sj *batchv1alpha1.SafeJob) {
			sj.OwnerReferences = []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob",
				Name: "nightly", UID: "u", Controller: ptr.To(true)}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWindowUnderTest(t, 1, time.Hour)
			w.outcomeHold = time.Minute
			w.take("a", 1, 1)
			w.place(1, "a-0")
			w.take("b", 1, 0)
			r := &pacer{window: w.launchWindow}
			sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}
			if c.change != nil {
				c.change(sj)
			}
			if got := r.holdOutcomes(sj, c.plan); got != c.want {
				t.Errorf("held = %v, want %v", got, c.want)
			}
		})
	}
}

// launchBatch places n one-pod SafeJobs named prefix-i, each taking its
// place, and returns the pods.
func (w *windowUnderTest) launchBatch(prefix string, n int) []string {
	w.t.Helper()
	var pods []string
	for i := range n {
		name := prefix + "-" + strconv.Itoa(i)
		w.take(name, 1, 1)
		w.place(1, name+"-0")
		pods = append(pods, name+"-0")
	}
	return pods
}

// startAfter places n one-pod SafeJobs named prefix-i and sees their pods
// start after the given wait.
func (w *windowUnderTest) startAfter(prefix string, n int, after time.Duration) {
	w.t.Helper()
	pods := w.launchBatch(prefix, n)
	w.clk.SetTime(w.clk.Now().Add(after))
	for _, p := range pods {
		w.started(pod(p), true)
	}
}

// size checks the places the window has now.
func (w *windowUnderTest) size(want int) {
	w.t.Helper()
	w.mu.Lock()
	got := w.current
	w.mu.Unlock()
	if got != want {
		w.t.Fatalf("window size %d, want %d", got, want)
	}
}

// TestWindowFollowsStarts runs the window against a model of a cluster
// whose kubelets start 40 pods a second, each no sooner than 200 ms after
// its launch is committed, first come first served, with more one-pod
// SafeJobs waiting than it can start. From its least size the window must
// grow until the kubelets are never idle, and stop there: pods must not
// queue at the kubelets for seconds, as they do behind a window of fixed
// size (the same model with the window at its size).
func TestWindowFollowsStarts(t *testing.T) {
	const (
		tick     = 5 * time.Millisecond
		interval = 25 * time.Millisecond // 40 starts a second
		base     = 200 * time.Millisecond
		run      = 60 * time.Second
	)
	model := func(least int) (started int, longestWait time.Duration, mostHeld int) {
		w := newWindowUnderTest(t, 500, 30*time.Second)
		w.following(least)
		start := w.clk.Now()
		type launch struct {
			pod   string
			ready time.Time
		}
		var queue []launch // committed, in order
		next, nextStart := 0, start
		for now := start; now.Before(start.Add(run)); now = now.Add(tick) {
			w.clk.SetTime(now)
			for {
				name := "j" + strconv.Itoa(next)
				if w.launchWindow.take(job(name), 1) == 0 {
					w.forget(job(name)) // it comes again as a new SafeJob
					break
				}
				w.place(1, name+"-0")
				queue = append(queue, launch{pod: name + "-0", ready: now.Add(base)})
				next++
			}
			for len(queue) > 0 && !now.Before(queue[0].ready) && !now.Before(nextStart) {
				if now.Sub(start) > run/2 {
					started++
					longestWait = max(longestWait, now.Sub(queue[0].ready))
				}
				w.started(pod(queue[0].pod), true)
				queue = queue[1:]
				nextStart = now.Add(interval)
			}
			if now.Sub(start) > run/2 {
				w.mu.Lock()
				mostHeld = max(mostHeld, len(w.pending))
				w.mu.Unlock()
			}
		}
		return started, longestWait, mostHeld
	}
	// Over the second half of the run the kubelets could start 1,200.
	started, wait, held := model(8)
	t.Logf("following: %d pods started in the second half, longest wait at the kubelets %v, most held %d", started, wait, held)
	if started < 1188 {
		t.Errorf("following: %d pods started in 30 s, want the kubelets busy (at least 99%% of 1,200)", started)
	}
	if wait > time.Second {
		t.Errorf("following: pods waited up to %v at the kubelets, want at most 1s", wait)
	}
	fixedStarted, fixedWait, fixedHeld := model(0)
	t.Logf("fixed: %d pods started, longest wait %v, most held %d", fixedStarted, fixedWait, fixedHeld)
	if fixedWait < 5*time.Second {
		t.Errorf("fixed: pods waited up to %v; the model should queue them behind a fixed window", fixedWait)
	}
}

// TestWindowGrowsForSlowStarts checks that pods which take a few seconds to
// start get room for as many as start in that time, up to the window's
// size, once no quicker start is within the last minute (20 s after one,
// it still sizes the window), and that pods which take 10 s or more on
// average give the window its whole size, a quick start among them or not.
func TestWindowGrowsForSlowStarts(t *testing.T) {
	w := newWindowUnderTest(t, 100, 30*time.Second)
	w.following(4)
	w.size(4)
	w.startAfter("a", 4, 250*time.Millisecond)
	w.size(4) // 2 x 4 a second x 0.25 s is less than its least

	w.clk.SetTime(w.clk.Now().Add(20 * time.Second).Truncate(time.Second))
	w.startAfter("b", 4, 5*time.Second)
	w.size(4) // the quick start 25 s ago: a queue's wait does not grow the window

	w.clk.SetTime(w.clk.Now().Add(time.Minute).Truncate(time.Second))
	w.startAfter("c", 4, 5*time.Second)
	w.size(40) // 2 x 4 a second x 5 s
	w.clk.SetTime(w.clk.Now().Add(200 * time.Millisecond))
	w.startAfter("d", 40, 5*time.Second)
	w.size(100) // 2 x 40 x 5 s is more than its size

	w = newWindowUnderTest(t, 100, 30*time.Second)
	w.following(4)
	w.startAfter("a", 1, 100*time.Millisecond) // a pod whose image was there
	w.size(4)
	w.clk.SetTime(w.clk.Now().Add(time.Second))
	w.startAfter("b", 3, 20*time.Second) // pods that pulled theirs: 15 s on average
	w.size(100)
}

// TestWindowFollowsOnlyStarts checks that pods deleted or refused by the
// scheduler, or left by an earlier process, free their places but do not
// size the window; that places the timeout ends size it, as pods that took
// the timeout, only where no pod started within the last minute (not one
// SafeJob's pods that never start amid others that do); and that a window
// whose least is its size or more keeps its size.
func TestWindowFollowsOnlyStarts(t *testing.T) {
	w := newWindowUnderTest(t, 100, 30*time.Second)
	w.following(4)
	// A pod an earlier process left waiting starts: its wait, from its
	// creation, is not this process's to time.
	w.seen(pod("old-0"), w.clk.Now().Add(-20*time.Second))
	w.started(pod("old-0"), true)
	w.size(4)
	pods := w.launchBatch("a", 4)
	w.clk.SetTime(w.clk.Now().Add(20 * time.Second))
	w.started(pod(pods[0]), false)
	w.size(4)
	if n := w.free(); n != 1 {
		t.Fatalf("free %d, want 1: the deleted pod's place", n)
	}
	// A pod starts quickly; the other three never start: at the timeout
	// their places free and the quick start keeps the window small.
	quick := w.launchBatch("q", 1)
	w.clk.SetTime(w.clk.Now().Add(100 * time.Millisecond))
	w.started(pod(quick[0]), true)
	w.clk.SetTime(w.clk.Now().Add(10 * time.Second))
	w.tick()
	w.size(4)
	// A minute on, with no pod started since, places that time out grow the
	// window as for pods that take that long.
	w.clk.SetTime(w.clk.Now().Add(time.Minute))
	w.launchBatch("b", 4)
	w.clk.SetTime(w.clk.Now().Add(30 * time.Second))
	w.tick()
	w.size(100)
	w.take("c", 100, 100)

	fixed := newWindowUnderTest(t, 10, 30*time.Second)
	fixed.following(20) // larger than its size: it stays at its size
	fixed.size(10)
	fixed.startAfter("a", 10, 100*time.Millisecond)
	fixed.size(10)
	fixed.take("b", 10, 10)
}
