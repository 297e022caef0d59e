package jobs

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// world is a model cluster: an API server holding one SafeJob's status and
// its pods, controllers with lagging caches, and the faults of DESIGN.md.
type world struct {
	t    *testing.T
	rng  *rand.Rand
	now  time.Time
	spec batchv1alpha1.SafeJobSpec
	// versions holds every status ever written; the last is current.
	versions []batchv1alpha1.SafeJobStatus
	pods     map[string]*corev1.Pod
	created  map[string]int
	// everSucceeded holds pods the kubelet finished successfully.
	everSucceeded map[string]bool
	// exempt holds pods whose outcome may go unrecorded: force-deleted.
	exempt map[string]bool
	// outcomes holds the outcome committed for each pod.
	outcomes map[string]batchv1alpha1.EntryType
	// foreign holds pods a stranger created under names the SafeJob may use.
	foreign map[string]bool
	// inflight holds pod creates sent and not landed yet: each lands at
	// some time before its deadline, or never.
	inflight []inflightCreate
	ctrls    []*modelController
	states   map[int]*State // replayed versions, by index
	// parallelism as first set; rescale varies it, calm restores it.
	parallelism int32
	// writtenAt holds the parallelism in force when each version was written.
	writtenAt []int32
	// foldedRuns counts the versions checked that list a run with pods
	// folded inside it: pods ending out of order are part of what the test
	// covers.
	foldedRuns int
}

// fence is the model controllers' fence: short, so that creates expire and
// launches go Lost within a run.
var fence = ledger.Fence{CreateWindow: 10 * time.Second, CreateTimeout: 4 * time.Second}

// inflightCreate is a pod create on its way: waiting for a write slot
// until sendAt, then sent (if its window has not passed) with a deadline.
type inflightCreate struct {
	ref      PodRef
	sendAt   time.Time
	sent     bool
	deadline time.Time
}

type modelController struct {
	version     int // index in versions of the cached SafeJob
	pods        map[string]*corev1.Pod
	uncreated   map[string]bool
	lastSeen    map[string]*corev1.Pod
	writtenOver int // -1: no write waiting to be observed
}

func newWorld(t *testing.T, seed uint64, spec batchv1alpha1.SafeJobSpec, controllers int) *world {
	w := &world{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5afe)), now: time.Unix(1_700_000_000, 0),
		spec: spec, versions: []batchv1alpha1.SafeJobStatus{{}}, writtenAt: []int32{0},
		pods: map[string]*corev1.Pod{}, created: map[string]int{}, everSucceeded: map[string]bool{}, exempt: map[string]bool{}, states: map[int]*State{},
		outcomes: map[string]batchv1alpha1.EntryType{}, foreign: map[string]bool{},
	}
	w.parallelism = ptr.Deref(spec.Parallelism, 1)
	for range controllers {
		w.ctrls = append(w.ctrls, w.freshController())
	}
	return w
}

func (w *world) freshController() *modelController {
	return &modelController{pods: map[string]*corev1.Pod{}, uncreated: map[string]bool{},
		lastSeen: map[string]*corev1.Pod{}, writtenOver: -1}
}

func (w *world) current() *batchv1alpha1.SafeJobStatus { return &w.versions[len(w.versions)-1] }

// syncLedger moves a controller's cached SafeJob forward, maybe not to the newest.
func (w *world) syncLedger(c *modelController) {
	c.version += w.rng.IntN(len(w.versions) - c.version)
	if w.rng.IntN(2) == 0 {
		c.version = len(w.versions) - 1
	}
}

// syncPods refreshes a controller's pod cache; pods that vanished leave their
// final state behind, as a delete event carries it.
func (w *world) syncPods(c *modelController) {
	for name, old := range c.pods {
		if _, ok := w.pods[name]; !ok && IsTerminal(old) {
			c.lastSeen[name] = old
		}
	}
	c.pods = map[string]*corev1.Pod{}
	for name, p := range w.pods {
		if !w.foreign[name] {
			c.pods[name] = p.DeepCopy()
		}
	}
}

