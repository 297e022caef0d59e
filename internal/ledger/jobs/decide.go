package jobs

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

const (
	// KeepOutcomes is the number of newest pod outcomes a SafeJob's ledger
	// keeps listed, each with its launch. A write that would list more folds
	// the older ones into the checkpoint; open launches always stay listed.
	// The API server decodes, validates and encodes every listed entry on
	// every status write, and every watcher decodes it again
	// (docs/performance.md, "Why the defaults"). So the ledger lists what is in flight and the
	// latest outcome, not the whole history.
	KeepOutcomes = 1
	// WaveSize bounds the Launched entries, and the Stopping entries, one
	// status write appends: a SafeJob of the largest parallelism starts, or
	// stops, in waves of writes that each stay far below the API server's
	// request limit.
	WaveSize = 500
)

// Reasons of the Stopping and Evicted entries the controller writes itself.
const (
	EvictReasonSuspended  = "Suspended"
	EvictReasonStopped    = "JobFinishing"
	EvictReasonScaledDown = "ParallelismReduced"
	// EvictReasonFailing stops the pods of a SafeJob that is failing; as in
	// batch/v1, such a pod counts as failed unless it succeeded.
	EvictReasonFailing = "JobFailing"
)

// Input is everything the controller gathered for one SafeJob.
type Input struct {
	// Name is the SafeJob's name; pod names derive from it.
	Name string
	// UID is the SafeJob's UID: a launch whose pod name is Held is named
	// apart from it (PodNameApart).
	UID types.UID
	// Held holds pod names that pods of an earlier SafeJob of this name
	// still hold: a launch does not take one (its create would meet the
	// old pod, and wait out the fence to be recorded Lost), it is named
	// apart.
	Held map[string]bool
	// Spec and Status are the SafeJob as last observed in the cache.
	Spec   *batchv1alpha1.SafeJobSpec
	Status *batchv1alpha1.SafeJobStatus
	// Pods are the SafeJob's pods as observed in the cache.
	Pods []*corev1.Pod
	// LastSeen holds the last terminal state observed of pods that are no
	// longer in Pods (deleted, or finalizer stripped by someone else).
	LastSeen map[string]*corev1.Pod
	// Gone holds open launches whose pod a live read found absent.
	Gone map[string]bool
	// Taken holds open launches whose pod name a live read found held by an
	// object this SafeJob does not control.
	Taken map[string]bool
	// Uncreated holds the open launches this process committed and has not
	// created yet: only the committer of a launch creates its pod.
	Uncreated map[string]bool
	// Fence bounds when pods may be created and when absence is trusted;
	// the zero Fence is ledger.DefaultFence.
	Fence ledger.Fence
	// Backoff is the delay before a failed pod is replaced; the zero Backoff
	// is DefaultBackoff.
	Backoff Backoff
	// Now is the current time.
	Now time.Time
	// Queue is what the queueing system says of a queued SafeJob; nil when
	// the SafeJob is not queued.
	Queue *QueueGate
	// CreateRefusal is what this process last heard of the SafeJob's pod
	// creates; nil when it has issued none since it started.
	CreateRefusal *CreateRefusal
	// LaunchRoom bounds the launches this decision may append, beyond every
	// bound the SafeJob sets itself: the controller's share of a window it
	// keeps across SafeJobs. nil: no such bound.
	LaunchRoom *int32

	// replayed is Status.Ledger as Unaccounted replayed it, for the Decide
	// that follows to take instead of replaying the same ledger again. The
	// decision changes it, so it serves one Decide only; the ledger and its
	// entries it was replayed from, and the seq, tell a ledger replaced or
	// rewritten since (see replay).
	replayed        *State
	replayedFrom    *batchv1alpha1.Ledger
	replayedEntries []batchv1alpha1.LedgerEntry
	// seen is observed(in) as Unaccounted built it, and seenFrom the Pods
	// it was built from, for the Decide that follows: a map of every pod
	// in flight, 2,000 at the largest parallelism. Pods the live reads add
	// to Pods meanwhile build it again (see observedPods); LastSeen does
	// not change between the two.
	seen     map[string]*corev1.Pod
	seenFrom []*corev1.Pod
}

// observedPods returns observed(in): the map Unaccounted built if Pods is
// still the slice it read, else a new one. Neither Decide nor Unaccounted
// changes the map.
func (in *Input) observedPods() map[string]*corev1.Pod {
	seen, from := in.seen, in.seenFrom
	in.seen, in.seenFrom = nil, nil
	if seen != nil && len(from) == len(in.Pods) && (len(from) == 0 || &from[0] == &in.Pods[0]) {
		return seen
	}
	return observed(in)
}

// remember keeps st, the replay of in.Status.Ledger, for the next Decide.
func (in *Input) remember(st *State) {
	in.replayed, in.replayedFrom, in.replayedEntries = st, &in.Status.Ledger, in.Status.Ledger.Entries
}

// replay returns the State of in.Status.Ledger, the caller's to change: the
// one Unaccounted remembered if the ledger is still the one it read (the
// same object, entries and seq), else a new Replay.
func (in *Input) replay() (*State, error) {
	st, from, entries := in.replayed, in.replayedFrom, in.replayedEntries
	in.replayed, in.replayedFrom, in.replayedEntries = nil, nil, nil
	l := &in.Status.Ledger
	if st != nil && from == l && st.Seq == l.Seq && len(entries) == len(l.Entries) &&
		(len(entries) == 0 || &entries[0] == &l.Entries[0]) {
		return st, nil
	}
	return Replay(l)
}

