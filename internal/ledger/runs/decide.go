package runs

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// MissedStall is the number of missed times above which the miss is
// reported as TooManyMissedTimes. Scheduling never stops because of it.
const MissedStall = 100

// MaxOpen is the most runs a scheduled SafeJob has open at once (from
// a run's commit until its outcome is recorded). Every open run is listed
// in the ledger and in status.activeRuns, so however long its runs take a
// parent's status stays bounded, far below what the API server stores
// (TestRunsCap). At the cap a due
// time does not start: it is reported (Scheduling TooManyActiveRuns,
// MissedRuns, an event) and counted missed when a run starts again, once
// runs finish.
const MaxOpen = 100

const (
	// FoldAbove is the number of listed entries of a scheduled SafeJob's run
	// ledger above which closed runs are folded into the checkpoint.
	FoldAbove = 100
	// KeepAfterFold is the number of newest runs left listed by a fold.
	KeepAfterFold = 20
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

// Unobserved lists the open runs that the cache does not show and that
// were committed at least the fence's LostGrace ago: no create of them can
// land any more. The controller reads each live before Decide; only
// then may a run's absence close it, whether or not it was ever seen. The
// duration is when the next open run becomes due for that check.
func Unobserved(in *Input) ([]Ref, time.Duration, error) {
	st, err := Replay(&in.Status.Ledger)
	if err != nil {
		return nil, 0, err
	}
	var candidates []Ref
	for _, r := range Sorted(st.Open) {
		if in.Runs[r.Name] == nil && !in.Gone[r.Name] && !in.Taken[r.Name] {
			candidates = append(candidates, r)
		}
	}
	due, wait := ledger.DueForLiveRead(in.Fence, candidates, func(r Ref) time.Time { return r.Time }, in.Now)
	return due, wait, nil
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

func (d *decision) policy() batchv1alpha1.ConcurrencyPolicy {
	if d.in.Spec.ConcurrencyPolicy == "" {
		return batchv1alpha1.AllowConcurrent
	}
	return d.in.Spec.ConcurrencyPolicy
}

func (d *decision) add(e batchv1alpha1.LedgerEntry) {
	e.Time = metav1.NewTime(d.in.Now)
	d.plan.Append = append(d.plan.Append, e)
}

// recordOutcomes appends the outcome of every open run that finished, is
// being deleted, vanished, or was never created.
func (d *decision) recordOutcomes() {
	// Under Replace a run being deleted while a newer time is due was
	// deleted to make way for it.
	_, replacing := d.dueNow()
	for k, r := range d.open {
		// A manual run is never superseded: the policy does not apply to it.
		later := !r.Manual && slices.ContainsFunc(d.open[k+1:], func(o Ref) bool { return !o.Manual })
		var typ batchv1alpha1.EntryType
		var reason string
		if run := d.in.Runs[r.Name]; run == nil {
			typ, reason = d.absentOutcome(r.Name, later)
		} else {
			typ, reason = d.presentOutcome(run, later || (replacing && !r.Manual))
		}
		if typ == "" {
			continue
		}
		// The UID stays in the ledger so that the run's pods are still
		// matched once the run is gone (UIDs).
		d.closing[r.Name] = true
		d.add(batchv1alpha1.LedgerEntry{Type: typ, Reason: reason, Run: r.Name,
			ScheduledTime: ptr.To(metav1.NewTime(r.ScheduledTime)), UID: string(d.runUID(r.Name))})
	}
}

// absentOutcome is the outcome of an open run the parent does not observe
// ("" while there is none yet): later says a newer run is open.
func (d *decision) absentOutcome(name string, later bool) (batchv1alpha1.EntryType, string) {
	switch {
	case later && d.policy() == batchv1alpha1.ReplaceConcurrent:
		// Replaced before it started: a newer run supersedes it.
		return batchv1alpha1.EntryEvicted, ReasonReplaced
	case d.in.Taken[name]:
		// Someone else holds the name: this run never ran here.
		return batchv1alpha1.EntryLost, ledger.ReasonNameTaken
	case d.in.Gone[name] && (d.in.Issued[name] || d.runUID(name) != ""):
		// Past its create window and absent: no create can land any more.
		// A run this process saw or created, or whose UID the parent
		// recorded, existed and was removed by someone else.
		return batchv1alpha1.EntryLost, ReasonVanished
	case d.in.Gone[name]:
		return batchv1alpha1.EntryLost, ReasonNotCreated
	}
	return "", "" // not created yet, or not observed yet
}

// presentOutcome is the outcome of an open run the parent observes ("" while
// it runs): superseded says a newer run is open or due.
func (d *decision) presentOutcome(run *batchv1alpha1.SafeJob, superseded bool) (batchv1alpha1.EntryType, string) {
	if c := ledger.Finished(run.Status.Conditions); c != nil {
		if c.Type != batchv1alpha1.ConditionComplete {
			return batchv1alpha1.EntryFailed, c.Reason
		}
		if t := run.Status.CompletionTime; t != nil && t.After(d.lastSuccess) {
			d.lastSuccess = t.Time
		}
		return batchv1alpha1.EntrySucceeded, c.Reason
	}
	if run.DeletionTimestamp == nil {
		return "", "" // running
	}
	if superseded && d.policy() == batchv1alpha1.ReplaceConcurrent {
		return batchv1alpha1.EntryEvicted, ReasonReplaced
	}
	return batchv1alpha1.EntryEvicted, ReasonDeleted
}

// activeRef is the reference status.activeRuns last gave an open run (empty
// when it has none): it keeps the run's UID once the run was observed.
func (d *decision) activeRef(name string) corev1.ObjectReference {
	return activeRef(d.in.Status, name)
}

func activeRef(status *batchv1alpha1.SafeJobStatus, name string) corev1.ObjectReference {
	for _, ref := range status.ActiveRuns {
		if ref.Name == name {
			return ref
		}
	}
	return corev1.ObjectReference{}
}

// runUID is the UID of an open run as far as the parent knows it: observed
// now, seen or created by this process, or recorded in status.activeRuns
// ("" when it never learned it).
func (d *decision) runUID(name string) types.UID {
	if run := d.in.Runs[name]; run != nil {
		return run.UID
	}
	if uid := d.in.Seen[name]; uid != "" {
		return uid
	}
	return d.activeRef(name).UID
}

// UIDs maps the UID of every run of the parent it knows to the run's
// name: the runs it controls (Runs), the runs this process saw or created,
// the open runs status.activeRuns records, and the listed outcome entries.
// Only a pod controlled by one of these UIDs can hold back a run under
// Forbid or Replace; a stranger's pod never does, whatever it carries. A
// run folded into the checkpoint is no longer known, nor are its pods:
// under Forbid and Replace no run is committed while a pod of a known
// earlier run is left, so a run is folded only after its pods were gone.
func UIDs(in *Input) map[types.UID]string {
	out := map[types.UID]string{}
	for _, e := range in.Status.Ledger.Entries {
		if e.UID != "" && e.Run != "" {
			out[types.UID(e.UID)] = e.Run
		}
	}
	for _, ref := range in.Status.ActiveRuns {
		if ref.UID != "" {
			out[ref.UID] = ref.Name
		}
	}
	for name, uid := range in.Seen {
		if uid != "" {
			out[uid] = name
		}
	}
	for name, run := range in.Runs {
		out[run.UID] = name
	}
	return out
}

// isClosed reports whether the observed ledger records the run's outcome,
// listed or folded.
func (d *decision) isClosed(run *batchv1alpha1.SafeJob) bool {
	if _, ok := d.st.Closed[run.Name]; ok {
		return true
	}
	if _, ok := d.st.Open[run.Name]; ok {
		return false
	}
	t, ok := ScheduledTime(run)
	if IsManual(run) {
		return ok && !t.After(d.st.FoldedManual)
	}
	return ok && !t.After(d.st.Folded)
}

// IsManual reports whether a run was started by hand (RunNowAnnotation).
func IsManual(run *batchv1alpha1.SafeJob) bool {
	return run.Annotations[batchv1alpha1.InstantiateAnnotation] == batchv1alpha1.InstantiateManual
}

// isManual reports whether the named run of the parent was started by hand.
func (d *decision) isManual(name string) bool {
	if r, ok := d.st.Open[name]; ok {
		return r.Manual
	}
	if r, ok := d.st.Closed[name]; ok {
		return r.Manual
	}
	run := d.in.Runs[name]
	return run != nil && IsManual(run)
}

// ScheduledTime reads a run's scheduled time from its annotation.
func ScheduledTime(run *batchv1alpha1.SafeJob) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, run.Annotations[batchv1alpha1.ScheduledTimeAnnotation])
	return t, err == nil
}