// reconcile runs one controller's reconcile; crash stops it after acting,
// before its status write.
func (w *world) reconcile(c *modelController, crash bool) {
	if c.writtenOver == c.version {
		return // own write not observed yet
	}
	c.writtenOver = -1
	status := w.versions[c.version].DeepCopy()
	in := &Input{Name: "sj", Spec: &w.spec, Status: status, LastSeen: c.lastSeen,
		Uncreated: c.uncreated, Gone: map[string]bool{}, Taken: map[string]bool{}, Fence: fence, Now: w.now}
	for _, p := range c.pods {
		in.Pods = append(in.Pods, p)
	}
	w.readLive(in)
	if w.rng.IntN(3) == 0 {
		// The controller's launch window leaves it little or no room.
		in.LaunchRoom = ptr.To(int32(w.rng.IntN(3)))
	}
	plan, err := Decide(in)
	if err != nil {
		w.t.Fatalf("Decide: %v", err)
	}
	if n := launchedIn(plan); in.LaunchRoom != nil && n > int(*in.LaunchRoom) {
		w.t.Fatalf("%d launches with room for %d", n, *in.LaunchRoom)
	}
	w.act(c, plan)
	if crash {
		return
	}
	if c.version != len(w.versions)-1 {
		return // resourceVersion conflict
	}
	w.versions = append(w.versions, plan.Status)
	w.writtenAt = append(w.writtenAt, ptr.Deref(w.spec.Parallelism, 1))
	c.writtenOver = c.version
	w.written(c, plan)
}

// readLive plays the controller's live reads of the launches the cache does
// not account for: gone, or held by a stranger.
func (w *world) readLive(in *Input) {
	unaccounted, _, err := Unaccounted(in)
	if err != nil {
		w.t.Fatalf("Unaccounted: %v", err)
	}
	for _, ref := range unaccounted {
		switch _, exists := w.pods[ref.Name]; {
		case !exists:
			in.Gone[ref.Name] = true
		case w.foreign[ref.Name]:
			in.Taken[ref.Name] = true
		}
	}
	if len(unaccounted) > 0 && w.rng.IntN(3) == 0 {
		// The reads took long (a slow API server): the decision is timed
		// after them, as the controller's is, and launches whose window or
		// grace passed meanwhile were not read.
		w.now = w.now.Add(time.Duration(w.rng.IntN(20)) * time.Second)
		in.Now = w.now
	}
}

// written updates a controller's memory after its status write landed, and
// checks that no stranger's pod was counted.
func (w *world) written(c *modelController, plan *Plan) {
	for _, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched {
			c.uncreated[e.Pod] = true
		} else {
			delete(c.uncreated, e.Pod)
		}
	}
	for _, name := range plan.Forget {
		delete(c.lastSeen, name)
	}
	for _, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched || e.Type == batchv1alpha1.EntryStopping {
			continue
		}
		if w.foreign[e.Pod] && (e.Type == batchv1alpha1.EntrySucceeded || e.Type == batchv1alpha1.EntryFailed) {
			w.t.Fatalf("exact: a stranger's pod %s was recorded %s (%s)", e.Pod, e.Type, e.Reason)
		}
		w.outcomes[e.Pod] = e.Type
	}
}

func (w *world) act(c *modelController, plan *Plan) {
	for _, ref := range plan.Expired {
		if fence.MayCreate(ref.Time, w.now) {
			w.t.Fatalf("fence: launch %s given up %s after it, within its window", ref.Name, w.now.Sub(ref.Time))
		}
		delete(c.uncreated, ref.Name) // never created: recorded Lost after its grace
	}
	for _, ref := range plan.Create {
		delete(c.uncreated, ref.Name)
		if !fence.MayCreate(ref.Time, w.now) {
			w.t.Fatalf("fence: create of %s planned %s after its launch", ref.Name, w.now.Sub(ref.Time))
		}
		// A create may wait for a write slot, and once sent it may land at
		// once, later, or never.
		f := inflightCreate{ref: ref, sendAt: w.now}
		if w.rng.IntN(3) == 0 {
			f.sendAt = w.now.Add(time.Duration(w.rng.IntN(40)) * time.Second)
		}
		w.inflight = append(w.inflight, f)
	}
	for _, name := range slices.Concat(plan.Release, plan.Delete) {
		if w.foreign[name] {
			w.t.Fatalf("exact: the controller touched a stranger's pod %s", name)
		}
	}
	w.releaseAndDelete(plan)
}

