package runs

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

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
	open := d.openCount()
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
	requested := d.in.Now.Truncate(time.Second)
	if !d.st.LastManualTime.IsZero() && !requested.After(d.st.LastManualTime) {
		requested = d.st.LastManualTime.Add(time.Second)
	}
	d.appendEntry(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryScheduled, Reason: batchv1alpha1.ReasonManual, Run: name,
		ScheduledTime: ptr.To(metav1.NewTime(requested))})
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