// fenceClosed reports whether no create of a run can land any more: its
// create window, create timeout and clock margin have passed since its
// Scheduled entry was committed. A run folded into the checkpoint was held
// listed until then.
func (d *decision) fenceClosed(name string) bool {
	ref, listed := d.st.Closed[name]
	if !listed {
		ref, listed = d.st.Open[name]
	}
	if !listed {
		return true
	}
	due := ref.Time.Add(d.fence.LostGrace()).Sub(d.in.Now)
	if due > 0 {
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, due)
	}
	return due <= 0
}

// cleanUp releases the finalizer of runs whose outcome is committed and
// deletes finished runs beyond the history limits, oldest first. A
// finalizer is released only once no create of the run can land any more
// (fenceClosed): until then the run cannot disappear through the parent, so
// a create still in flight meets AlreadyExists and never makes it again.
func (d *decision) cleanUp() {
	type kept struct {
		name string
		at   time.Time
	}
	var succeeded, failed []kept
	for _, name := range ledger.SortedKeys(d.in.Runs) {
		run := d.in.Runs[name]
		if !d.isClosed(run) {
			continue
		}
		if slices.Contains(run.Finalizers, batchv1alpha1.RunFinalizer) && d.fenceClosed(name) {
			d.plan.Release = append(d.plan.Release, name)
		}
		c := ledger.Finished(run.Status.Conditions)
		if run.DeletionTimestamp != nil {
			continue
		}
		if c == nil {
			// Closed before it was seen (replaced before it started, while
			// another process created it): it must not run.
			d.deleteRun(name)
			continue
		}
		at, _ := ScheduledTime(run)
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
				d.deleteRun(k.name)
			}
		}
	}
	prune(succeeded, d.in.Spec.SuccessfulRunsHistoryLimit, batchv1alpha1.DefaultSuccessfulRunsHistoryLimit)
	prune(failed, d.in.Spec.FailedRunsHistoryLimit, batchv1alpha1.DefaultFailedRunsHistoryLimit)
}

