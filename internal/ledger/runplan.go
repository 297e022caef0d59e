package ledger

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// MissedStall is the number of missed times above which the miss is
// reported as TooManyMissedTimes. Scheduling never stops because of it.
const MissedStall = 100

// RunInput is everything the controller gathered for one scheduled SafeJob.
type RunInput struct {
	// Name is the parent's name; run names derive from it.
	Name string
	// Created is the parent's creation time: the schedule starts after it.
	Created time.Time
	// Spec and Status are the parent as last observed in the cache.
	Spec   *batchv1alpha1.SafeJobSpec
	Status *batchv1alpha1.SafeJobStatus
	// Runs are the parent's child SafeJobs observed in the cache, by name.
	Runs map[string]*batchv1alpha1.SafeJob
	// Busy counts, by run name, the pods of the parent's runs that are still
	// running or terminating, whether or not their run still exists.
	Busy map[string]int
	// Seen holds the runs this process has observed before: an open run
	// that was seen and is no longer there vanished; one never seen was
	// never created.
	Seen map[string]bool
	// Now is the current time.
	Now time.Time
}

// RunPlan is what to do for one scheduled SafeJob. Creates, releases and
// deletes refer to the observed ledger only.
type RunPlan struct {
	// Append are the entries appended by this plan, with their seqs.
	Append []batchv1alpha1.LedgerEntry
	// Status is the status to write.
	Status batchv1alpha1.SafeJobStatus
	// Create lists the committed, observed runs to create now.
	Create []RunRef
	// Delete lists runs to delete: beyond the history limits, or replaced.
	Delete []string
	// Release lists runs whose outcome is committed and observed and that
	// still carry the run finalizer.
	Release []string
	// RequeueAfter is when the next scheduled time comes (0: never).
	RequeueAfter time.Duration
}

// DecideRuns computes the plan for one scheduled SafeJob. An error means the
// observed ledger is invalid and nothing may be done.
func DecideRuns(in *RunInput) (*RunPlan, error) {
	st, err := ReplayRuns(&in.Status.Ledger)
	if err != nil {
		return nil, err
	}
	d := &runDecision{in: in, st: st, plan: &RunPlan{}, closing: map[string]bool{}, open: SortedRuns(st.Open)}
	d.status = *in.Status.DeepCopy()
	d.recordOutcomes()
	d.cleanUp()
	d.schedule()
	d.create()
	if err := d.writeStatus(); err != nil {
		return nil, err
	}
	return d.plan, nil
}

type runDecision struct {
	in     *RunInput
	st     *RunState
	plan   *RunPlan
	status batchv1alpha1.SafeJobStatus
	// open are the observed open runs in scheduled-time order.
	open []RunRef
	// closing holds the open runs whose outcome this plan appends.
	closing map[string]bool
	// lastSuccess is the completion time of the latest successful run seen.
	lastSuccess time.Time
}

func (d *runDecision) policy() batchv1alpha1.ConcurrencyPolicy {
	if d.in.Spec.ConcurrencyPolicy == "" {
		return batchv1alpha1.AllowConcurrent
	}
	return d.in.Spec.ConcurrencyPolicy
}

func (d *runDecision) add(e batchv1alpha1.LedgerEntry) {
	e.Time = metav1.NewTime(d.in.Now)
	d.plan.Append = append(d.plan.Append, e)
}

// finished returns the terminal condition of a run, if it has one.
func finished(run *batchv1alpha1.SafeJob) *metav1.Condition {
	for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed} {
		if c := meta.FindStatusCondition(run.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// recordOutcomes appends the outcome of every open run that finished, is
// being deleted, or vanished.
func (d *runDecision) recordOutcomes() {
	replace := d.policy() == batchv1alpha1.ReplaceConcurrent
	for k, r := range d.open {
		e := batchv1alpha1.LedgerEntry{Run: r.Name, ScheduledTime: ptr.To(metav1.NewTime(r.ScheduledTime))}
		run := d.in.Runs[r.Name]
		later := k < len(d.open)-1
		switch {
		case run == nil && d.in.Seen[r.Name]:
			e.Type, e.Reason = batchv1alpha1.EntryLost, RunReasonVanished
		case run == nil && replace && later:
			// Replaced before it started: a newer run supersedes it.
			e.Type, e.Reason = batchv1alpha1.EntryEvicted, RunReasonReplaced
		case run == nil:
			continue // not created yet
		case finished(run) != nil:
			c := finished(run)
			e.Type, e.Reason = batchv1alpha1.EntryFailed, c.Reason
			if c.Type == batchv1alpha1.ConditionComplete {
				e.Type = batchv1alpha1.EntrySucceeded
				if t := run.Status.CompletionTime; t != nil && t.After(d.lastSuccess) {
					d.lastSuccess = t.Time
				}
			}
		case run.DeletionTimestamp != nil:
			e.Type, e.Reason = batchv1alpha1.EntryEvicted, RunReasonDeleted
			if replace && later {
				e.Reason = RunReasonReplaced
			}
		default:
			continue // running
		}
		d.closing[r.Name] = true
		d.add(e)
	}
}

// isClosed reports whether the observed ledger records the run's outcome,
// listed or folded.
func (d *runDecision) isClosed(run *batchv1alpha1.SafeJob) bool {
	if _, ok := d.st.Closed[run.Name]; ok {
		return true
	}
	if _, ok := d.st.Open[run.Name]; ok {
		return false
	}
	t, ok := RunScheduledTime(run)
	return ok && !t.After(d.st.Folded)
}

// RunScheduledTime reads a run's scheduled time from its annotation.
func RunScheduledTime(run *batchv1alpha1.SafeJob) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, run.Annotations[batchv1alpha1.ScheduledTimeAnnotation])
	return t, err == nil
}