// CreateRefusal is the API server's answer to the latest pod create:
// Message is its refusal, "" once a create succeeded.
type CreateRefusal struct {
	Message string
}

// ReasonFailedCreate is the reason of the PodCreateFailure condition.
const ReasonFailedCreate = "FailedCreate"

// QueueGate is the admission of a queued SafeJob. While it is closed no
// launch is committed, and launches already open are stopped and recorded
// Evicted (never counted as failures).
type QueueGate struct {
	// Admitted opens the gate.
	Admitted bool
	// Reason and Message say why the gate is closed, or who admitted.
	Reason, Message string
	// MaxActive is the number of pods the admission covers: no more launches
	// than this are open at once, whatever parallelism says now (0: no limit
	// beyond parallelism). A parallelism raised after admission never runs
	// pods the queue did not admit.
	MaxActive int32
}

// EvictReasonNotAdmitted is the reason of Evicted entries for pods stopped
// because their SafeJob's admission was withdrawn without a stated reason.
const EvictReasonNotAdmitted = "NotAdmitted"

// Plan is what to do for one SafeJob. Creates, releases and deletes refer
// to the observed ledger only; Status carries the appended entries.
type Plan struct {
	// Append are the entries appended by this plan, with their seqs.
	Append []batchv1alpha1.LedgerEntry
	// Status is the status to write. Its ledger is the observed one plus Append (maybe folded).
	Status batchv1alpha1.SafeJobStatus
	// Create lists the pods to create: committed, observed, uncreated here.
	Create []PodRef
	// Expired lists the launches committed and uncreated here whose create
	// window has passed before a create of them was planned (the live reads
	// before a decision can take that long): never created, they are
	// recorded Lost once their grace has passed.
	Expired []PodRef
	// Release lists the pods whose outcome is committed and observed and
	// that still carry the ledger finalizer.
	Release []string
	// Delete lists the pods to delete: active pods of a stopping SafeJob, and
	// running pods whose launch is already closed.
	Delete []string
	// Forget lists the pods of Input.LastSeen whose outcome is committed.
	Forget []string
	// RequeueAfter is when the plan changes with time alone (0: never).
	RequeueAfter time.Duration
	// OpenBefore is the number of launches open in the observed ledger,
	// before this plan.
	OpenBefore int
	// Stopped is true when the SafeJob is stopped for suspension or
	// withdrawn admission and none of its pods is active or holds the
	// ledger finalizer any more.
	Stopped bool
}

// Unaccounted lists the open launches that are neither observed, nor known
// gone, nor uncreated here, and were committed at least the fence's LostGrace
// ago: the controller reads each live before calling Decide, and only then
// may its absence (or a stranger holding its name) close it. The duration is
// when the next launch becomes due for that check.
func Unaccounted(in *Input) ([]PodRef, time.Duration, error) {
	st, err := Replay(&in.Status.Ledger)
	if err != nil {
		return nil, 0, err
	}
	in.remember(st)
	seen := observed(in)
	in.seen, in.seenFrom = seen, in.Pods
	fence := in.Fence.OrDefault()
	var candidates []PodRef
	for _, ref := range sortedOpen(st) {
		switch {
		case seen[ref.Name] != nil || in.Gone[ref.Name] || in.Taken[ref.Name]:
		case in.Uncreated[ref.Name] && fence.MayCreate(ref.Time, in.Now): // this process is about to create it
		default:
			candidates = append(candidates, ref)
		}
	}
	due, wait := ledger.DueForLiveRead(fence, candidates, func(r PodRef) time.Time { return r.Time }, in.Now)
	return due, wait, nil
}

// Decide computes the plan for one SafeJob. An error means the observed
// ledger is invalid and nothing may be done.
func Decide(in *Input) (*Plan, error) {
	st, err := in.replay()
	if err != nil {
		return nil, err
	}
	if err := st.within(ledgerIndexLimit(in.Spec)); err != nil {
		return nil, err
	}
	d := &decision{in: in, st: st, seen: in.observedPods(), plan: &Plan{OpenBefore: len(st.Open)}, fence: in.Fence.OrDefault()}
	d.stopOrdered = maps.Clone(st.Stopping)
	d.status = *in.Status.DeepCopy()
	d.target = d.stickyTarget()
	d.stopping = d.target != "" || ptr.Deref(in.Spec.Suspend, false) || d.gateClosed()
	d.victims = d.pickVictims()
	d.recordOutcomes()
	d.applyAppends()
	if !d.finished() {
		d.decideTarget()
		d.decideSuspend()
		d.decideCreateFailure()
		d.stopPods()
		d.launch()
		d.applyAppends()
		d.finish()
	}
	if err := d.writeStatus(); err != nil {
		return nil, err
	}
	return d.plan, nil
}

type decision struct {
	in   *Input
	st   *State // the observed ledger plus the entries appended so far
	seen map[string]*corev1.Pod
	plan *Plan
	// status is the status being built.
	status batchv1alpha1.SafeJobStatus
	// appended entries not yet applied to st.
	unapplied []batchv1alpha1.LedgerEntry
	// target is "" or the condition (SuccessCriteriaMet, FailureTarget) the SafeJob moves to.
	target   string
	stopping bool
	// victims are the open launches to stop that are not stopping yet: all
	// of them when the SafeJob stops, the newest beyond parallelism after a
	// scale-down.
	victims map[string]bool
	// stopOrdered holds the Stopping entries of the observed ledger: only
	// their pods are deleted, once the commit that stops them is observed.
	stopOrdered map[string]string
	fence       ledger.Fence
}

