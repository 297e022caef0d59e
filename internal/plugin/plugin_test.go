package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/runs"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// entry is an entry of the first attempt of index i.
func entry(seq int64, typ batchv1alpha1.EntryType, i int32, reason string, at time.Time) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: typ, Index: i, Pod: fmt.Sprintf("sj-%d-0", i), Reason: reason, Time: metav1.NewTime(at)}
}

func failingSafeJob() *batchv1alpha1.SafeJob {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns"},
		Spec: batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](1)}}
	sj.Status.Ledger = batchv1alpha1.Ledger{Seq: 4, Entries: []batchv1alpha1.LedgerEntry{
		entry(1, batchv1alpha1.EntryLaunched, 0, "", t0),
		entry(2, batchv1alpha1.EntrySucceeded, 0, "", t0.Add(time.Second)),
		entry(3, batchv1alpha1.EntryLaunched, 1, "", t0.Add(time.Second)),
		entry(4, batchv1alpha1.EntryFailed, 1, batchv1alpha1.FailReasonCounted, t0.Add(2*time.Second)),
	}}
	return sj
}

func TestLedger(t *testing.T) {
	v, err := Ledger(failingSafeJob())
	if err != nil {
		t.Fatal(err)
	}
	if v.Totals == nil || v.Totals.Succeeded != 1 || v.Totals.Failed != 1 || v.Totals.Attempts != 2 || v.Totals.Open != 0 || len(v.Entries) != 4 {
		t.Fatalf("view %+v", v)
	}
	var b bytes.Buffer
	if err := PrintLedger(&b, v, TableOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ledger seq 4", "1 succeeded, 1 failed", "SEQ", "Failed", "Counted", "sj-1-0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "SCHEDULED") {
		t.Errorf("the table has the wide columns:\n%s", b.String())
	}
	b.Reset()
	if err := PrintLedger(&b, v, TableOptions{Wide: true, NoHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != len(v.Entries) || !strings.HasPrefix(lines[0], "1 ") {
		t.Errorf("--no-headers -o wide: want only the %d entries' rows:\n%s", len(v.Entries), b.String())
	}
}

// TestLedgerListsEveryLaunch: launches the ledger lists as one entry
// with a count are shown one row per pod, each with its own seq.
func TestLedgerListsEveryLaunch(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns"},
		Spec: batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](3), Parallelism: ptr.To[int32](3)}}
	three := entry(1, batchv1alpha1.EntryLaunched, 0, "", t0)
	three.Count = 3
	sj.Status.Ledger = batchv1alpha1.Ledger{Seq: 4, Entries: []batchv1alpha1.LedgerEntry{three,
		entry(4, batchv1alpha1.EntrySucceeded, 1, "", t0.Add(time.Second))}}
	v, err := Ledger(sj)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, e := range v.Entries {
		rows = append(rows, fmt.Sprintf("%d %s %s", e.Seq, e.Type, e.Pod))
	}
	want := []string{"1 Launched sj-0-0", "2 Launched sj-1-0", "3 Launched sj-2-0", "4 Succeeded sj-1-0"}
	if diff := cmp.Diff(want, rows); diff != "" || v.Totals.Open != 2 || v.Totals.Succeeded != 1 {
		t.Errorf("rows (-want +got):\n%s\ntotals %+v", diff, v.Totals)
	}
}