// cleanUp releases the finalizer of runs whose outcome is committed and
// deletes finished runs beyond the history limits, oldest first.
func (d *runDecision) cleanUp() {
	type kept struct {
		name string
		at   time.Time
	}
	var succeeded, failed []kept
	for _, name := range sortedKeys(d.in.Runs) {
		run := d.in.Runs[name]
		if !d.isClosed(run) {
			continue
		}
		if slices.Contains(run.Finalizers, batchv1alpha1.RunFinalizer) {
			d.plan.Release = append(d.plan.Release, name)
		}
		c := finished(run)
		if run.DeletionTimestamp != nil {
			continue
		}
		if c == nil {
			// Closed before it was seen (replaced before it started, while
			// another process created it): it must not run.
			d.plan.Delete = append(d.plan.Delete, name)
			continue
		}
		at, _ := RunScheduledTime(run)
		if c.Type == batchv1alpha1.ConditionComplete {
			succeeded = append(succeeded, kept{name, at})
		} else {
			failed = append(failed, kept{name, at})
		}
	}
	prune := func(list []kept, limit *int32, def int32) {
		slices.SortFunc(list, func(a, b kept) int { return a.at.Compare(b.at) })
		if n := len(list) - int(ptr.Deref(limit, def)); n > 0 {
			for _, k := range list[:n] {
				d.plan.Delete = append(d.plan.Delete, k.name)
			}
		}
	}
	prune(succeeded, d.in.Spec.SuccessfulRunsHistoryLimit, batchv1alpha1.DefaultSuccessfulRunsHistoryLimit)
	prune(failed, d.in.Spec.FailedRunsHistoryLimit, batchv1alpha1.DefaultFailedRunsHistoryLimit)
}

// busy names an earlier run that keeps a new one from starting under Forbid
// or Replace: one still open, or one with a pod still running or terminating.
func (d *runDecision) busy(except string) string {
	for _, r := range d.open {
		if r.Name != except && !d.closing[r.Name] {
			return r.Name
		}
	}
	for _, name := range sortedKeys(d.in.Busy) {
		if name != except && d.in.Busy[name] > 0 {
			return name
		}
	}
	return ""
}

// schedule commits the most recent due time as a run, or says why not.
func (d *runDecision) schedule() {
	spec := d.in.Spec
	if ptr.Deref(spec.Suspend, false) {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonScheduleSuspended,
			"spec.suspend is true: no run starts")
		return
	}
	sched, err := ParseSchedule(ptr.Deref(spec.Schedule, ""), ptr.Deref(spec.TimeZone, ""))
	if err != nil {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonInvalidSchedule, err.Error())
		return
	}
	recent, missed, next, ok := sched.MostRecent(d.earliest(), d.in.Now)
	if !next.IsZero() {
		d.plan.RequeueAfter = next.Sub(d.in.Now)
	}
	nextMsg := "no scheduled time is left"
	if !next.IsZero() {
		nextMsg = "next run at " + next.UTC().Format(time.RFC3339)
	}
	if !ok {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionTrue, batchv1alpha1.ReasonScheduled, nextMsg)
		return
	}
	if dl := spec.StartingDeadlineSeconds; dl != nil && d.in.Now.Sub(recent) > time.Duration(*dl)*time.Second {
		// Too late for the most recent time as well: nothing runs until the
		// next time. The times stay uncommitted; the next run counts them.
		d.reportMissed(missed+1, fmt.Sprintf("%d scheduled time(s) up to %s not run: past startingDeadlineSeconds",
			missed+1, recent.UTC().Format(time.RFC3339)))
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionTrue, batchv1alpha1.ReasonScheduled, nextMsg)
		return
	}
	if d.forbidden(recent) {
		return
	}
	name := RunName(d.in.Name, recent)
	d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryScheduled, Run: name,
		ScheduledTime: ptr.To(metav1.NewTime(recent)), Missed: missed})
	switch c := meta.FindStatusCondition(d.status.Conditions, batchv1alpha1.ConditionMissedRuns); {
	case missed > 0:
		d.reportMissed(missed, fmt.Sprintf("%d scheduled time(s) before %s were not run; run %s started for it",
			missed, recent.UTC().Format(time.RFC3339), name))
	case c != nil && c.Status == metav1.ConditionTrue:
		d.setCond(batchv1alpha1.ConditionMissedRuns, metav1.ConditionFalse, batchv1alpha1.ReasonNoMissedRuns,
			fmt.Sprintf("run %s started with no time missed before it", name))
	}
	d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionTrue, batchv1alpha1.ReasonScheduled,
		fmt.Sprintf("run %s scheduled for %s; %s", name, recent.UTC().Format(time.RFC3339), nextMsg))
}