func (d *decision) cond(t string) *metav1.Condition {
	return meta.FindStatusCondition(d.status.Conditions, t)
}

func (d *decision) isTrue(t string) bool {
	c := d.cond(t)
	return c != nil && c.Status == metav1.ConditionTrue
}

func (d *decision) finished() bool { return ledger.Finished(d.status.Conditions) != nil }

func (d *decision) setCond(t string, s metav1.ConditionStatus, reason, msg string) {
	ledger.SetCondition(&d.status.Conditions, t, s, reason, msg, d.in.Now)
}

func (d *decision) stickyTarget() string {
	for _, t := range []string{batchv1alpha1.ConditionFailureTarget, batchv1alpha1.ConditionSuccessCriteriaMet} {
		if d.isTrue(t) {
			return t
		}
	}
	return ""
}

func (d *decision) add(e batchv1alpha1.LedgerEntry) { d.addAt(e, d.in.Now) }

// addAt appends an entry whose time is at, not now: a pod outcome carries
// when the pod ended.
func (d *decision) addAt(e batchv1alpha1.LedgerEntry, at time.Time) {
	e.Time = metav1.NewTime(at)
	d.unapplied = append(d.unapplied, e)
}

// applyAppends folds the entries decided so far into the working state.
func (d *decision) applyAppends() {
	for k := range d.unapplied {
		e := d.unapplied[k]
		e.Seq = d.st.Seq + 1
		if err := d.st.apply(&e); err != nil {
			// Decide only appends entries that fit the state; reaching this is a bug.
			panic(fmt.Sprintf("ledger: appending %s for %s: %v", e.Type, e.Pod, err))
		}
		d.st.Seq = e.Seq
		d.plan.Append = append(d.plan.Append, e)
	}
	d.unapplied = nil
}

// recordOutcomes appends the outcome of every open launch whose pod is seen
// terminal or known gone, and lists the observed pods whose finalizer may go
// or that must not run.
func (d *decision) recordOutcomes() {
	failures := map[int32]int32{}
	var outcomes []batchv1alpha1.LedgerEntry
	// Only the pods of closed launches and the terminal pods have anything
	// to record: taken in name order, without sorting the running ones.
	var names []string
	for name, pod := range d.seen {
		if _, open := d.st.Open[name]; !open || IsTerminal(pod) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		pod := d.seen[name]
		ref, open := d.st.Open[name]
		if !open {
			d.closedPod(pod)
			continue
		}
		e := d.outcome(pod, ref, failures)
		e.Time = metav1.NewTime(endedAt(pod, ref.Time, d.in.Now))
		outcomes = append(outcomes, e)
	}
	// Successes first: as batch/v1 reads the pods that ended since it last
	// looked, a failure clears with an earlier success but counts after a
	// later one, whichever is recorded first.
	slices.SortStableFunc(outcomes, func(a, b batchv1alpha1.LedgerEntry) int {
		return cmp.Compare(btoi(a.Type != batchv1alpha1.EntrySucceeded), btoi(b.Type != batchv1alpha1.EntrySucceeded))
	})
	for _, e := range outcomes {
		d.addAt(e, e.Time.Time)
	}
	for _, ref := range sortedOpen(d.st) {
		if d.seen[ref.Name] != nil {
			continue
		}
		lost := batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLost, Pod: ref.Name, Index: ref.Index, Attempt: ref.Attempt}
		switch {
		case d.in.Taken[ref.Name]:
			lost.Reason = ledger.ReasonNameTaken
			d.add(lost)
		case d.in.Gone[ref.Name]:
			d.add(lost)
		case d.in.Uncreated[ref.Name] && d.st.Stopping[ref.Name] == "":
			if d.fence.MayCreate(ref.Time, d.in.Now) {
				d.plan.Create = append(d.plan.Create, ref)
				continue
			}
			// Past the window the pod is never created: the launch is
			// recorded Lost once LostGrace has passed, and runs again.
			d.plan.Expired = append(d.plan.Expired, ref)
		}
	}
}

// outcome is the entry that closes the open launch ref of a terminal pod.
// A pod the controller stopped ends as its Stopping entry says, whatever
// its exit code: Evicted, never counted; or, when the SafeJob was failing,
// Failed unless it succeeded, as batch/v1 counts the pods it deletes then.
func (d *decision) outcome(pod *corev1.Pod, ref PodRef, failures map[int32]int32) batchv1alpha1.LedgerEntry {
	e := batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntrySucceeded, Pod: ref.Name, Index: ref.Index, Attempt: ref.Attempt}
	succeeded := pod.Status.Phase == corev1.PodSucceeded
	switch reason, stopping := d.st.Stopping[ref.Name]; {
	case stopping && reason != EvictReasonFailing:
		e.Type, e.Reason = batchv1alpha1.EntryEvicted, reason
	case stopping && !succeeded:
		e.Type, e.Reason = batchv1alpha1.EntryFailed, batchv1alpha1.FailReasonCounted
	case !succeeded:
		e.Type, e.Reason = batchv1alpha1.EntryFailed, d.failureReason(pod, ref, failures)
	}
	return e
}