// land lands one pod create at the API server.
func (w *world) land(f inflightCreate) {
	ref := f.ref
	if _, exists := w.pods[ref.Name]; exists {
		return // AlreadyExists
	}
	delete(w.foreign, ref.Name) // a stranger's pod of that name came and went
	w.created[ref.Name]++
	// I1: one pod per launch, and only for an open launch: a create never
	// lands after its launch was closed (Lost, or Evicted before creation).
	cur := w.currentState()
	if _, open := cur.Open[ref.Name]; w.created[ref.Name] > 1 || !open {
		w.t.Fatalf("I1: pod %s created %d times, launch open %v", ref.Name, w.created[ref.Name], open)
	}
	{
		w.pods[ref.Name] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Finalizers: []string{batchv1alpha1.LedgerFinalizer},
				Labels: map[string]string{
					batchv1alpha1.CompletionIndexLabel: fmt.Sprint(ref.Index),
					batchv1alpha1.AttemptLabel:         fmt.Sprint(ref.Attempt),
				}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}
	}
}

// deliver moves the creates on their way: one whose slot came is sent as
// the controller sends it (not at all once its window has passed, else with
// the deadline of window plus timeout); one sent lands at some time before
// its deadline, or is dropped then (the client gave up and the server
// stopped with it).
func (w *world) deliver() {
	var keep []inflightCreate
	for _, f := range w.inflight {
		if !f.sent {
			if w.now.Before(f.sendAt) {
				keep = append(keep, f)
				continue
			}
			if !fence.MayCreate(f.ref.Time, w.now) {
				continue
			}
			f.sent, f.deadline = true, f.ref.Time.Add(fence.CreateWindow+fence.CreateTimeout)
		}
		switch {
		case !w.now.Before(f.deadline):
		case w.rng.IntN(2) == 0:
			w.land(f)
		default:
			keep = append(keep, f)
		}
	}
	w.inflight = keep
}

// stranger creates a pod of its own under the name of a future attempt.
func (w *world) stranger() {
	st := w.currentState()
	i := int32(w.rng.IntN(int(ptr.Deref(w.spec.Completions, 1))))
	name := PodName("sj", i, st.Attempts[i]+int32(w.rng.IntN(2)))
	if _, exists := w.pods[name]; exists || st.done(i) {
		return
	}
	w.foreign[name] = true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if w.rng.IntN(2) == 0 {
		p.Status.Phase = corev1.PodSucceeded
	}
	w.pods[name] = p
}

func (w *world) releaseAndDelete(plan *Plan) {
	for _, name := range plan.Release {
		p := w.pods[name]
		if p == nil {
			continue
		}
		// I5: a finalizer goes only once the outcome is committed.
		st := w.currentState()
		ref, _ := RefFromPod(p)
		if !st.IsClosed(ref) {
			w.t.Fatalf("I5: finalizer of %s released before its outcome was committed", name)
		}
		p.Finalizers = nil
		w.maybeRemove(name)
	}
	for _, name := range plan.Delete {
		if p := w.pods[name]; p != nil && p.DeletionTimestamp == nil {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(w.now))
			w.maybeRemove(name)
		}
	}
}

func (w *world) maybeRemove(name string) {
	if p := w.pods[name]; p.DeletionTimestamp != nil && len(p.Finalizers) == 0 {
		delete(w.pods, name)
	}
}