// earliest is the time after which scheduled times are due: the last run's,
// or when the schedule took effect. An edited schedule applies from its
// first time after the edit was seen: no time that passed before the edit
// runs by surprise.
func (d *runDecision) earliest() time.Time {
	spec := d.in.Spec
	obs := d.status.ObservedSchedule
	if obs == nil || obs.Schedule != *spec.Schedule || obs.TimeZone != ptr.Deref(spec.TimeZone, "") {
		since := d.in.Created
		if obs != nil {
			since = d.in.Now
		}
		d.status.ObservedSchedule = &batchv1alpha1.ObservedSchedule{Schedule: *spec.Schedule,
			TimeZone: ptr.Deref(spec.TimeZone, ""), Since: metav1.NewTime(since)}
	}
	earliest := d.st.LastScheduled
	if since := d.status.ObservedSchedule.Since.Time; earliest.Before(since) {
		earliest = since
	}
	return earliest
}

// forbidden reports, under Forbid, that an earlier run keeps the run due at
// recent from starting, and says so.
func (d *runDecision) forbidden(recent time.Time) bool {
	if d.policy() != batchv1alpha1.ForbidConcurrent {
		return false
	}
	other := d.busy("")
	if other == "" {
		return false
	}
	d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonWaitingForRun,
		fmt.Sprintf("concurrencyPolicy Forbid: run %s is still active; the run due at %s waits for it",
			other, recent.UTC().Format(time.RFC3339)))
	return true
}

// reportMissed sets MissedRuns: how many times were missed and up to when.
func (d *runDecision) reportMissed(n int64, msg string) {
	reason := batchv1alpha1.ReasonMissedSchedule
	if n > MissedStall {
		reason = batchv1alpha1.ReasonTooManyMissedTimes
	}
	d.setCond(batchv1alpha1.ConditionMissedRuns, metav1.ConditionTrue, reason, msg)
}

// create lists the open runs to create now. A run is created only from the
// observed ledger (I8); under Forbid and Replace only once no earlier run
// is open or has a pod left, and Replace deletes the earlier runs.
func (d *runDecision) create() {
	open := d.open
	for k, r := range open {
		if d.in.Runs[r.Name] != nil || d.closing[r.Name] {
			continue
		}
		if d.policy() != batchv1alpha1.AllowConcurrent {
			if d.policy() == batchv1alpha1.ReplaceConcurrent {
				for _, old := range open[:k] {
					if run := d.in.Runs[old.Name]; run != nil && run.DeletionTimestamp == nil && !d.closing[old.Name] {
						d.plan.Delete = append(d.plan.Delete, old.Name)
					}
				}
			}
			if other := d.busy(r.Name); other != "" {
				d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonWaitingForRun,
					fmt.Sprintf("concurrencyPolicy %s: run %s waits until run %s and its pods are gone", d.policy(), r.Name, other))
				continue
			}
		}
		d.plan.Create = append(d.plan.Create, r)
	}
}

func (d *runDecision) setCond(t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&d.status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
		Message: msg, LastTransitionTime: metav1.NewTime(d.in.Now)})
}

// writeStatus derives the parent's status from the ledger and folds it if long.
func (d *runDecision) writeStatus() error {
	l := Append(&d.in.Status.Ledger, d.plan.Append)
	if len(l.Entries) > FoldAbove {
		var err error
		if l, err = FoldRuns(&l, KeepAfterFold); err != nil {
			return err
		}
	}
	st, err := ReplayRuns(&l)
	if err != nil {
		return fmt.Errorf("ledger after this plan: %w", err)
	}
	s := &d.status
	s.Ledger = l
	if !st.LastScheduled.IsZero() {
		s.LastScheduleTime = ptr.To(metav1.NewTime(st.LastScheduled))
	}
	if !d.lastSuccess.IsZero() && (s.LastSuccessfulTime == nil || d.lastSuccess.After(s.LastSuccessfulTime.Time)) {
		s.LastSuccessfulTime = ptr.To(metav1.NewTime(d.lastSuccess))
	}
	s.ActiveRuns = nil
	for _, r := range SortedRuns(st.Open) {
		ref := corev1.ObjectReference{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: r.Name}
		if run := d.in.Runs[r.Name]; run != nil {
			ref.Namespace, ref.UID = run.Namespace, run.UID
		}
		s.ActiveRuns = append(s.ActiveRuns, ref)
	}
	s.MissedRuns = st.Missed
	if c := meta.FindStatusCondition(s.Conditions, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status != metav1.ConditionTrue {
		d.setCond(batchv1alpha1.ConditionLedgerValid, metav1.ConditionTrue, batchv1alpha1.ReasonLedgerOK, "Ledger is valid")
	}
	d.plan.Status = *s
	return nil
}