func TestWhy(t *testing.T) {
	sj := failingSafeJob()
	if v := Why(sj, t0.Add(5*time.Second)); v.State != StateWaiting || v.Reasons[0].Kind != "Backoff" ||
		!strings.Contains(v.Reasons[0].Message, "7s left") {
		t.Errorf("within the backoff delay: %+v", v)
	}
	if v := Why(sj, t0.Add(time.Minute)); v.State != StateProgressing {
		t.Errorf("after the backoff delay: %+v", v)
	}
	sj.Spec.Suspend = ptr.To(true)
	sj.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.ConditionPodCreateFailure, Status: metav1.ConditionTrue,
		Reason: "FailedCreate", Message: "pods is forbidden: exceeded quota"}}
	v := Why(sj, t0.Add(time.Minute))
	if v.State != StateWaiting || len(v.Reasons) != 2 || v.Reasons[0].Kind != "Suspended" || v.Reasons[1].Kind != "CreatesRefused" {
		t.Errorf("suspended and refused: %+v", v)
	}
	sj.Spec.Suspend = nil
	sj.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse,
		Reason: "DeactivatedDueToAdmissionCheck", Message: "The workload is deactivated due to Admission check(s): mk, were rejected"}}
	if v := Why(sj, t0.Add(time.Minute)); v.State != StateWaiting || len(v.Reasons) != 1 || v.Reasons[0].Kind != "Deactivated" ||
		!strings.Contains(v.Reasons[0].Message, "mk, were rejected") {
		t.Errorf("deactivated by Kueue: %+v", v)
	}
	sj.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.ConditionComplete, Status: metav1.ConditionTrue, Reason: "CompletionsReached"}}
	if v := Why(sj, t0); v.State != StateFinished {
		t.Errorf("complete: %+v", v)
	}
}

// TestWhyNotObserved: a SafeJob no operator has written a status for waits,
// and says so first, whatever its spec; a status the operator wrote that
// holds only a ledger format is observed.
func TestWhyNotObserved(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "ns"},
		Spec: batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](1)}}
	v := Why(sj, t0)
	if v.State != StateWaiting || len(v.Reasons) != 1 || v.Reasons[0].Kind != "NotObserved" || !strings.Contains(v.Reasons[0].Message, "operator") {
		t.Errorf("an empty status: %+v", v)
	}
	sj.Spec.Suspend = ptr.To(true)
	if v := Why(sj, t0); v.State != StateWaiting || len(v.Reasons) != 2 || v.Reasons[0].Kind != "NotObserved" || v.Reasons[1].Kind != "Suspended" {
		t.Errorf("an empty status, suspended: %+v", v)
	}
	sj.Spec.Suspend = nil
	sj.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
	if v := Why(sj, t0); v.State != StateWaiting || v.Reasons[0].Kind != "NotObserved" || !strings.Contains(v.Reasons[0].Message, "kueue.x-k8s.io/multikueue") {
		t.Errorf("an empty status, managed by another controller: %+v", v)
	}
	sj.Spec.ManagedBy = nil
	sj.Status.Ledger.Format = batchv1alpha1.LedgerFormat
	if v := Why(sj, t0); len(v.Reasons) == 0 || v.Reasons[0].Kind == "NotObserved" {
		t.Errorf("a status the operator wrote: %+v", v)
	}
}

func TestConvert(t *testing.T) {
	in := `apiVersion: batch/v1
kind: Job
metadata:
  name: pi
  labels: {app: pi}
spec:
  completions: 3
  parallelism: 2
  completionMode: Indexed
  backoffLimitPerIndex: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: pi, image: perl}]
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
spec:
  schedule: "0 3 * * *"
  timeZone: Europe/Berlin
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 2
  jobTemplate:
    metadata:
      labels: {team: data}
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: etl, image: etl}]
`
	out, err := Convert(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("%d SafeJobs", len(out))
	}
	if j := out[0]; j.Name != "pi" || *j.Spec.Completions != 3 || j.Spec.CompletionMode != batchv1alpha1.IndexedCompletion ||
		*j.Spec.BackoffLimitPerIndex != 1 || j.Labels["app"] != "pi" || j.Kind != "SafeJob" {
		t.Errorf("Job converted to %+v", j)
	}
	if c := out[1]; *c.Spec.Schedule != "0 3 * * *" || *c.Spec.TimeZone != "Europe/Berlin" || c.Spec.ConcurrencyPolicy != "Forbid" ||
		*c.Spec.SuccessfulRunsHistoryLimit != 2 || c.Labels["team"] != "data" {
		t.Errorf("CronJob converted to %+v", c)
	}
}

// TestConvertRefuses: a field a SafeJob lacks, a misspelt one, another kind.
func TestConvertRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"selector": {in: "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  manualSelector: true\n  selector: {matchLabels: {a: b}}\n  template: {spec: {containers: [{name: c, image: i}]}}\n",
			want: "document 1: the Job x: spec.selector: a SafeJob has no such field"},
		"misspelt field": {in: "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  paralelism: 2\n",
			want: `unknown field "paralelism"`},
		"another kind": {in: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
			want: "apps/v1 Deployment is not a batch/v1 Job or CronJob"},
	} {
		if _, err := Convert(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
	}
}