// uncreatedOpen counts the open launches whose pod is not observed.
func (d *decision) uncreatedOpen() int32 {
	var n int32
	for name := range d.st.Open {
		if d.seen[name] == nil {
			n++
		}
	}
	return n
}

// parallelism is the most launches open at once: spec.parallelism, within
// what the queue admitted.
func (d *decision) parallelism() int32 {
	p := ptr.Deref(d.in.Spec.Parallelism, 1)
	if q := d.in.Queue; q != nil && q.MaxActive > 0 {
		p = min(p, q.MaxActive)
	}
	return p
}

// inRange returns the succeeded and failed indexes that count: for an
// Indexed SafeJob those below completions. Completions of an Indexed SafeJob
// may shrink with its parallelism (elastic, as in batch/v1); the ledger
// keeps every index it recorded (I4), and an index above completions
// counts again if completions grow back.
func (d *decision) inRange() (succeeded, failed ledger.IndexSet) {
	if d.in.Spec.CompletionMode != batchv1alpha1.IndexedCompletion {
		return d.st.Succeeded, d.st.FailedIndexes
	}
	c := ptr.Deref(d.in.Spec.Completions, 1)
	return d.st.Succeeded.Below(c), d.st.FailedIndexes.Below(c)
}

// gateClosed reports whether the SafeJob is queued and not admitted.
func (d *decision) gateClosed() bool { return d.in.Queue != nil && !d.in.Queue.Admitted }

func (d *decision) stopReason() string {
	switch {
	case d.target == batchv1alpha1.ConditionFailureTarget:
		return EvictReasonFailing
	case d.target != "":
		return EvictReasonStopped
	case d.gateClosed() && !ptr.Deref(d.in.Spec.Suspend, false):
		if d.in.Queue.Reason != "" {
			return d.in.Queue.Reason
		}
		return EvictReasonNotAdmitted
	case d.stopping:
		return EvictReasonSuspended
	default:
		return EvictReasonScaledDown
	}
}

// pickVictims chooses the open launches to stop among those not stopping
// yet: all of them while the SafeJob stops, else the newest beyond
// parallelism.
func (d *decision) pickVictims() map[string]bool {
	victims := map[string]bool{}
	open := sortedOpen(d.st)
	indexed := d.in.Spec.CompletionMode == batchv1alpha1.IndexedCompletion
	var limit int32
	if indexed {
		limit = indexLimit(d.in.Spec)
	}
	// counts reports whether an open launch counts against parallelism:
	// not stopping already, and (Indexed) of an index below completions.
	counts := func(ref PodRef) bool {
		return d.st.Stopping[ref.Name] == "" && (!indexed || ref.Index < limit)
	}
	n := 0
	for _, ref := range open {
		switch {
		case counts(ref):
			n++
		case d.st.Stopping[ref.Name] == "":
			// Pods of indexes at or above completions are stopped first,
			// whatever parallelism says (an elastic Indexed SafeJob scaled
			// down).
			victims[ref.Name] = true
		}
	}
	switch {
	case d.stopping:
	case workQueue(d.in.Spec) && d.st.Succeeded.Len() > 0:
		n = 0 // after a success a work queue's pods finish, whatever parallelism says now (batch/v1)
	default:
		n -= int(d.parallelism())
	}
	// The newest n of those that count.
	for k := len(open) - 1; k >= 0 && n > 0; k-- {
		if counts(open[k]) {
			victims[open[k].Name] = true
			n--
		}
	}
	return victims
}

// failureReason classifies a failed pod the controller did not stop: the
// podFailurePolicy action, FailIndex once the index has used up
// backoffLimitPerIndex.
func (d *decision) failureReason(pod *corev1.Pod, ref PodRef, failures map[int32]int32) string {
	reason := failureReason(d.in.Spec.PodFailurePolicy, pod)
	if reason != batchv1alpha1.FailReasonCounted {
		return reason
	}
	if limit := d.in.Spec.BackoffLimitPerIndex; limit != nil {
		failures[ref.Index]++
		if d.st.Failures[ref.Index]+failures[ref.Index] > *limit {
			return batchv1alpha1.FailReasonFailIndex
		}
	}
	return batchv1alpha1.FailReasonCounted
}

// closedPod handles an observed pod that has no open launch: its outcome is
// committed (release the finalizer, stop it if it still runs), or its launch
// is newer than the observed ledger (leave it alone).
func (d *decision) closedPod(pod *corev1.Pod) {
	ref, ok := RefFromPod(pod)
	if !ok || !d.st.IsClosed(ref) {
		return
	}
	if d.in.LastSeen[pod.Name] == pod {
		d.plan.Forget = append(d.plan.Forget, pod.Name) // gone from the cluster
		return
	}
	if hasFinalizer(pod) {
		d.plan.Release = append(d.plan.Release, pod.Name)
	}
	if !IsTerminal(pod) && pod.DeletionTimestamp == nil {
		d.plan.Delete = append(d.plan.Delete, pod.Name)
	}
}