// kubelet moves one random pod along: Pending to Running, Running to an end,
// a pod being deleted to Failed.
func (w *world) kubelet() {
	var names []string
	for _, name := range ledger.SortedKeys(w.pods) {
		if !IsTerminal(w.pods[name]) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	p := w.pods[names[w.rng.IntN(len(names))]]
	switch {
	case p.DeletionTimestamp != nil:
		w.finish(p, corev1.PodFailed, 137)
	case p.Status.Phase == corev1.PodPending:
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	case w.rng.IntN(4) == 0:
		w.finish(p, corev1.PodFailed, int32(1+w.rng.IntN(3)))
	default:
		w.finish(p, corev1.PodSucceeded, 0)
	}
}

func (w *world) finish(p *corev1.Pod, phase corev1.PodPhase, code int32) {
	p.Status.Phase = phase
	p.Status.Conditions = nil
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
	if phase == corev1.PodSucceeded {
		w.everSucceeded[p.Name] = true
	}
}

// podGC deletes a terminal pod, as --terminated-pod-gc-threshold=1 would.
func (w *world) podGC() {
	for _, name := range ledger.SortedKeys(w.pods) {
		if p := w.pods[name]; IsTerminal(p) && p.DeletionTimestamp == nil {
			p.DeletionTimestamp = ptr.To(metav1.NewTime(w.now))
			w.maybeRemove(name)
			return
		}
	}
}

// rescale changes parallelism, as a user editing the spec would.
func (w *world) rescale() {
	w.spec.Parallelism = ptr.To(int32(w.rng.IntN(int(w.parallelism) + 1)))
}

// launchedSince reports whether l has a launch after seq (also within an
// entry with a count that a fold has joined to launches before it).
func launchedSince(l *batchv1alpha1.Ledger, seq int64) bool {
	for _, e := range l.Entries {
		if e.LastSeq() > seq && e.Type == batchv1alpha1.EntryLaunched {
			return true
		}
	}
	return false
}

// forceDelete removes a random pod outright, finalizer and all.
func (w *world) forceDelete() {
	names := ledger.SortedKeys(w.pods)
	if len(names) > 0 {
		name := names[w.rng.IntN(len(names))]
		w.exempt[name] = true
		delete(w.pods, name)
	}
}

// state replays version v once.
func (w *world) state(v int) *State {
	if st, ok := w.states[v]; ok {
		return st
	}
	st := w.mustReplay(&w.versions[v].Ledger)
	w.states[v] = st
	return st
}

func (w *world) currentState() *State { return w.state(len(w.versions) - 1) }

func (w *world) mustReplay(l *batchv1alpha1.Ledger) *State {
	st, err := Replay(l)
	if err != nil {
		w.t.Fatalf("I4: ledger does not replay: %v", err)
	}
	return st
}

// check asserts the invariants that hold after every step.
func (w *world) check() {
	cur := w.current()
	if foldedInRuns(w.t, &cur.Ledger) > 0 {
		w.foldedRuns++
	}
	st := w.currentState()
	par, completions := ptr.Deref(w.spec.Parallelism, 1), ptr.Deref(w.spec.Completions, 1)
	// I2: open launches within what completions still need, and a version
	// that launched stays within parallelism (after a scale-down, the older
	// launches above it are being stopped).
	launchedNow := len(w.versions) > 1 && launchedSince(&cur.Ledger, w.state(len(w.versions)-2).Seq)
	if launchedNow && int32(len(st.Open)) > w.writtenAt[len(w.writtenAt)-1] || int32(len(st.Open)+st.Succeeded.Len()) > completions {
		w.t.Fatalf("I2: %d open launches, %d succeeded, parallelism %d, completions %d", len(st.Open), st.Succeeded.Len(), par, completions)
	}
	// I4: each version's meaning contains the previous one's.
	if len(w.versions) > 1 {
		prev := w.state(len(w.versions) - 2)
		if err := st.Covers(prev); err != nil {
			w.t.Fatalf("I4: %v", err)
		}
	}
	// One pod per index at a time: no index ever has two pods that have
	// not ended (a pod being deleted has not ended), whatever was late.
	busy := map[int32]string{}
	for _, name := range ledger.SortedKeys(w.pods) {
		p := w.pods[name]
		if w.foreign[name] || IsTerminal(p) {
			continue
		}
		ref, _ := RefFromPod(p)
		if other, dup := busy[ref.Index]; dup {
			w.t.Fatalf("one pod per index: %s and %s of index %d both running", other, name, ref.Index)
		}
		busy[ref.Index] = name
	}
	// I6: bounded ledger: the open launches (at most the largest
	// parallelism) each with its Stopping entry, the newest KeepOutcomes
	// outcomes with their launches, and, once the SafeJob stops folding on
	// its way to Complete or Failed, the outcomes of the launches that were
	// open then.
	if n := len(cur.Ledger.Entries); n > 3*int(w.parallelism)+2*KeepOutcomes {
		w.t.Fatalf("I6: %d entries listed", n)
	}
}

func refFromName(name string) PodRef {
	var i, a int32
	if _, err := fmt.Sscanf(name, "sj-%d-%d", &i, &a); err != nil {
		panic(err)
	}
	return PodRef{Name: name, Index: i, Attempt: a}
}

func (w *world) finished() (string, bool) {
	for _, c := range w.current().Conditions {
		if (c.Type == batchv1alpha1.ConditionComplete || c.Type == batchv1alpha1.ConditionFailed) && c.Status == metav1.ConditionTrue {
			return c.Type, true
		}
	}
	return "", false
}

// step does one random thing; faults are off in the calm phase.
func (w *world) step(faults bool) {
	w.now = w.now.Add(time.Duration(w.rng.IntN(2000)) * time.Millisecond)
	c := w.ctrls[w.rng.IntN(len(w.ctrls))]
	switch r := w.rng.IntN(100); {
	case r < 30:
		w.syncLedger(c)
	case r < 45:
		w.syncPods(c)
	case r < 70:
		w.reconcile(c, faults && w.rng.IntN(10) == 0)
	case r < 92:
		w.kubelet()
	case r < 96 && faults:
		w.podGC()
	case r < 98 && faults:
		*c = *w.freshController() // crash: memory lost, cache rebuilt
		w.syncLedger(c)
		w.syncPods(c)
	case r < 99 && faults:
		w.forceDelete()
	case faults && w.rng.IntN(3) == 0:
		w.stranger()
	case faults:
		w.rescale()
	}
	w.deliver()
	w.check()
}

func TestPropertyInvariants(t *testing.T) {
	specs := map[string]batchv1alpha1.SafeJobSpec{
		"nonindexed p2 c5": {Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](5), BackoffLimit: ptr.To[int32](1000)},
		"indexed p3 c8": {Parallelism: ptr.To[int32](3), Completions: ptr.To[int32](8), BackoffLimit: ptr.To[int32](1000),
			CompletionMode: batchv1alpha1.IndexedCompletion},
		"p1 c1 backoff 0": {Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](0)},
		"per index": {Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](10), BackoffLimit: ptr.To[int32](6),
			CompletionMode: batchv1alpha1.IndexedCompletion, BackoffLimitPerIndex: ptr.To[int32](2)},
		"many completions folds": {Parallelism: ptr.To[int32](10), Completions: ptr.To[int32](300), BackoffLimit: ptr.To[int32](100000)},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			seeds := uint64(30)
			if *spec.Completions > 100 {
				seeds = 4
			}
			foldedRuns := 0
			for seed := range seeds {
				for _, controllers := range []int{1, 2} {
					w := newWorld(t, seed, spec, controllers)
					for range 600 {
						w.step(true)
					}
					w.calm(t, 20000)
					w.checkEnd(t)
					foldedRuns += w.foldedRuns
				}
			}
			if *spec.Parallelism >= 10 && foldedRuns == 0 {
				t.Errorf("no version listed a run with pods folded inside it")
			}
		})
	}
}

