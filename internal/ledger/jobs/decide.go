package jobs

import (
	"fmt"
	"maps"
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

// Input is everything the controller gathered for one SafeJob. Unaccounted
// and Decide only read it; Observe reads it once for both.
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
// when the next launch becomes due for that check. It replays the ledger on
// every call; an Observation shares one replay with the Decide that follows.
func Unaccounted(in *Input) ([]PodRef, time.Duration, error) {
	return Observe(in).Unaccounted()
}

// Decide computes the plan for one SafeJob. An error means the observed
// ledger is invalid and nothing may be done. It replays the ledger on every
// call; Observation.Decide takes the replay Observe made.
func Decide(in *Input) (*Plan, error) {
	return Observe(in).Decide()
}

// decideOn computes the plan for in from st, the State of its ledger (which
// the decision changes), and observed, its pods by name (which it only reads).
func decideOn(in *Input, st *State, observed map[string]*corev1.Pod) (*Plan, error) {
	if err := st.within(ledgerIndexLimit(in.Spec)); err != nil {
		return nil, err
	}
	d := &decision{in: in, st: st, observed: observed, plan: &Plan{OpenBefore: len(st.Open)}, fence: in.Fence.OrDefault()}
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

// decision is what one decideOn works on. Its steps append entries (add);
// applyAppends applies them to st once the outcomes are recorded, and again
// once the launches are, for the steps after to read the ledger with them.
type decision struct {
	in *Input
	st *State // the observed ledger plus the entries appended so far
	// observed holds the observed pods by name (observePods); never changed.
	observed map[string]*corev1.Pod
	plan     *Plan
	// status is the status being built.
	status batchv1alpha1.SafeJobStatus
	// appended entries not yet applied to st.
	unapplied []batchv1alpha1.LedgerEntry
	// target is "" or the condition (SuccessCriteriaMet, FailureTarget) the SafeJob moves to.
	target string
	// stopping is true when every open launch is to stop: a target is set,
	// the SafeJob is suspended, or its queue gate is closed.
	stopping bool
	// victims are the open launches to stop that are not stopping yet: all
	// of them when the SafeJob stops, the newest beyond parallelism after a
	// scale-down.
	victims map[string]bool
	// stopOrdered holds the Stopping entries of the observed ledger: only
	// their pods are deleted, once the commit that stops them is observed.
	stopOrdered map[string]string
	fence       ledger.Fence
	// failJobMessage is batch/v1's message for the first pod failure this
	// decision records that fails the Job by its podFailurePolicy.
	failJobMessage string
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