// decideTarget sets SuccessCriteriaMet or FailureTarget once the ledger
// (or the clock, for the deadline) says the SafeJob is done.
func (d *decision) decideTarget() {
	if d.target != "" {
		return
	}
	spec, st := d.in.Spec, d.st
	completions := ptr.Deref(spec.Completions, 1)
	if workQueue(spec) {
		// Done once a pod succeeded and every other pod has ended (batch/v1).
		completions = math.MaxInt32
		if st.Succeeded.Len() > 0 && len(st.Open) == 0 {
			completions = 0
		}
	}
	succeeded, failed := d.inRange()
	t, reason, msg := batchv1alpha1.ConditionFailureTarget, "", ""
	matched, met := successPolicyMatch(spec.SuccessPolicy, completions, &succeeded)
	switch {
	case met:
		// batch/v1 decides a success policy before any failure.
		t, reason, msg = batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ReasonSuccessPolicy, matched
	case st.FailJob:
		reason, msg = batchv1alpha1.ReasonPodFailurePolicy, "A pod failure matched a podFailurePolicy rule with action FailJob"
	case spec.BackoffLimitPerIndex == nil && st.Failed > ptr.Deref(spec.BackoffLimit, 6), d.restartsPastLimit():
		reason, msg = batchv1alpha1.ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
	case spec.MaxFailedIndexes != nil && int32(failed.Len()) > *spec.MaxFailedIndexes:
		reason, msg = batchv1alpha1.ReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes"
	case d.deadlineLeft() < 0:
		reason, msg = batchv1alpha1.ReasonDeadlineExceeded, "Job was active longer than specified deadline"
	case int32(succeeded.Len()) >= completions:
		t, reason = batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ReasonCompletionsReached
		msg = "Reached expected number of succeeded pods"
	case failed.Len() > 0 && int32(succeeded.Len()+failed.Len()) >= completions:
		reason, msg = batchv1alpha1.ReasonFailedIndexes, "Job has failed indexes"
	default:
		return
	}
	d.target, d.stopping = t, true
	d.setCond(t, metav1.ConditionTrue, reason, msg)
}

// deadlineLeft is the time left before activeDeadlineSeconds; a large value
// when there is no running deadline.
func (d *decision) deadlineLeft() time.Duration {
	ads := d.in.Spec.ActiveDeadlineSeconds
	if ads == nil || d.status.StartTime == nil || ptr.Deref(d.in.Spec.Suspend, false) || d.gateClosed() {
		return time.Duration(1<<62 - 1)
	}
	return d.status.StartTime.Add(time.Duration(*ads) * time.Second).Sub(d.in.Now)
}

func (d *decision) decideSuspend() {
	d.decideAdmission()
	suspended := ptr.Deref(d.in.Spec.Suspend, false)
	if !suspended && d.gateClosed() {
		return // not running: no start time, no resume
	}
	switch {
	case suspended && d.target == "":
		d.setCond(batchv1alpha1.ConditionSuspended, metav1.ConditionTrue, batchv1alpha1.ReasonSuspended, "Job suspended")
	case !suspended && d.isTrue(batchv1alpha1.ConditionSuspended):
		d.setCond(batchv1alpha1.ConditionSuspended, metav1.ConditionFalse, batchv1alpha1.ReasonResumed, "Job resumed")
		d.status.StartTime = ptr.To(metav1.NewTime(d.in.Now))
	case !suspended && d.status.StartTime == nil:
		d.status.StartTime = ptr.To(metav1.NewTime(d.in.Now))
	}
}

// decideAdmission mirrors the queue gate in the Admitted condition; a
// re-admission after eviction restarts the clock of activeDeadlineSeconds.
func (d *decision) decideAdmission() {
	q := d.in.Queue
	if q == nil {
		return
	}
	if q.Admitted {
		if c := d.cond(batchv1alpha1.ConditionAdmitted); c != nil && c.Status != metav1.ConditionTrue && d.status.StartTime != nil {
			d.status.StartTime = ptr.To(metav1.NewTime(d.in.Now))
		}
		d.setCond(batchv1alpha1.ConditionAdmitted, metav1.ConditionTrue, batchv1alpha1.ReasonAdmitted, q.Message)
		return
	}
	reason := q.Reason
	if reason == "" {
		reason = batchv1alpha1.ReasonQueued
	}
	d.setCond(batchv1alpha1.ConditionAdmitted, metav1.ConditionFalse, reason, q.Message)
}

// stopPods stops the victims (the launches of a stopping SafeJob, or those
// beyond a reduced parallelism) in two steps: it commits a Stopping entry
// for each, and deletes a pod only once the observed ledger holds its
// Stopping entry. The launch stays open until the pod has ended, and its
// outcome follows the committed reason, so a quick resume or scale-up can
// never turn a stopped pod's exit code into a counted failure. An uncreated
// launch stopped before it was created is closed at once: this process
// alone creates it, and has not.
func (d *decision) stopPods() {
	d.victims = d.pickVictims()
	wave := 0
	for _, ref := range sortedOpen(d.st) {
		reason, stopping := d.st.Stopping[ref.Name]
		if !stopping && !d.victims[ref.Name] {
			continue
		}
		if !stopping {
			reason = d.stopReason()
		}
		pod := d.seen[ref.Name]
		switch {
		case pod == nil && d.in.Uncreated[ref.Name]:
			d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryEvicted, Pod: ref.Name, Index: ref.Index,
				Attempt: ref.Attempt, Reason: reason})
			named := func(c PodRef) bool { return c.Name == ref.Name }
			d.plan.Create = slices.DeleteFunc(d.plan.Create, named)
			d.plan.Expired = slices.DeleteFunc(d.plan.Expired, named) // closed here, not left for its grace
		case !stopping && wave < WaveSize:
			wave++
			d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryStopping, Pod: ref.Name, Index: ref.Index,
				Attempt: ref.Attempt, Reason: reason})
		case d.stopOrdered[ref.Name] != "" && pod != nil && d.in.LastSeen[ref.Name] != pod && !IsTerminal(pod) && pod.DeletionTimestamp == nil:
			d.plan.Delete = append(d.plan.Delete, ref.Name)
		}
	}
}

