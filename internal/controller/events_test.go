package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

func TestRecordEvents(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &SafeJobReconciler{Recorder: rec}
	old := &batchv1alpha1.SafeJob{}
	updated := &batchv1alpha1.SafeJob{Status: batchv1alpha1.SafeJobStatus{Conditions: []metav1.Condition{
		{Type: batchv1alpha1.ConditionFailed, Status: metav1.ConditionTrue, Reason: batchv1alpha1.ReasonBackoffLimitExceeded,
			Message: "Job has reached the specified backoff limit"}}}}
	r.recordEvents(updated, old, &jobs.Plan{Append: []batchv1alpha1.LedgerEntry{
		{Type: batchv1alpha1.EntryFailed, Pod: "a-0-0", Reason: batchv1alpha1.FailReasonCounted},
		{Type: batchv1alpha1.EntryFailed, Pod: "a-0-1", Reason: batchv1alpha1.FailReasonIgnored},
		{Type: batchv1alpha1.EntryLost, Pod: "a-0-2"},
	}})
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning PodFailed Pod a-0-0 failed (Counted)",
		"Warning PodLost Pod a-0-2 disappeared before its outcome was seen",
		"Warning BackoffLimitExceeded Job has reached the specified backoff limit",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want,+got):\n%s", diff)
	}
}