// calm runs without faults until the SafeJob finishes and every finalizer is gone (I7).
func (w *world) calm(t *testing.T, steps int) {
	t.Helper()
	w.spec.Parallelism = ptr.To(w.parallelism)
	for range steps {
		if _, done := w.finished(); done && w.noFinalizers() {
			return
		}
		w.step(false)
	}
	cur := w.current()
	var pods []string
	for _, name := range ledger.SortedKeys(w.pods) {
		p := w.pods[name]
		pods = append(pods, fmt.Sprintf("%s:%s:del=%v:fin=%v:foreign=%v", name, p.Status.Phase, p.DeletionTimestamp != nil, p.Finalizers, w.foreign[name]))
	}
	t.Fatalf("I7: not finished after faults stopped: %s active %d conditions %+v\nledger %+v\npods %v\nparallelism %d",
		cur.Completions, cur.Active, cur.Conditions, cur.Ledger.Entries, pods, ptr.Deref(w.spec.Parallelism, 1))
}

func (w *world) noFinalizers() bool {
	for _, p := range w.pods {
		if slices.Contains(p.Finalizers, batchv1alpha1.LedgerFinalizer) {
			return false
		}
	}
	return true
}

// checkEnd asserts I3 on a finished SafeJob.
func (w *world) checkEnd(t *testing.T) {
	t.Helper()
	cur := w.current()
	st := w.mustReplay(&cur.Ledger)
	kind, _ := w.finished()
	completions := ptr.Deref(w.spec.Completions, 1)
	if kind == batchv1alpha1.ConditionComplete && int32(st.Succeeded.Len()) != completions {
		t.Fatalf("I3: Complete with %d of %d completions", st.Succeeded.Len(), completions)
	}
	for name := range w.everSucceeded {
		ref := refFromName(name)
		// A pod the controller stopped is Evicted whatever its exit code,
		// as batch/v1 ignores the pods it stops.
		if !w.exempt[name] && !w.foreign[name] && w.outcomes[name] != batchv1alpha1.EntryEvicted && !st.Succeeded.Has(ref.Index) {
			t.Fatalf("I3: pod %s succeeded but index %d is not counted", name, ref.Index)
		}
	}
	if cur.Succeeded != int32(st.Succeeded.Len()) || cur.Active != 0 {
		t.Fatalf("status counters %d/%d active %d, ledger says %d", cur.Succeeded, completions, cur.Active, st.Succeeded.Len())
	}
}

// launchedIn counts a plan's Launched entries.
func launchedIn(plan *Plan) int {
	n := 0
	for _, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched {
			n++
		}
	}
	return n
}