// decideCreateFailure sets PodCreateFailure while the latest pod create was
// refused, and removes it once one succeeded; without news it stays as is.
func (d *decision) decideCreateFailure() {
	switch r := d.in.CreateRefusal; {
	case r == nil:
	case r.Message != "":
		d.setCond(batchv1alpha1.ConditionPodCreateFailure, metav1.ConditionTrue, ReasonFailedCreate, r.Message)
	default:
		meta.RemoveStatusCondition(&d.status.Conditions, batchv1alpha1.ConditionPodCreateFailure)
	}
}

// launch appends Launched entries for the lowest unfinished, idle indexes,
// up to parallelism open launches. While pod creates are refused, one launch
// at a time waits for its pod: a launch whose window passes goes Lost and
// runs again, and one at a time keeps that churn to a single slot.
func (d *decision) launch() {
	if d.stopping {
		return
	}
	slots := min(d.parallelism()-int32(len(d.st.Open)), WaveSize)
	if d.in.LaunchRoom != nil {
		slots = min(slots, *d.in.LaunchRoom)
	}
	if d.isTrue(batchv1alpha1.ConditionPodCreateFailure) {
		slots = min(slots, 1-d.uncreatedOpen())
	}
	busy := map[int32]bool{}
	for _, ref := range d.st.Open {
		busy[ref.Index] = true
	}
	perIndex := d.in.Spec.BackoffLimitPerIndex != nil
	limit, ok := d.launchLimit(perIndex)
	if !ok {
		return
	}
	// With backoffLimitPerIndex an index waiting out its delay is passed
	// over, as in batch/v1. Fresh indexes start only while fewer than
	// parallelism indexes are started and unfinished, so that those (the
	// checkpoint's index list) stay bounded by parallelism (size bounds).
	fresh := int32(math.MaxInt32)
	if perIndex {
		fresh = d.parallelism() - d.st.unfinishedStarted(limit)
	}
	for i := d.st.nextUndone(0); i < limit && slots > 0; i = d.st.nextUndone(i + 1) {
		if d.st.Attempts[i] == 0 && fresh <= 0 {
			break // the rest are fresh, or started ones taken below
		}
		if d.launchIndex(i, busy, perIndex) {
			slots--
			if d.st.Attempts[i] == 0 {
				fresh--
			}
		}
	}
	if perIndex { // without it every undone index below limit was visited above
		d.relaunchStarted(limit, slots, busy)
	}
}

// relaunchStarted launches, within slots, the started indexes below limit
// that the scan above did not reach, once their delay has passed.
func (d *decision) relaunchStarted(limit, slots int32, busy map[int32]bool) {
	for _, i := range d.st.startedIndexes() {
		if slots > 0 && i < limit && d.launchIndex(i, busy, true) {
			slots--
		}
	}
}

// launchLimit is the index below which launches may start now; ok is false
// when none may: within the backoff delay after failures (batch/v1, without
// backoffLimitPerIndex), or once a work queue has a success.
func (d *decision) launchLimit(perIndex bool) (limit int32, ok bool) {
	if wait := d.in.Backoff.left(d.st.FailuresSinceSuccess, d.st.LastFailure, d.in.Now); wait > 0 && !perIndex {
		// batch/v1: no pod starts until the delay after the failures since
		// the last success has passed.
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, wait)
		return 0, false
	}
	if workQueue(d.in.Spec) {
		// Work queue: parallelism pods until one succeeds; after that none
		// starts, and those running finish (batch/v1).
		return d.parallelism(), d.st.Succeeded.Len() == 0
	}
	return ptr.Deref(d.in.Spec.Completions, 1), true
}

// launchIndex launches the next attempt of index i unless it runs, or waits
// out its own backoff delay; it reports whether it launched.
func (d *decision) launchIndex(i int32, busy map[int32]bool, perIndex bool) bool {
	if busy[i] {
		return false
	}
	if wait := d.in.Backoff.left(d.st.Failures[i], d.st.LastIndexFailure[i], d.in.Now); wait > 0 && perIndex {
		// With backoffLimitPerIndex the delay is the index's own.
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, wait)
		return false
	}
	busy[i] = true
	a := d.st.Attempts[i]
	name := PodName(d.in.Name, i, a)
	if d.in.Held[name] {
		name = PodNameApart(d.in.Name, d.in.UID, i, a)
	}
	d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLaunched, Pod: name, Index: i, Attempt: a})
	return true
}

// finish turns the target into Complete or Failed once no launch is open and
// every pod that still holds the finalizer has its launch closed in the
// ledger being written (an outcome is only ever recorded for a terminal pod):
// those are released once this write is observed, so the SafeJob finishes in
// the same write as its last outcome instead of one write later.
func (d *decision) finish() {
	if d.target == "" || len(d.st.Open) > 0 {
		return
	}
	for name, pod := range d.seen {
		if hasFinalizer(pod) && d.in.LastSeen[name] != pod && !d.closed(pod) {
			return
		}
	}
	src := d.cond(d.target)
	if d.target == batchv1alpha1.ConditionSuccessCriteriaMet {
		d.setCond(batchv1alpha1.ConditionComplete, metav1.ConditionTrue, src.Reason, src.Message)
		d.status.CompletionTime = ptr.To(metav1.NewTime(d.in.Now))
		return
	}
	d.setCond(batchv1alpha1.ConditionFailed, metav1.ConditionTrue, src.Reason, src.Message)
}