func TestRuns(t *testing.T) {
	parent := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "p-uid"},
		Spec: batchv1alpha1.SafeJobSpec{Schedule: ptr.To("@hourly")}}
	at := func(h int) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(time.Duration(h) * time.Hour))) }
	parent.Status.Ledger = batchv1alpha1.Ledger{Seq: 3, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 0, Runs: 5},
		Entries: []batchv1alpha1.LedgerEntry{
			{Seq: 1, Type: batchv1alpha1.EntryScheduled, Run: "p-1", ScheduledTime: at(1), Missed: 2},
			{Seq: 2, Type: batchv1alpha1.EntrySucceeded, Run: "p-1", Reason: "CompletionsReached"},
			{Seq: 3, Type: batchv1alpha1.EntryScheduled, Run: "p-2", ScheduledTime: at(2)},
			{Seq: 4, Type: batchv1alpha1.EntryScheduled, Run: "p-manual-x", ScheduledTime: at(1), Reason: batchv1alpha1.ReasonManual},
		}}
	child := batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{runOwner("p", "p-uid")}}}
	child.Status.StartTime, child.Status.CompletionTime = at(1), ptr.To(metav1.NewTime(at(1).Add(90*time.Second)))
	// A run MultiKueue dispatches names its parent in annotations.
	dispatched := batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-manual-x", Namespace: "ns",
		Annotations: map[string]string{batchv1alpha1.ParentLabel: "p", batchv1alpha1.ParentUIDAnnotation: "p-uid"}},
		Spec: batchv1alpha1.SafeJobSpec{ManagedBy: ptr.To(batchv1alpha1.MultiKueueManagedBy)}}
	dispatched.Status.StartTime, dispatched.Status.CompletionTime = at(1), ptr.To(metav1.NewTime(at(1).Add(time.Minute)))
	// A SafeJob of a run's name that the parent does not control (a
	// stranger's) tells nothing about the run, even one that names the
	// parent in annotations without being dispatched.
	stranger := batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-2", Namespace: "ns",
		Annotations: map[string]string{batchv1alpha1.ParentLabel: "p", batchv1alpha1.ParentUIDAnnotation: "p-uid"}}}
	stranger.Status.StartTime, stranger.Status.CompletionTime = at(2), at(3)
	v, err := Runs(parent, []batchv1alpha1.SafeJob{child, dispatched, stranger})
	if err != nil {
		t.Fatal(err)
	}
	if v.FoldedRuns != 5 || len(v.Runs) != 3 || v.Runs[0].Result != "Succeeded" || v.Runs[0].Duration != "1m30s" ||
		v.Runs[0].MissedBefore != 2 || v.Runs[0].Trigger != "Schedule" || v.Runs[1].Trigger != "Manual" ||
		v.Runs[1].Duration != "1m0s" || v.Runs[2].Result != "Running" || v.Runs[2].Duration != "" {
		t.Errorf("runs %+v", v)
	}
	checkPrintRuns(t, v)
}

// checkPrintRuns: the runs' table, and with --no-headers only its rows.
func checkPrintRuns(t *testing.T, v *RunsView) {
	t.Helper()
	var b bytes.Buffer
	if err := PrintRuns(&b, v, TableOptions{}); err != nil || !strings.Contains(b.String(), "p-1") || !strings.Contains(b.String(), "Running") ||
		!strings.Contains(b.String(), "RUN") {
		t.Errorf("output %v:\n%s", err, b.String())
	}
	b.Reset()
	if err := PrintRuns(&b, v, TableOptions{NoHeaders: true}); err != nil || strings.Count(b.String(), "\n") != len(v.Runs) {
		t.Errorf("--no-headers: want only the %d runs' rows, have %v:\n%s", len(v.Runs), err, b.String())
	}
}

