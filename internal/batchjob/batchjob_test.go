package batchjob

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func managedJob() *batchv1.Job {
	labels := map[string]string{"batch.kubernetes.io/controller-uid": "u1", "batch.kubernetes.io/job-name": "j", "app": "a"}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "u1"},
		Spec: batchv1.JobSpec{
			ManagedBy:               ptr.To(batchv1alpha1.ControllerName),
			Selector:                &metav1.LabelSelector{MatchLabels: map[string]string{"batch.kubernetes.io/controller-uid": "u1"}},
			ManualSelector:          ptr.To(false),
			Completions:             ptr.To[int32](2),
			Parallelism:             ptr.To[int32](2),
			TTLSecondsAfterFinished: ptr.To[int32](60),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "i"}}}},
		},
	}
}

func TestLedgerSpec(t *testing.T) {
	job := managedJob()
	job.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed) // the API server's default
	spec, notes, err := LedgerSpec(job)
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(spec.PodReplacementPolicy, "") != batchv1.Failed || len(notes) != 1 || !strings.Contains(notes[0], "podReplacementPolicy") {
		t.Errorf("podReplacementPolicy %v, notes %q: want Failed, and a note saying so", spec.PodReplacementPolicy, notes)
	}
	if spec.ManagedBy != nil || spec.TTLSecondsAfterFinished != nil || *spec.Completions != 2 ||
		spec.Template.Labels["batch.kubernetes.io/controller-uid"] != "u1" {
		t.Errorf("ledger spec %+v", spec)
	}
	if job.Spec.Selector == nil || job.Spec.TTLSecondsAfterFinished == nil {
		t.Error("LedgerSpec changed the Job")
	}
	job.Spec.ManualSelector = ptr.To(true)
	if _, _, err := LedgerSpec(job); err == nil || !strings.Contains(err.Error(), "spec.manualSelector") {
		t.Errorf("a manual selector: %v", err)
	}
}

func cond(t, reason string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: reason + "!", LastTransitionTime: metav1.NewTime(at)}
}

func TestStatus(t *testing.T) {
	t0 := time.Unix(1000, 0).UTC()
	now := metav1.NewTime(t0.Add(time.Hour))
	start, end := metav1.NewTime(t0), metav1.NewTime(t0.Add(time.Minute))
	job := managedJob()
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1alpha1.JobConditionRefused, Status: corev1.ConditionTrue, Reason: "NameTaken"}}
	ledger := &batchv1alpha1.SafeJobStatus{StartTime: &start, Active: 1, Ready: 1, Terminating: ptr.To[int32](1), Succeeded: 2,
		Conditions: []metav1.Condition{cond(batchv1alpha1.ConditionLedgerValid, "Valid", t0),
			cond(batchv1alpha1.ConditionSuccessCriteriaMet, "CompletionsReached", t0.Add(time.Minute)),
			cond(batchv1alpha1.ConditionComplete, "CompletionsReached", t0.Add(time.Minute))},
		CompletionTime: &end}
	// Pods still end: success is met, the Job is not Complete yet.
	got := Status(job, ledger, now)
	want := batchv1.JobStatus{StartTime: &start, Active: 1, Ready: ptr.To[int32](1), Terminating: ptr.To[int32](1), Succeeded: 2,
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
		Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached",
			Message: "CompletionsReached!", LastProbeTime: end, LastTransitionTime: end}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("with pods ending (-want,+got):\n%s", diff)
	}
	// They have ended: Complete, after SuccessCriteriaMet, which keeps its
	// times; the completion time comes with it.
	job.Status = got
	job.Status.Conditions[0].LastProbeTime = metav1.NewTime(t0.Add(2 * time.Minute))
	ledger.Active, ledger.Ready, ledger.Terminating = 0, 0, ptr.To[int32](0)
	got = Status(job, ledger, now)
	want.Active, want.Ready, want.Terminating, want.CompletionTime = 0, ptr.To[int32](0), ptr.To[int32](0), &end
	want.Conditions[0].LastProbeTime = metav1.NewTime(t0.Add(2 * time.Minute))
	want.Conditions = append(want.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue,
		Reason: "CompletionsReached", Message: "CompletionsReached!", LastProbeTime: end, LastTransitionTime: end})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("settled (-want,+got):\n%s", diff)
	}
}