// closed reports whether the pod's launch is closed in the ledger being written.
func (d *decision) closed(pod *corev1.Pod) bool {
	ref, ok := RefFromPod(pod)
	return ok && d.st.IsClosed(ref)
}

// writeStatus derives the counters from the ledger, packs the launches and
// stops it appends, and folds the outcomes beyond the newest KeepOutcomes.
func (d *decision) writeStatus() error {
	s, st := &d.status, d.st
	l := ledger.Append(&d.in.Status.Ledger, d.plan.Append)
	listed := len(d.in.Status.Ledger.Entries)
	l.Entries = append(l.Entries[:listed], Pack(l.Entries[listed:])...) // the entries listed before stay as written
	if len(d.unapplied) > 0 {
		// Every entry decided is applied to st before the status is written.
		panic(fmt.Sprintf("ledger: %d entries decided but not applied", len(d.unapplied)))
	}
	if len(st.Closed) > KeepOutcomes {
		var err error
		if l, err = foldClosed(&l, st, KeepOutcomes); err != nil { // st is the State of l
			return err
		}
	}
	s.Ledger = l
	d.setCounters(s, st)
	ledger.MarkLedgerValid(&s.Conditions, d.in.Now)
	d.plan.Status = *s
	d.plan.Stopped = d.stopping && d.target == "" && len(st.Open) == 0 && d.podsQuiet()
	if !d.finished() && d.target == "" {
		if left := d.deadlineLeft(); left < time.Duration(1<<62-1) {
			d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, left)
		}
	}
	return nil
}

// setCounters derives the status counters from the ledger's state.
func (d *decision) setCounters(s *batchv1alpha1.SafeJobStatus, st *State) {
	s.Active, s.Ready = 0, 0
	var terminating int32
	for name, pod := range d.seen {
		switch _, open := st.Open[name]; {
		case IsTerminal(pod) || d.in.LastSeen[name] == pod:
		case pod.DeletionTimestamp != nil:
			terminating++
		case open:
			s.Active++
			if isReady(pod) {
				s.Ready++
			}
		}
	}
	s.Terminating = ptr.To(terminating)
	succeeded, failed := d.inRange()
	s.Succeeded = int32(succeeded.Len())
	s.Failed = st.Failed
	s.CompletedIndexes = ""
	if d.in.Spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		s.CompletedIndexes = succeeded.String()
	}
	s.FailedIndexes = nil
	if d.in.Spec.BackoffLimitPerIndex != nil {
		s.FailedIndexes = ptr.To(failed.String())
	}
	s.Completions = completionsColumn(d.in.Spec, s.Succeeded)
}

// podsQuiet reports that every observed pod has terminated and none keeps
// the ledger finalizer beyond this plan.
func (d *decision) podsQuiet() bool {
	for name, pod := range d.seen {
		if d.in.LastSeen[name] == pod {
			continue
		}
		if !IsTerminal(pod) || (hasFinalizer(pod) && !slices.Contains(d.plan.Release, name)) {
			return false
		}
	}
	return true
}

// TTLLeft is the time until a finished SafeJob may be deleted under
// ttlSecondsAfterFinished; ok is false when no TTL applies.
func TTLLeft(spec *batchv1alpha1.SafeJobSpec, status *batchv1alpha1.SafeJobStatus, now time.Time) (time.Duration, bool) {
	if spec.TTLSecondsAfterFinished == nil {
		return 0, false
	}
	if c := ledger.Finished(status.Conditions); c != nil {
		return c.LastTransitionTime.Add(time.Duration(*spec.TTLSecondsAfterFinished) * time.Second).Sub(now), true
	}
	return 0, false
}

func observed(in *Input) map[string]*corev1.Pod {
	seen := make(map[string]*corev1.Pod, len(in.Pods)+len(in.LastSeen))
	for name, pod := range in.LastSeen {
		seen[name] = pod
	}
	for _, pod := range in.Pods {
		if last := seen[pod.Name]; last != nil && !IsTerminal(pod) {
			continue // a terminal state seen before beats a stale cache
		}
		seen[pod.Name] = pod
	}
	return seen
}

// sortedOpen returns the open launches in seq order. The slice is st's own,
// not copied (a pass copied 2,000 launches at the largest parallelism): read
// it before st changes or is asked again, and never write it.
func sortedOpen(st *State) []PodRef {
	if st.launchClosed {
		open := st.launches[:0]
		for _, r := range st.launches {
			if cur, ok := st.Open[r.Name]; ok && cur.Seq == r.Seq {
				open = append(open, r)
			}
		}
		st.launches, st.launchClosed = open, false
	}
	return st.launches[:len(st.launches):len(st.launches)]
}

// RefFromPod reads a pod's index and attempt from its labels.
func RefFromPod(pod *corev1.Pod) (PodRef, bool) {
	i, err1 := strconv.ParseInt(pod.Labels[batchv1alpha1.CompletionIndexLabel], 10, 32)
	a, err2 := strconv.ParseInt(pod.Labels[batchv1alpha1.AttemptLabel], 10, 32)
	if err1 != nil || err2 != nil {
		return PodRef{}, false
	}
	return PodRef{Name: pod.Name, Index: int32(i), Attempt: int32(a)}, true
}

