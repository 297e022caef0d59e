package runs

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// Input is everything the controller gathered for one scheduled SafeJob.
type Input struct {
	// Name is the parent's name; run names derive from it. Namespace is
	// the parent's, and its runs'.
	Name, Namespace string
	// Created is the parent's creation time: the schedule starts after it.
	Created time.Time
	// Spec and Status are the parent as last observed in the cache.
	Spec   *batchv1alpha1.SafeJobSpec
	Status *batchv1alpha1.SafeJobStatus
	// Runs are the parent's child SafeJobs observed in the cache, by name.
	Runs map[string]*batchv1alpha1.SafeJob
	// Busy counts, by run name, the pods of the parent's runs that are still
	// running or terminating, whether or not their run still exists: pods
	// controlled by one of the UIDs UIDs knows, never matched by labels.
	Busy map[string]int
	// Seen holds the runs this process has observed before, or created,
	// with their UIDs: an open run that was seen and is then found gone
	// vanished.
	Seen map[string]types.UID
	// Issued holds the open runs whose create this process issued and the
	// API server answered (created, or the name exists): they are not
	// created again here.
	Issued map[string]bool
	// Gone holds the open runs that a live read found absent, read only once
	// their create window has passed (Unobserved).
	Gone map[string]bool
	// Taken holds the open runs whose name a live read found held by an
	// object the parent does not control (a stranger's SafeJob, or one left
	// by an earlier parent of the same name): it is never adopted, counted,
	// deleted or released, and the run is recorded Lost (NameTaken).
	Taken map[string]bool
	// RunRequest is the parent's RunNowAnnotation: the name of a run asked
	// for by hand ("" when none).
	RunRequest string
	// Fence bounds when a run may be created and when its absence is
	// trusted, as for pods; the zero Fence is ledger.DefaultFence.
	Fence ledger.Fence
	// Now is the current time.
	Now time.Time
}

// Plan is what to do for one scheduled SafeJob. Creates, releases and
// deletes refer to the observed ledger only.
type Plan struct {
	// Append are the entries appended by this plan, with their seqs.
	Append []batchv1alpha1.LedgerEntry
	// Status is the status to write.
	Status batchv1alpha1.SafeJobStatus
	// Create lists the committed, observed runs to create now.
	Create []Ref
	// Delete lists runs to delete: beyond the history limits, or replaced.
	Delete []string
	// Release lists runs whose outcome is committed and observed and that
	// still carry the run finalizer.
	Release []string
	// RequeueAfter is when the plan changes with time alone: the next
	// scheduled time, or an open run due for a live read (0: never).
	RequeueAfter time.Duration
	// RequestWaits says why the run asked for by hand is not started now
	// ("" when there is none, or it starts).
	RequestWaits string
}

// Decide computes the plan for one scheduled SafeJob. An error means the
// observed ledger is invalid and nothing may be done.
func Decide(in *Input) (*Plan, error) {
	st, err := Replay(&in.Status.Ledger)
	if err != nil {
		return nil, err
	}
	d := &decision{in: in, st: st, plan: &Plan{}, closing: map[string]bool{}, open: Sorted(st.Open),
		fence: in.Fence.OrDefault()}
	d.status = *in.Status.DeepCopy()
	d.recordOutcomes()
	d.cleanUp()
	d.schedule()
	d.runNow()
	d.create()
	if err := d.writeStatus(); err != nil {
		return nil, err
	}
	return d.plan, nil
}

// decision is the state of one Decide call: its input, the observed ledger
// it started from, and the plan and status it builds step by step.
type decision struct {
	in     *Input
	st     *State
	plan   *Plan
	status batchv1alpha1.SafeJobStatus
	// open are the observed open runs in scheduled-time order.
	open []Ref
	// closing holds the open runs whose outcome this plan appends.
	closing map[string]bool
	// lastSuccess is the completion time of the latest successful run seen.
	lastSuccess time.Time
	fence       ledger.Fence
}

// appendEntry adds an entry to the plan's appends, stamped with the
// current time.
func (d *decision) appendEntry(e batchv1alpha1.LedgerEntry) {
	e.Time = metav1.NewTime(d.in.Now)
	d.plan.Append = append(d.plan.Append, e)
}

// deleteRun adds a run to the plan's deletes once.
func (d *decision) deleteRun(name string) {
	if !slices.Contains(d.plan.Delete, name) {
		d.plan.Delete = append(d.plan.Delete, name)
	}
}

// setCond sets a condition of the status being built.
func (d *decision) setCond(t string, s metav1.ConditionStatus, reason, msg string) {
	ledger.SetCondition(&d.status.Conditions, t, s, reason, msg, d.in.Now)
}
