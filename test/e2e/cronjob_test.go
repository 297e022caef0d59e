package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/cluster"
)

// TestScheduleOutageBesideCronJob runs a CronJob whose jobTemplate names
// SafeJob beside a scheduled SafeJob, both every minute, and stops the
// controller that schedules each (kube-controller-manager, the operator)
// over the same two scheduled times. Each then runs the most recent of
// them, once; the scheduled SafeJob counts the time it did not run
// (status.missedRuns, the MissedRuns condition), where the CronJob says
// nothing of it. It runs for about five minutes, most of them waiting on
// the clock, so only with SAFEJOB_CRONJOB set (make compare-cronjob), to
// the file it names the table docs/managed-jobs.md shows.
func TestScheduleOutageBesideCronJob(t *testing.T) {
	path := os.Getenv("SAFEJOB_CRONJOB")
	if path == "" {
		t.Skip("set SAFEJOB_CRONJOB to a file for the table (make compare-cronjob)")
	}
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	ctx := context.Background()
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "minutely", Namespace: nsManaged},
		Spec: batchv1.CronJobSpec{Schedule: "* * * * *", SuccessfulJobsHistoryLimit: ptr.To[int32](100),
			JobTemplate: batchv1.JobTemplateSpec{Spec: managedJobSpec(1, "1s")}},
	}
	parent := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Name: "minutely", Namespace: nsSafeJob},
		Spec: batchv1alpha1.SafeJobSpec{Schedule: ptr.To("* * * * *"), SuccessfulRunsHistoryLimit: ptr.To[int32](100),
			Template: managedJobSpec(1, "1s").Template},
	}
	for _, obj := range []client.Object{cj, parent} {
		if err := e.cl.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// Tear the schedules down before their runs.
	defer func() {
		for _, obj := range []client.Object{cj, parent} {
			if err := e.cl.Delete(ctx, obj); err != nil {
				t.Errorf("deleting %s: %v", obj.GetName(), err)
			}
		}
	}()
	ran := func() (cron, scheduled []time.Time) {
		return e.cronJobRuns(t, cj), e.scheduledRuns(t, parent)
	}
	waitUntil(t, 150*time.Second, "a first run of each schedule", func() bool {
		cron, scheduled := ran()
		return len(cron) > 0 && len(scheduled) > 0
	})
	down, back, outage := e.scheduleOutage(t)
	waitUntil(t, 2*time.Minute, "each schedule to run again", func() bool {
		cron, scheduled := ran()
		return slices.ContainsFunc(cron, func(at time.Time) bool { return !at.Before(outage[0]) }) &&
			slices.ContainsFunc(scheduled, func(at time.Time) bool { return !at.Before(outage[0]) })
	})
	cron, scheduled := ran()
	got := &batchv1alpha1.SafeJob{}
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(parent), got); err != nil {
		t.Fatal(err)
	}
	gotCJ := &batchv1.CronJob{}
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(cj), gotCJ); err != nil {
		t.Fatal(err)
	}
	cronSaid := e.cronJobMissedEvents(t, gotCJ)
	rows := []string{
		"| controller | scheduled times in the outage | of them run after it | times run more than once | missed times reported |",
		"|---|---|---|---|---|",
		outageRow("CronJob (kube-controller-manager), Jobs managed by SafeJob", outage, cron, cronSaid),
		outageRow("scheduled SafeJob", outage, scheduled, fmt.Sprintf("%d (status.missedRuns; MissedRuns %s)",
			got.Status.MissedRuns, conditionStatus(got, batchv1alpha1.ConditionMissedRuns))),
	}
	t.Logf("outage %s to %s, scheduled times %v:\n%s", down.Format(time.TimeOnly), back.Format(time.TimeOnly), outage, strings.Join(rows, "\n"))
	if err := os.WriteFile(path, []byte(strings.Join(rows, "\n")+"\n"), 0o644); err != nil {
		t.Error(err)
	}
	checkOutageRuns(t, outage, cron, scheduled, got.Status.MissedRuns)
}