// endedAt is when a terminal pod ended, as batch/v1 reads it: its
// containers' latest finish, else when it stopped being ready, else its
// deletion time less its grace period; never before its launch (launched)
// nor after now, and now when the pod tells nothing.
func endedAt(pod *corev1.Pod, launched, now time.Time) time.Time {
	var at time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.Time
		}
	}
	if at.IsZero() {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
				at = c.LastTransitionTime.Time
			}
		}
	}
	if at.IsZero() && pod.DeletionTimestamp != nil {
		at = pod.DeletionTimestamp.Add(-time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second)
	}
	switch {
	case at.IsZero() || at.After(now):
		at = now
	case at.Before(launched):
		at = launched
	}
	return at.Truncate(time.Second) // as the ledger stores it, so replay decides the same
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// IsTerminal reports whether a pod has ended, Succeeded or Failed.
func IsTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func isReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasFinalizer(pod *corev1.Pod) bool {
	return slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
}

// workQueue reports a SafeJob without completions but with parallelism:
// parallelism pods run until one succeeds, and it completes once the others
// have ended, as a batch/v1 Job without completions does. With neither set,
// batch/v1 defaults both to 1, and so does SafeJob: one pod, one completion.
func workQueue(spec *batchv1alpha1.SafeJobSpec) bool {
	return spec.Completions == nil && spec.Parallelism != nil
}

// completionsOrParallelism is the number of pods the SafeJob needs to
// succeed: completions, or parallelism for a work queue (as Kueue counts a
// batch/v1 Job's pods).
func completionsOrParallelism(spec *batchv1alpha1.SafeJobSpec) int32 {
	return ptr.Deref(spec.Completions, ptr.Deref(spec.Parallelism, 1))
}

// indexLimit bounds the indexes a SafeJob's ledger may hold: completions,
// or for a work queue the largest parallelism the API accepts (slots of a
// parallelism since lowered stay in the ledger).
func indexLimit(spec *batchv1alpha1.SafeJobSpec) int32 {
	if workQueue(spec) {
		return MaxParallelism
	}
	return ptr.Deref(spec.Completions, 1)
}

// ledgerIndexLimit bounds the indexes a valid ledger may hold: those of
// indexLimit, and for an Indexed SafeJob, whose completions may have been
// larger before (elastic), any index the API accepts.
func ledgerIndexLimit(spec *batchv1alpha1.SafeJobSpec) int32 {
	if spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		return ledger.MaxCompletions
	}
	return indexLimit(spec)
}

// MaxParallelism is the largest parallelism the API accepts.
const MaxParallelism = 2000

// completionsColumn is what kubectl shows for a batch/v1 Job in its
// COMPLETIONS column: "3/5", or "0/1 of 4" for a work queue of
// parallelism 4.
func completionsColumn(spec *batchv1alpha1.SafeJobSpec, succeeded int32) string {
	switch p := ptr.Deref(spec.Parallelism, 1); {
	case spec.Completions != nil:
		return fmt.Sprintf("%d/%d", succeeded, *spec.Completions)
	case p > 1:
		return fmt.Sprintf("%d/1 of %d", succeeded, p)
	default:
		return fmt.Sprintf("%d/1", succeeded)
	}
}

// Backoff is the delay before a failed pod is replaced, as batch/v1 has it:
// Base after the first failure since the last success (of the index, with
// backoffLimitPerIndex), doubling with each further one, at most Max.
type Backoff struct {
	Base, Max time.Duration
}

// DefaultBackoff is batch/v1's: 10s doubling, at most 10 minutes.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Minute}

// NoBackoff replaces a failed pod at once.
var NoBackoff = Backoff{Base: -1}

// BackoffLeft is how long the SafeJob's next pod still waits out the
// backoff delay after the failures since the last success (without
// backoffLimitPerIndex).
func (st *State) BackoffLeft(b Backoff, now time.Time) time.Duration {
	return b.left(st.FailuresSinceSuccess, st.LastFailure, now)
}

// left is how long the next pod still waits after failures failures, the
// last recorded at last.
func (b Backoff) left(failures int32, last, now time.Time) time.Duration {
	if b == (Backoff{}) {
		b = DefaultBackoff
	}
	if failures <= 0 || b.Base <= 0 {
		return 0
	}
	delay := b.Base
	for i := int32(1); i < failures && delay < b.Max; i++ {
		delay *= 2
	}
	delay = min(delay, b.Max)
	// A failure time ahead of the clock (another controller's clock, a
	// hand-edited checkpoint) never makes the wait longer than the delay.
	return min(max(delay-now.Sub(last), 0), delay)
}

// restartsPastLimit is batch/v1's backoffLimit for restartPolicy OnFailure:
// the container restarts of the SafeJob's running and pending pods reach
// backoffLimit (any restart, when it is 0).
func (d *decision) restartsPastLimit() bool {
	if d.in.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for name := range d.st.Open {
		pod := d.seen[name]
		if pod == nil || (pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending) {
			continue
		}
		for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
			restarts += cs.RestartCount
		}
	}
	if limit := ptr.Deref(d.in.Spec.BackoffLimit, 6); limit > 0 {
		return restarts >= limit
	}
	return restarts > 0
}