// busy names an earlier run that keeps a new one from starting under Forbid
// or Replace: one still open, or one with a pod still running or
// terminating. Runs started by hand do not count, as Jobs made from a
// CronJob by hand do not.
func (d *decision) busy(except string) string {
	for _, r := range d.open {
		if r.Name != except && !d.closing[r.Name] && !r.Manual {
			return r.Name
		}
	}
	for _, name := range ledger.SortedKeys(d.in.Busy) {
		if name != except && d.in.Busy[name] > 0 && !d.isManual(name) {
			return name
		}
	}
	return ""
}

// schedule commits the most recent due time as a run, or says why not.
func (d *decision) schedule() {
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
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, next.Sub(d.in.Now))
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
	if d.atCap(recent, missed, nextMsg) {
		return
	}
	if d.waitForEarlier(recent) {
		return
	}
	name := Name(d.in.Name, recent)
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
func (d *decision) earliest() time.Time {
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

// atCap reports that MaxOpen runs are open, so that the run due at
// recent does not start, and says so. The time stays uncommitted: the next
// run that starts counts it missed, with the times before it.
func (d *decision) atCap(recent time.Time, missed int64, nextMsg string) bool {
	open := 0
	for _, r := range d.open {
		if !d.closing[r.Name] {
			open++
		}
	}
	if open < MaxOpen {
		return false
	}
	at := recent.UTC().Format(time.RFC3339)
	d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonTooManyActiveRuns,
		fmt.Sprintf("%d runs are active, the most a schedule keeps at once (%d): the run due at %s does not start; "+
			"scheduling resumes when a run finishes; %s", open, MaxOpen, at, nextMsg))
	d.reportMissed(missed+1, fmt.Sprintf("%d scheduled time(s) up to %s not run: %d runs active, the most a schedule keeps at once",
		missed+1, at, open))
	return true
}

