package testutil

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// A report of stuck jobs names what each incomplete job waits on: a SafeJob's
// open launches and the pods that exist for them, a Job's counts; finished
// jobs are left out.
func TestStallDescribesUnfinishedJobs(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	complete := []metav1.Condition{{Type: batchv1alpha1.ConditionComplete, Status: metav1.ConditionTrue}}
	launched := func(seq int64, index int32) batchv1alpha1.LedgerEntry {
		return batchv1alpha1.LedgerEntry{Seq: seq, Type: batchv1alpha1.EntryLaunched, Pod: jobs.PodName("w1-2", index, 0),
			Index: index, Time: metav1.NewTime(at)}
	}
	waiting := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "w1-2", UID: "u2"},
		Status: batchv1alpha1.SafeJobStatus{Active: 1, Ledger: batchv1alpha1.Ledger{Seq: 2,
			Entries: []batchv1alpha1.LedgerEntry{launched(1, 0), launched(2, 1)}}}}
	done := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "w1-1", UID: "u1"},
		Status: batchv1alpha1.SafeJobStatus{Conditions: complete}}
	if _, ok := safeJobStall(done); ok {
		t.Errorf("a Complete SafeJob is reported unfinished")
	}
	sj, ok := safeJobStall(waiting)
	if !ok {
		t.Fatalf("a SafeJob with open launches is not reported")
	}
	job, ok := jobStall(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "w1-3", UID: "u3"},
		Status: batchv1.JobStatus{Active: 1, UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"p"}}}})
	if !ok {
		t.Fatalf("a Job without Complete is not reported")
	}
	if _, ok := jobStall(&batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}}); ok {
		t.Errorf("a Complete Job is reported unfinished")
	}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: jobs.PodName("w1-2", 0, 0), Finalizers: []string{batchv1alpha1.LedgerFinalizer}},
		Spec: corev1.PodSpec{NodeName: "kwok-0"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	got := describeStall(7, []stalledJob{sj, job}, map[string][]corev1.Pod{"u2": {pod}})
	for _, want := range []string{
		"7 not Complete, the first 2",
		"w1-2: conditions [], active 1, succeeded 0, ledger seq 2, open [w1-2-0-0 at 03:04:05 w1-2-1-0 at 03:04:05]",
		`w1-2-0-0 Pending node="kwok-0" finalizers=[` + batchv1alpha1.LedgerFinalizer + `]`,
		"w1-3: conditions [], active 1, succeeded 0, uncounted 1; pods: none",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stall report lacks %q:\n%s", want, got)
		}
	}
	if got := describeStall(0, nil, nil); got != "every job is Complete by now" {
		t.Errorf("every job Complete: %q", got)
	}
}