func TestRunsNeedSchedule(t *testing.T) {
	if _, err := Runs(&batchv1alpha1.SafeJob{}, nil); err == nil {
		t.Error("runs of a SafeJob without schedule")
	}
}

func TestTop(t *testing.T) {
	sj := func(ns, name string, succeeded int32) batchv1alpha1.SafeJob {
		s := batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		s.Status.Succeeded = succeeded
		return s
	}
	rows, prev := Top([]batchv1alpha1.SafeJob{sj("y", "b", 1), sj("y", "a", 4), sj("x", "a", 7)}, nil, 0)
	if len(rows) != 3 || rows[0].Namespace != "x" || rows[1].Name != "a" || rows[1].PerSecond != 0 || rows[0].Mode != "NonIndexed" ||
		rows[0].Parallelism != 1 {
		t.Fatalf("first sample %+v", rows)
	}
	// The same name in two namespaces: each is its own SafeJob's rate.
	rows, _ = Top([]batchv1alpha1.SafeJob{sj("y", "a", 10), sj("y", "b", 1), sj("x", "a", 7)}, prev, 2*time.Second)
	if rows[0].PerSecond != 0 || rows[1].PerSecond != 3 || rows[2].PerSecond != 0 || rows[1].State != "Running" {
		t.Errorf("second sample %+v", rows)
	}
	checkPrintTop(t, rows)
}

// checkPrintTop: the table of one namespace, and of all with -o wide.
func checkPrintTop(t *testing.T, rows []TopRow) {
	t.Helper()
	var b bytes.Buffer
	if err := PrintTop(&b, rows, false, TableOptions{}); err != nil || !strings.HasPrefix(b.String(), "NAME ") || !strings.Contains(b.String(), "PER SECOND") ||
		strings.Contains(b.String(), "MODE") {
		t.Errorf("output %v:\n%s", err, b.String())
	}
	b.Reset()
	if err := PrintTop(&b, rows, true, TableOptions{Wide: true}); err != nil || !strings.HasPrefix(b.String(), "NAMESPACE ") ||
		!strings.Contains(b.String(), "PARALLELISM") || !strings.Contains(b.String(), "\nx ") {
		t.Errorf("-A -o wide: %v:\n%s", err, b.String())
	}
}

func TestRunRequest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, parent := range []string{"p", strings.Repeat("long-name", 7)} {
		name := ManualRunName(parent, rng)
		if err := runs.ValidateManualName(name); err != nil {
			t.Errorf("ManualRunName(%q) = %q: %v", parent, name, err)
		}
	}
	parent := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "p-uid"},
		Spec: batchv1alpha1.SafeJobSpec{Schedule: ptr.To("@hourly")}}
	parent.Status.Ledger = batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{{Seq: 1,
		Type: batchv1alpha1.EntryScheduled, Run: "p-manual-a", ScheduledTime: ptr.To(metav1.NewTime(t0)), Reason: batchv1alpha1.ReasonManual}}}
	run := batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-manual-b", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{runOwner("p", "p-uid")}}}
	stranger := batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-manual-c", Namespace: "ns"}}
	children := []batchv1alpha1.SafeJob{run, stranger}
	if err := CheckRunRequest(parent, children, "p-manual-c"); err != nil {
		t.Errorf("a stranger's SafeJob of the name refused the request: %v", err)
	}
	for name, want := range map[string]string{"p-manual-a": "recorded a run", "p-manual-b": "has a run", "p-7": "-<digits>",
		"P": "not a valid run name"} {
		if err := CheckRunRequest(parent, children, name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("request %s: %v, want an error saying %q", name, err, want)
		}
	}
	parent.Annotations = map[string]string{batchv1alpha1.RunNowAnnotation: "p-manual-z"}
	if err := CheckRunRequest(parent, children, "p-manual-c"); err == nil || !strings.Contains(err.Error(), "not started yet") {
		t.Errorf("a request while an earlier one is not recorded: %v", err)
	}
	if s := RunRecorded(parent, "p-manual-a"); s == nil || s.Seq != 1 || !s.RequestedAt.Equal(t0) {
		t.Errorf("recorded run: %+v", s)
	}
	if s := RunRecorded(parent, "p-manual-z"); s != nil {
		t.Errorf("a run not recorded: %+v", s)
	}
	if err := CheckRunRequest(&batchv1alpha1.SafeJob{}, nil, "x"); err == nil || !strings.Contains(err.Error(), "no schedule") {
		t.Errorf("a SafeJob without schedule: %v", err)
	}
}