// dueNow returns the scheduled time that would start now, if any: not
// suspended, a valid schedule, a time due and within startingDeadlineSeconds.
func (d *decision) dueNow() (time.Time, bool) {
	spec := d.in.Spec
	if ptr.Deref(spec.Suspend, false) {
		return time.Time{}, false
	}
	sched, err := ParseSchedule(ptr.Deref(spec.Schedule, ""), ptr.Deref(spec.TimeZone, ""))
	if err != nil {
		return time.Time{}, false
	}
	recent, _, _, ok := sched.MostRecent(d.earliest(), d.in.Now)
	if !ok {
		return time.Time{}, false
	}
	if dl := spec.StartingDeadlineSeconds; dl != nil && d.in.Now.Sub(recent) > time.Duration(*dl)*time.Second {
		return time.Time{}, false
	}
	return recent, true
}

// waitForEarlier reports, under Forbid and Replace, that an earlier run or a
// pod of one keeps the run due at recent from starting, and says so. Under
// Replace it deletes the earlier runs. The due time is committed only once
// nothing is in its way, so that the run is created at once, within its
// create window; until then it stays uncommitted, as under
// startingDeadlineSeconds, and a later time supersedes it.
func (d *decision) waitForEarlier(recent time.Time) bool {
	policy := d.policy()
	if policy == batchv1alpha1.AllowConcurrent {
		return false
	}
	other := d.busy("")
	if other == "" {
		return false
	}
	msg := fmt.Sprintf("concurrencyPolicy Forbid: run %s is still active; the run due at %s waits for it",
		other, recent.UTC().Format(time.RFC3339))
	if policy == batchv1alpha1.ReplaceConcurrent {
		d.replace(d.open)
		msg = fmt.Sprintf("concurrencyPolicy Replace: run %s is being replaced; the run due at %s starts once it and its pods are gone",
			other, recent.UTC().Format(time.RFC3339))
	}
	d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonWaitingForRun, msg)
	return true
}

// runNow commits the run asked for by hand (Input.RunRequest) unless the
// ledger records it already, whether the parent is suspended or not and
// whatever its concurrency policy, as kubectl create job --from=cronjob/...
// does. The run is created once the commit is observed, as any run. Its
// time is the request's commit, always after every earlier manual run's
// (a second after the latest's when the clock has not passed it), so that
// the latest manual run is also the last recorded (State.LastManual) and
// no live run shares its time with one folded (isClosed).
func (d *decision) runNow() {
	name := d.in.RunRequest
	if name == "" || d.st.HasRun(name) {
		return
	}
	if err := ValidateManualName(name); err != nil {
		d.plan.RequestWaits = fmt.Sprintf("run %s asked for by hand is not started: %v", name, err)
		return
	}
	if run := d.in.Runs[name]; run != nil {
		d.plan.RequestWaits = fmt.Sprintf("run %s asked for by hand is not started: an earlier run of the parent has that name", name)
		return
	}
	open := 0
	for _, r := range d.open {
		if !d.closing[r.Name] {
			open++
		}
	}
	for _, e := range d.plan.Append {
		if e.Type == batchv1alpha1.EntryScheduled {
			open++
		}
	}
	if open >= MaxOpen {
		d.plan.RequestWaits = fmt.Sprintf("run %s asked for by hand waits: %d runs are active, the most a schedule keeps at once",
			name, open)
		return
	}
	at := d.in.Now.Truncate(time.Second)
	if !d.st.LastManualTime.IsZero() && !at.After(d.st.LastManualTime) {
		at = d.st.LastManualTime.Add(time.Second)
	}
	d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryScheduled, Reason: batchv1alpha1.ReasonManual, Run: name,
		ScheduledTime: ptr.To(metav1.NewTime(at))})
}

// ValidateManualName checks the name of a run asked for by hand: a DNS
// label (its pods carry it in labels) that does not end in -<digits>, the
// form of the names of scheduled runs, so that it never takes the name of
// a scheduled time.
func ValidateManualName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a valid run name: %s", name, strings.Join(errs, "; "))
	}
	if k := strings.LastIndexByte(name, '-'); k >= 0 && strings.Trim(name[k+1:], "0123456789") == "" {
		return fmt.Errorf("%q ends in -<digits>, the form of scheduled runs' names", name)
	}
	return nil
}

