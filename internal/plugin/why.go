package plugin

import (
	"fmt"
	"io"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// Verdict is the answer of `kubectl safejob why`; its fields are stable.
type Verdict struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// State is Progressing, Finished or Waiting.
	State string `json:"state"`
	// Reasons say why, most important first.
	Reasons []Reason `json:"reasons"`
}

// Reason is one cause.
type Reason struct {
	// Kind names the cause: NotObserved, Refused (a Job SafeJob does not
	// run), Finished, LedgerInvalid, Suspended,
	// WaitingForAdmission, CreatesRefused, Scheduling, Backoff, Deadline,
	// Running, Starting.
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// The states of a Verdict.
const (
	StateProgressing = "Progressing"
	StateFinished    = "Finished"
	StateWaiting     = "Waiting"
)

// deadlineClose is how near activeDeadlineSeconds must be to be mentioned.
const deadlineClose = time.Minute

// Why tells whether a SafeJob progresses and why not, from its status, as
// the controller decides it. The backoff delay is computed with batch/v1's
// (10s doubling), the operator's default.
func Why(sj *batchv1alpha1.SafeJob, now time.Time) *Verdict {
	v := &Verdict{Namespace: sj.Namespace, Name: sj.Name, State: StateWaiting, Reasons: []Reason{}}
	if equality.Semantic.DeepEqual(sj.Status, batchv1alpha1.SafeJobStatus{}) {
		// Every status the operator writes carries the ledger's format and,
		// from the first reconcile on, a condition or a ledger entry.
		if by := ptr.Deref(sj.Spec.ManagedBy, batchv1alpha1.ControllerName); by != batchv1alpha1.ControllerName {
			v.add("NotObserved", "spec.managedBy is %s: the SafeJob operator leaves it to that controller", by)
		} else {
			v.add("NotObserved", "no SafeJob operator has written its status yet: none runs (kubectl get deployments -A "+
				"-l app.kubernetes.io/name=safejob), or it waits for the launch window during a burst")
		}
		if ptr.Deref(sj.Spec.Suspend, false) {
			v.add("Suspended", "spec.suspend is true: no pod runs until it is false")
		}
		return v
	}
	for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed} {
		if c := meta.FindStatusCondition(sj.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			v.State = StateFinished
			v.add("Finished", "%s (%s): %s", c.Type, c.Reason, c.Message)
			return v
		}
	}
	v.conditionReasons(sj)
	if sj.Spec.Schedule != nil {
		if len(v.Reasons) == 0 {
			v.State = StateProgressing
			v.add("Scheduling", "runs start on schedule %q", *sj.Spec.Schedule)
		}
	} else {
		v.ledgerReasons(sj, now)
	}
	if ads := sj.Spec.ActiveDeadlineSeconds; ads != nil && sj.Status.StartTime != nil {
		if left := sj.Status.StartTime.Add(time.Duration(*ads) * time.Second).Sub(now); left < deadlineClose {
			v.add("Deadline", "activeDeadlineSeconds ends it in %s", max(left, 0).Round(time.Second))
		}
	}
	return v
}

func (v *Verdict) add(kind, format string, args ...any) {
	v.Reasons = append(v.Reasons, Reason{Kind: kind, Message: fmt.Sprintf(format, args...)})
}

// conditionReasons adds what the SafeJob's spec and conditions hold it by.
func (v *Verdict) conditionReasons(sj *batchv1alpha1.SafeJob) {
	conds := sj.Status.Conditions
	if c := meta.FindStatusCondition(conds, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status == metav1.ConditionFalse {
		v.add("LedgerInvalid", "%s", c.Message)
	}
	if ptr.Deref(sj.Spec.Suspend, false) {
		v.add("Suspended", "spec.suspend is true: no pod runs until it is false")
	}
	switch c := meta.FindStatusCondition(conds, batchv1alpha1.ConditionAdmitted); {
	case c == nil || c.Status != metav1.ConditionFalse:
	case strings.HasPrefix(c.Reason, kueue.WorkloadDeactivated) && !ptr.Deref(sj.Spec.Suspend, false):
		v.add("Deactivated", "Kueue deactivated its Workload (%s): %s", c.Reason, c.Message)
	default:
		v.add("WaitingForAdmission", "Kueue has not admitted its Workload (%s): %s", c.Reason, c.Message)
	}
	if c := meta.FindStatusCondition(conds, batchv1alpha1.ConditionPodCreateFailure); c != nil && c.Status == metav1.ConditionTrue {
		v.add("CreatesRefused", "the API server refuses its pods: %s", c.Message)
	}
	if c := meta.FindStatusCondition(conds, batchv1alpha1.ConditionScheduling); c != nil && c.Status == metav1.ConditionFalse {
		v.add("Scheduling", "no run starts (%s): %s", c.Reason, c.Message)
	}
}

// ledgerReasons adds the backoff delay, or says it progresses.
func (v *Verdict) ledgerReasons(sj *batchv1alpha1.SafeJob, now time.Time) {
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		return
	}
	if left := st.BackoffLeft(jobs.DefaultBackoff, now); left > 0 && len(st.Open) == 0 {
		v.add("Backoff", "waiting out the backoff delay after %d failures since the last success: %s left",
			st.FailuresSinceSuccess, left.Round(time.Second))
	}
	if len(v.Reasons) > 0 {
		return
	}
	v.State = StateProgressing
	if sj.Status.Active > 0 {
		v.add("Running", "%d pods running, %d launched and not ended", sj.Status.Active, len(st.Open))
	} else {
		v.add("Starting", "%d launches waiting for their pods", len(st.Open))
	}
}

// WhyJob tells whether a batch/v1 Job that SafeJob manages progresses and
// why not, from its ledger (nil while it has none) and the Job's own
// conditions: one refused (SafeJobRefused) waits for a fix, and one
// without a ledger is suspended before it ever ran, or not yet seen by
// the operator.
func WhyJob(job *batchv1.Job, ledger *batchv1alpha1.SafeJob, now time.Time) *Verdict {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1alpha1.JobConditionRefused && c.Status == corev1.ConditionTrue {
			v := &Verdict{Namespace: job.Namespace, Name: job.Name, State: StateWaiting, Reasons: []Reason{}}
			v.add("Refused", "SafeJob does not run it (%s): %s", c.Reason, c.Message)
			return v
		}
	}
	if ledger == nil {
		// What Why says of a SafeJob no operator wrote, but for a Job.
		ledger = &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name},
			Spec: batchv1alpha1.SafeJobSpec{Suspend: job.Spec.Suspend}}
		if ptr.Deref(job.Spec.Suspend, false) && len(job.Status.Conditions) > 0 {
			v := &Verdict{Namespace: job.Namespace, Name: job.Name, State: StateWaiting, Reasons: []Reason{}}
			v.add("Suspended", "spec.suspend is true: its ledger and pods are made when it is resumed")
			return v
		}
	}
	v := Why(ledger, now)
	v.Name = job.Name
	return v
}

// PrintWhy writes the verdict, a line per reason.
func PrintWhy(w io.Writer, v *Verdict) error {
	out := &errWriter{w: w}
	out.printf("SafeJob %s/%s: %s\n", v.Namespace, v.Name, v.State)
	for _, r := range v.Reasons {
		out.printf("  %s: %s\n", r.Kind, r.Message)
	}
	return out.err
}