// TestConvertRoundTrip converts Jobs that set every field of the README's
// field table and requires each field of each Job spec to come back
// unchanged from the SafeJob's spec, but one: the built-in controller's
// managedBy becomes SafeJob's own (unset).
func TestConvertRoundTrip(t *testing.T) {
	raw, err := os.ReadFile("testdata/jobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Convert(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	if len(out) != len(docs) {
		t.Fatalf("%d SafeJobs from %d Jobs", len(out), len(docs))
	}
	table := []string{"parallelism", "completions", "completionMode", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes",
		"podFailurePolicy", "successPolicy", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "managedBy", "podReplacementPolicy",
		"suspend", "template"}
	seen := map[string]bool{}
	for i, doc := range docs {
		var job batchv1.Job
		if err := yaml.UnmarshalStrict([]byte(doc), &job); err != nil {
			t.Fatal(err)
		}
		want, got := jsonFields(t, job.Spec), jsonFields(t, out[i].Spec)
		if ptr.Deref(job.Spec.ManagedBy, "") == batchv1.JobControllerName {
			seen["managedBy"] = true
			if _, ok := got["managedBy"]; ok {
				t.Errorf("%s: managedBy %s, want unset", job.Name, got["managedBy"])
			}
			delete(want, "managedBy")
		}
		for field, v := range want {
			seen[field] = true
			if diff := cmp.Diff(string(v), string(got[field])); diff != "" {
				t.Errorf("%s: spec.%s (-job,+safejob):\n%s", job.Name, field, diff)
			}
		}
		if out[i].Name != job.Name || !maps.Equal(out[i].Labels, job.Labels) {
			t.Errorf("%s: converted as %s with labels %v", job.Name, out[i].Name, out[i].Labels)
		}
	}
	for _, f := range table {
		if !seen[f] {
			t.Errorf("testdata/jobs.yaml sets no %s: the table's fields are not all covered", f)
		}
	}
}

// jsonFields is an object's JSON, field by field.
func jsonFields(t *testing.T, v any) map[string]json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// runOwner is the controller reference a parent puts on its runs.
func runOwner(name string, uid types.UID) metav1.OwnerReference {
	return *metav1.NewControllerRef(&batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}},
		batchv1alpha1.GroupVersion.WithKind("SafeJob"))
}

// TestWhyJob: why of a managed Job answers from its ledger, or says why it
// has none: refused, suspended before it ran, or not seen yet.
func TestWhyJob(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: "ns"},
		Spec: batchv1.JobSpec{ManagedBy: ptr.To(batchv1alpha1.ControllerName)}}
	if v := WhyJob(job, nil, t0); v.State != StateWaiting || v.Reasons[0].Kind != "NotObserved" || v.Name != "report" {
		t.Errorf("not seen yet: %+v", v)
	}
	job.Spec.Suspend = ptr.To(true)
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue}}
	if v := WhyJob(job, nil, t0); v.State != StateWaiting || len(v.Reasons) != 1 || v.Reasons[0].Kind != "Suspended" {
		t.Errorf("suspended before it ran: %+v", v)
	}
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1alpha1.JobConditionRefused,
		Status: corev1.ConditionTrue, Reason: "NameTaken", Message: "SafeJob ns/report exists"})
	if v := WhyJob(job, nil, t0); v.State != StateWaiting || len(v.Reasons) != 1 || v.Reasons[0].Kind != "Refused" ||
		!strings.Contains(v.Reasons[0].Message, "NameTaken") {
		t.Errorf("refused: %+v", v)
	}
	job.Status.Conditions, job.Spec.Suspend = nil, nil
	ledger := failingSafeJob()
	if v := WhyJob(job, ledger, t0.Add(5*time.Second)); v.State != StateWaiting || v.Reasons[0].Kind != "Backoff" || v.Name != "report" {
		t.Errorf("from its ledger: %+v", v)
	}
}