// deleteRun adds a run to the plan's deletes once.
func (d *decision) deleteRun(name string) {
	if !slices.Contains(d.plan.Delete, name) {
		d.plan.Delete = append(d.plan.Delete, name)
	}
}

// reportMissed sets MissedRuns: how many times were missed and up to when.
func (d *decision) reportMissed(n int64, msg string) {
	reason := batchv1alpha1.ReasonMissedSchedule
	if n > MissedStall {
		reason = batchv1alpha1.ReasonTooManyMissedTimes
	}
	d.setCond(batchv1alpha1.ConditionMissedRuns, metav1.ConditionTrue, reason, msg)
}

// create lists the open runs to create now. A run is created only from the
// observed ledger (I8), only within its create window (ledger.Fence), and not
// again by the process that created or saw it; under Forbid and Replace only once
// no earlier run is open or has a pod left, and Replace deletes the earlier
// runs. An open run not observed is due for a live read once no create of
// it can land any more.
func (d *decision) create() {
	open := d.open
	grace := d.fence.LostGrace()
	for k, r := range open {
		if d.in.Runs[r.Name] != nil || d.closing[r.Name] {
			continue
		}
		// Unobserved, it is read live once its grace has passed; one whose
		// grace passed while this decision's live reads of other runs took
		// their time was not read: the next decision, at once, reads it.
		due := r.Time.Add(grace).Sub(d.in.Now)
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, max(due, time.Millisecond))
		if d.in.Seen[r.Name] != "" || d.in.Issued[r.Name] || !d.fence.MayCreate(r.Time, d.in.Now) {
			continue // it existed: removed by someone, or the cache lags
		}
		if !d.heldBack(r, open[:k]) {
			d.plan.Create = append(d.plan.Create, r)
		}
	}
}

// heldBack reports, under Forbid and Replace, that an earlier run or a pod of
// one keeps the scheduled run r from being created, and says so; under
// Replace it deletes the runs before it. A run asked for by hand is never
// held back.
func (d *decision) heldBack(r Ref, before []Ref) bool {
	if d.policy() == batchv1alpha1.AllowConcurrent || r.Manual {
		return false
	}
	if d.policy() == batchv1alpha1.ReplaceConcurrent {
		d.replace(before)
	}
	other := d.busy(r.Name)
	if other != "" {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonWaitingForRun,
			fmt.Sprintf("concurrencyPolicy %s: run %s waits until run %s and its pods are gone", d.policy(), r.Name, other))
	}
	return other != ""
}

// replace deletes the scheduled runs among these that exist and are not
// being deleted or closed: Replace never deletes a run asked for by hand.
func (d *decision) replace(runs []Ref) {
	for _, r := range runs {
		if run := d.in.Runs[r.Name]; run != nil && run.DeletionTimestamp == nil && !d.closing[r.Name] && !r.Manual {
			d.deleteRun(r.Name)
		}
	}
}

func (d *decision) setCond(t string, s metav1.ConditionStatus, reason, msg string) {
	ledger.SetCondition(&d.status.Conditions, t, s, reason, msg, d.in.Now)
}

// writeStatus derives the parent's status from the ledger and folds it if long.
func (d *decision) writeStatus() error {
	l := ledger.Append(&d.in.Status.Ledger, d.plan.Append)
	if len(l.Entries) > FoldAbove {
		// A closed run stays listed while a create of it may still land, so
		// that its finalizer is held until then (fenceClosed).
		grace := d.fence.LostGrace()
		var err error
		if l, err = fold(&l, KeepAfterFold, func(r Ref) bool { return d.in.Now.Before(r.Time.Add(grace)) }); err != nil {
			return err
		}
	}
	st, err := Replay(&l)
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
	for _, r := range Sorted(st.Open) {
		ref := corev1.ObjectReference{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: r.Name}
		if run := d.in.Runs[r.Name]; run != nil {
			ref.Namespace, ref.UID = run.Namespace, run.UID
		} else if uid := d.runUID(r.Name); uid != "" {
			// Not observed now: the UID once learned stays known.
			ref.Namespace, ref.UID = d.in.Namespace, uid
		}
		s.ActiveRuns = append(s.ActiveRuns, ref)
	}
	s.MissedRuns = st.Missed
	ledger.MarkLedgerValid(&s.Conditions, d.in.Now)
	d.plan.Status = *s
	return nil
}
