package runs

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// schedule commits the most recent due time as a run, or says why not.
func (d *decision) schedule() {
	if ptr.Deref(d.in.Spec.Suspend, false) {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonScheduleSuspended,
			"spec.suspend is true: no run starts")
		return
	}
	sched, err := d.parseSchedule()
	if err != nil {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionFalse, batchv1alpha1.ReasonInvalidSchedule, err.Error())
		return
	}
	recent, missed, next, ok := sched.MostRecent(d.earliest(), d.in.Now)
	nextMsg := "no scheduled time is left"
	if !next.IsZero() {
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, next.Sub(d.in.Now))
		nextMsg = "next run at " + next.UTC().Format(time.RFC3339)
	}
	if !ok {
		d.setCond(batchv1alpha1.ConditionScheduling, metav1.ConditionTrue, batchv1alpha1.ReasonScheduled, nextMsg)
		return
	}
	if d.pastDeadline(recent) {
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
	if d.commitWaits(recent) {
		return
	}
	d.commitDue(recent, missed, nextMsg)
}

// commitDue appends the Scheduled entry of the run due at recent, with the
// times missed before it, and reports both.
func (d *decision) commitDue(recent time.Time, missed int64, nextMsg string) {
	name := Name(d.in.Name, recent)
	d.appendEntry(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryScheduled, Run: name,
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

// parseSchedule parses the parent's spec.schedule in its spec.timeZone.
func (d *decision) parseSchedule() (*Schedule, error) {
	return ParseSchedule(ptr.Deref(d.in.Spec.Schedule, ""), ptr.Deref(d.in.Spec.TimeZone, ""))
}

// pastDeadline reports whether the time due at recent is too late to start:
// longer ago than spec.startingDeadlineSeconds, when that is set.
func (d *decision) pastDeadline(recent time.Time) bool {
	deadline := d.in.Spec.StartingDeadlineSeconds
	return deadline != nil && d.in.Now.Sub(recent) > time.Duration(*deadline)*time.Second
}

// earliest is the time after which scheduled times are due: the last run's,
// or when the schedule took effect. An edited schedule applies from its
// first time after the edit was seen: no time that passed before the edit
// runs by surprise.
func (d *decision) earliest() time.Time {
	spec := d.in.Spec
	observed := d.status.ObservedSchedule
	if observed == nil || observed.Schedule != *spec.Schedule || observed.TimeZone != ptr.Deref(spec.TimeZone, "") {
		since := d.in.Created
		if observed != nil {
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

// dueNow returns the scheduled time that would start now, if any: not
// suspended, a valid schedule, a time due and within startingDeadlineSeconds.
func (d *decision) dueNow() (time.Time, bool) {
	if ptr.Deref(d.in.Spec.Suspend, false) {
		return time.Time{}, false
	}
	sched, err := d.parseSchedule()
	if err != nil {
		return time.Time{}, false
	}
	recent, _, _, ok := sched.MostRecent(d.earliest(), d.in.Now)
	if !ok || d.pastDeadline(recent) {
		return time.Time{}, false
	}
	return recent, true
}

// openCount is how many observed open runs stay open after this plan's
// outcomes.
func (d *decision) openCount() int {
	open := 0
	for _, r := range d.open {
		if !d.closing[r.Name] {
			open++
		}
	}
	return open
}

// atCap reports that MaxOpen runs are open, so that the run due at
// recent does not start, and says so. The time stays uncommitted: the next
// run that starts counts it missed, with the times before it.
func (d *decision) atCap(recent time.Time, missed int64, nextMsg string) bool {
	open := d.openCount()
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

// reportMissed sets MissedRuns: how many times were missed and up to when.
func (d *decision) reportMissed(n int64, msg string) {
	reason := batchv1alpha1.ReasonMissedSchedule
	if n > MissedStall {
		reason = batchv1alpha1.ReasonTooManyMissedTimes
	}
	d.setCond(batchv1alpha1.ConditionMissedRuns, metav1.ConditionTrue, reason, msg)
}