// scheduleOutage stops both schedulers (kube-controller-manager and the
// operators) a few seconds after a scheduled time and starts them again once
// the next two have passed; it returns when they stopped, when they came
// back and the scheduled times in between.
func (e *env) scheduleOutage(t *testing.T) (down, back time.Time, outage []time.Time) {
	t.Helper()
	waitUntil(t, time.Minute, "a few seconds past a scheduled time", func() bool { return time.Now().Second() >= 5 })
	startKCM, err := e.c.StopControllerManager()
	if err != nil {
		t.Fatal(err)
	}
	e.stopOperators()
	down = time.Now()
	back = down.Truncate(time.Minute).Add(2*time.Minute + 10*time.Second)
	outage = []time.Time{down.Truncate(time.Minute).Add(time.Minute), down.Truncate(time.Minute).Add(2 * time.Minute)}
	waitUntil(t, 3*time.Minute, "two scheduled times to pass with both controllers down", func() bool { return time.Now().After(back) })
	if err := startKCM(); err != nil {
		t.Fatal(err)
	}
	e.startOperator()
	return down, back, outage
}

// checkOutageRuns checks that neither schedule ran a time twice and that the
// scheduled SafeJob counts each outage time it did not run as missed.
func checkOutageRuns(t *testing.T, outage, cron, scheduled []time.Time, missed int64) {
	t.Helper()
	for what, times := range map[string][]time.Time{"the CronJob": cron, "the scheduled SafeJob": scheduled} {
		if dup := duplicateTimes(times); len(dup) > 0 {
			t.Errorf("%s ran these scheduled times more than once: %v", what, dup)
		}
	}
	notRun := 0
	for _, at := range outage {
		if !slices.ContainsFunc(scheduled, at.Equal) {
			notRun++
		}
	}
	if notRun == 0 || missed < int64(notRun) {
		t.Errorf("the scheduled SafeJob did not run %d of the outage's times and reports %d missed", notRun, missed)
	}
}

// cronJobRuns are the scheduled times of the Jobs the CronJob created.
func (e *env) cronJobRuns(t *testing.T, cj *batchv1.CronJob) []time.Time {
	t.Helper()
	var jobs batchv1.JobList
	if err := e.cl.List(context.Background(), &jobs, client.InNamespace(cj.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, j := range jobs.Items {
		if ref := metav1.GetControllerOf(&j); ref == nil || ref.Kind != "CronJob" || ref.Name != cj.Name {
			continue
		}
		if at, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]); err == nil {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// scheduledRuns are the scheduled times of the runs of a scheduled SafeJob.
func (e *env) scheduledRuns(t *testing.T, parent *batchv1alpha1.SafeJob) []time.Time {
	t.Helper()
	var list batchv1alpha1.SafeJobList
	if err := e.cl.List(context.Background(), &list, client.InNamespace(parent.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for i := range list.Items {
		run := &list.Items[i]
		if ref := metav1.GetControllerOf(run); ref == nil || ref.UID != parent.UID {
			continue
		}
		if at, ok := runs.ScheduledTime(run); ok {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// cronJobMissedEvents is what the CronJob's events say of missed times.
func (e *env) cronJobMissedEvents(t *testing.T, cj *batchv1.CronJob) string {
	t.Helper()
	var events corev1.EventList
	if err := e.cl.List(context.Background(), &events, client.InNamespace(cj.Namespace)); err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, ev := range events.Items {
		if ev.InvolvedObject.UID == cj.UID && (ev.Reason == "MissSchedule" || ev.Reason == "TooManyMissedTimes") {
			said = append(said, ev.Reason)
		}
	}
	if len(said) == 0 {
		return "none (no status field, condition or event)"
	}
	return strings.Join(said, ", ")
}

// outageRow is one row of the outage table.
func outageRow(controller string, outage, ran []time.Time, reported string) string {
	runAfter := 0
	for _, at := range outage {
		if slices.ContainsFunc(ran, at.Equal) {
			runAfter++
		}
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %s |", controller, len(outage), runAfter, len(duplicateTimes(ran)), reported)
}

// duplicateTimes are the times that occur more than once in sorted.
func duplicateTimes(sorted []time.Time) []time.Time {
	var dup []time.Time
	for k := 1; k < len(sorted); k++ {
		if sorted[k].Equal(sorted[k-1]) && (len(dup) == 0 || !dup[len(dup)-1].Equal(sorted[k])) {
			dup = append(dup, sorted[k])
		}
	}
	return dup
}

// conditionStatus is the status of a SafeJob's condition, "absent" if none.
func conditionStatus(sj *batchv1alpha1.SafeJob, t string) string {
	if c := meta.FindStatusCondition(sj.Status.Conditions, t); c != nil {
		return string(c.Status) + " " + c.Reason
	}
	return "absent"
}
