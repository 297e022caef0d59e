package plugin

import (
	"fmt"
	"io"
	"slices"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// RunsView is what `kubectl safejob runs -o json` prints for a scheduled
// SafeJob; its fields are stable.
type RunsView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Schedule  string `json:"schedule"`
	// FoldedRuns counts the runs folded into the checkpoint (not listed).
	FoldedRuns int64 `json:"foldedRuns"`
	// Runs are the listed runs, oldest first.
	Runs []RunView `json:"runs"`
}

// RunView is one run.
type RunView struct {
	Name string `json:"name"`
	// Trigger is Schedule, or Manual for a run asked for by hand
	// (kubectl safejob run-now), whose scheduledTime is when it was asked for.
	Trigger       string    `json:"trigger"`
	ScheduledTime time.Time `json:"scheduledTime"`
	// MissedBefore counts the scheduled times not run just before this one.
	MissedBefore int64 `json:"missedBefore,omitempty"`
	// Result is Running, or the recorded outcome: Succeeded, Failed, Lost
	// or Evicted.
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
	// Duration is from the run's start to its completion, when both are known.
	Duration string `json:"duration,omitempty"`
}

// Runs builds the view of a scheduled SafeJob's runs from its ledger and
// the runs it controls.
func Runs(parent *batchv1alpha1.SafeJob, children []batchv1alpha1.SafeJob) (*RunsView, error) {
	if parent.Spec.Schedule == nil {
		return nil, fmt.Errorf("SafeJob %s/%s has no schedule: it has no runs", parent.Namespace, parent.Name)
	}
	v := &RunsView{Namespace: parent.Namespace, Name: parent.Name, Schedule: *parent.Spec.Schedule, Runs: []RunView{}}
	if cp := parent.Status.Ledger.Checkpoint; cp != nil {
		v.FoldedRuns = cp.Runs
	}
	byName := map[string]*batchv1alpha1.SafeJob{}
	for k := range children {
		if batchv1alpha1.IsRunOf(&children[k], parent) {
			byName[children[k].Name] = &children[k]
		}
	}
	outcomes := map[string]batchv1alpha1.LedgerEntry{}
	for _, e := range parent.Status.Ledger.Entries {
		if e.Type != batchv1alpha1.EntryScheduled {
			outcomes[e.Run] = e
		}
	}
	for _, e := range parent.Status.Ledger.Entries {
		if e.Type != batchv1alpha1.EntryScheduled || e.ScheduledTime == nil {
			continue
		}
		r := RunView{Name: e.Run, Trigger: "Schedule", ScheduledTime: e.ScheduledTime.UTC(), MissedBefore: e.Missed, Result: "Running"}
		if e.Reason == batchv1alpha1.ReasonManual {
			r.Trigger = batchv1alpha1.ReasonManual
		}
		if o, ok := outcomes[e.Run]; ok {
			r.Result, r.Reason = string(o.Type), o.Reason
		}
		if child := byName[e.Run]; child != nil && child.Status.StartTime != nil && child.Status.CompletionTime != nil {
			r.Duration = child.Status.CompletionTime.Sub(child.Status.StartTime.Time).String()
		}
		v.Runs = append(v.Runs, r)
	}
	slices.SortStableFunc(v.Runs, func(a, b RunView) int { return a.ScheduledTime.Compare(b.ScheduledTime) })
	return v, nil
}

// PrintRuns writes the runs as a table, after a line about the schedule
// unless o.NoHeaders.
func PrintRuns(w io.Writer, v *RunsView, o TableOptions) error {
	if !o.NoHeaders {
		out := &errWriter{w: w}
		out.printf("SafeJob %s/%s, schedule %q; %d earlier runs folded into the checkpoint\n", v.Namespace, v.Name, v.Schedule, v.FoldedRuns)
		if out.err != nil {
			return out.err
		}
	}
	return writeTable(w, o, "RUN\tTRIGGER\tSCHEDULED\tRESULT\tREASON\tDURATION\tMISSED BEFORE", func(row func(string, ...any)) {
		for _, r := range v.Runs {
			row("%s\t%s\t%s\t%s\t%s\t%s\t%d", r.Name, r.Trigger, r.ScheduledTime.Format(time.RFC3339), r.Result, r.Reason,
				r.Duration, r.MissedBefore)
		}
	})
}