func TestRefusedAndUnstarted(t *testing.T) {
	now := metav1.NewTime(time.Unix(2000, 0))
	job := managedJob()
	st := Refused(job, "NameTaken", "a SafeJob named j is not this Job's", now)
	if len(st.Conditions) != 1 || st.Conditions[0].Type != batchv1alpha1.JobConditionRefused || st.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("refused: %+v", st.Conditions)
	}
	job.Status = st
	later := metav1.NewTime(now.Add(time.Minute))
	if again := Refused(job, "NameTaken", "a SafeJob named j is not this Job's", later); !again.Conditions[0].LastTransitionTime.Equal(&now) {
		t.Errorf("refused again: the condition's times moved: %+v", again.Conditions)
	}
	job.Spec.Suspend = ptr.To(true)
	st = Unstarted(job, now)
	if len(st.Conditions) != 2 || st.Conditions[0].Type != batchv1.JobSuspended || st.Conditions[1].Type != batchv1alpha1.JobConditionRefused {
		t.Errorf("unstarted: %+v", st.Conditions)
	}
}

// TestStatusResumed: a Job created suspended, then resumed, holds Suspended
// False (JobResumed) before its later conditions, in batch/v1's order, and
// keeps that order once it completes.
func TestStatusResumed(t *testing.T) {
	t0 := time.Unix(1000, 0).UTC()
	job := managedJob()
	job.Spec.Suspend = ptr.To(true)
	job.Status = Unstarted(job, metav1.NewTime(t0))
	job.Spec.Suspend = ptr.To(false)
	start := metav1.NewTime(t0.Add(time.Minute))
	ledger := &batchv1alpha1.SafeJobStatus{StartTime: &start, Active: 2, Terminating: ptr.To[int32](0)}
	resumedAt := metav1.NewTime(t0.Add(time.Minute))
	job.Status = Status(job, ledger, resumedAt)
	if c := JobCondition(job.Status.Conditions, batchv1.JobSuspended); c == nil || c.Status != corev1.ConditionFalse ||
		c.Reason != batchv1alpha1.ReasonResumed || c.Message != "Job resumed" || !c.LastTransitionTime.Equal(&resumedAt) {
		t.Fatalf("resumed: %+v", job.Status.Conditions)
	}
	ledger.Active, ledger.Succeeded = 0, 2
	ledger.Conditions = []metav1.Condition{cond(batchv1alpha1.ConditionSuccessCriteriaMet, "CompletionsReached", t0.Add(2*time.Minute)),
		cond(batchv1alpha1.ConditionComplete, "CompletionsReached", t0.Add(2*time.Minute))}
	done := Status(job, ledger, metav1.NewTime(t0.Add(3*time.Minute)))
	var order []batchv1.JobConditionType
	for _, c := range done.Conditions {
		order = append(order, c.Type)
	}
	if want := []batchv1.JobConditionType{batchv1.JobSuspended, batchv1.JobSuccessCriteriaMet, batchv1.JobComplete}; !slices.Equal(order, want) {
		t.Errorf("conditions of the completed Job: %v, want %v", order, want)
	}
	if c := JobCondition(done.Conditions, batchv1.JobSuspended); !c.LastTransitionTime.Equal(&resumedAt) || c.Status != corev1.ConditionFalse {
		t.Errorf("Suspended changed as the Job completed: %+v", c)
	}
}

func TestEvents(t *testing.T) {
	at := metav1.NewTime(time.Unix(1000, 0))
	status := func(conds ...batchv1.JobCondition) *batchv1.JobStatus {
		return &batchv1.JobStatus{Conditions: conds}
	}
	c := func(t batchv1.JobConditionType, s corev1.ConditionStatus, reason, msg string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: at}
	}
	suspended := c(batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended")
	resumed := c(batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed")
	complete := c(batchv1.JobComplete, corev1.ConditionTrue, "CompletionsReached", "Reached expected number of succeeded pods")
	failed := c(batchv1.JobFailed, corev1.ConditionTrue, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
	for _, tc := range []struct {
		name     string
		old, new *batchv1.JobStatus
		want     []Event
	}{
		{"created suspended", status(), status(suspended), []Event{{"Normal", "Suspended", "Job suspended"}}},
		{"resumed", status(suspended), status(resumed), []Event{{"Normal", "Resumed", "Job resumed"}}},
		{"suspended again", status(resumed), status(suspended), []Event{{"Normal", "Suspended", "Job suspended"}}},
		{"completed", status(resumed), status(resumed, complete), []Event{{"Normal", "Completed", "Job completed"}}},
		{"failed", status(), status(failed), []Event{{"Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit"}}},
		{"unchanged", status(suspended, complete), status(suspended, complete), nil},
		{"counts only", status(), &batchv1.JobStatus{Active: 3}, nil},
	} {
		if diff := cmp.Diff(tc.want, Events(tc.old, tc.new)); diff != "" {
			t.Errorf("%s (-want,+got):\n%s", tc.name, diff)
		}
	}
}
