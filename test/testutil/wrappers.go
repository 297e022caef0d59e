// Package testutil holds what the tests share: object builders, a fake
// kubelet, an audit-log reader and the invariant checks of DESIGN.md.
package testutil

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// SafeJobWrapper builds SafeJobs for tests.
type SafeJobWrapper struct{ batchv1alpha1.SafeJob }

// MakeSafeJob returns a SafeJob with one container, restartPolicy Never and
// the defaults the API server would apply.
func MakeSafeJob(name, ns string) *SafeJobWrapper {
	return &SafeJobWrapper{batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1alpha1.SafeJobSpec{
			Parallelism:    ptr.To[int32](1),
			Completions:    ptr.To[int32](1),
			CompletionMode: batchv1alpha1.NonIndexedCompletion,
			BackoffLimit:   ptr.To[int32](6),
			Suspend:        ptr.To(false),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
			}},
		},
	}}
}

// Obj returns the SafeJob.
func (w *SafeJobWrapper) Obj() *batchv1alpha1.SafeJob { return &w.SafeJob }

// Parallelism sets spec.parallelism.
func (w *SafeJobWrapper) Parallelism(n int32) *SafeJobWrapper {
	w.Spec.Parallelism = ptr.To(n)
	return w
}

// Completions sets spec.completions.
func (w *SafeJobWrapper) Completions(n int32) *SafeJobWrapper {
	w.Spec.Completions = ptr.To(n)
	return w
}

// WorkQueue unsets spec.completions: the SafeJob is a work queue.
func (w *SafeJobWrapper) WorkQueue() *SafeJobWrapper {
	w.Spec.Completions = nil
	return w
}

// Indexed sets completionMode Indexed.
func (w *SafeJobWrapper) Indexed() *SafeJobWrapper {
	w.Spec.CompletionMode = batchv1alpha1.IndexedCompletion
	return w
}

// BackoffLimit sets spec.backoffLimit.
func (w *SafeJobWrapper) BackoffLimit(n int32) *SafeJobWrapper {
	w.Spec.BackoffLimit = ptr.To(n)
	return w
}

// BackoffLimitPerIndex sets spec.backoffLimitPerIndex.
func (w *SafeJobWrapper) BackoffLimitPerIndex(n int32) *SafeJobWrapper {
	w.Spec.BackoffLimitPerIndex = ptr.To(n)
	return w
}

// MaxFailedIndexes sets spec.maxFailedIndexes.
func (w *SafeJobWrapper) MaxFailedIndexes(n int32) *SafeJobWrapper {
	w.Spec.MaxFailedIndexes = ptr.To(n)
	return w
}

// SuccessPolicy sets spec.successPolicy.
func (w *SafeJobWrapper) SuccessPolicy(rules ...batchv1alpha1.SuccessPolicyRule) *SafeJobWrapper {
	w.Spec.SuccessPolicy = &batchv1alpha1.SuccessPolicy{Rules: rules}
	return w
}

// ManagedBy sets spec.managedBy.
func (w *SafeJobWrapper) ManagedBy(controller string) *SafeJobWrapper {
	w.Spec.ManagedBy = ptr.To(controller)
	return w
}

// Suspend sets spec.suspend.
func (w *SafeJobWrapper) Suspend(s bool) *SafeJobWrapper {
	w.Spec.Suspend = ptr.To(s)
	return w
}

// ActiveDeadlineSeconds sets spec.activeDeadlineSeconds.
func (w *SafeJobWrapper) ActiveDeadlineSeconds(s int64) *SafeJobWrapper {
	w.Spec.ActiveDeadlineSeconds = ptr.To(s)
	return w
}

// TTLSecondsAfterFinished sets spec.ttlSecondsAfterFinished.
func (w *SafeJobWrapper) TTLSecondsAfterFinished(s int32) *SafeJobWrapper {
	w.Spec.TTLSecondsAfterFinished = ptr.To(s)
	return w
}

// PodFailurePolicy adds podFailurePolicy rules.
func (w *SafeJobWrapper) PodFailurePolicy(rules ...batchv1alpha1.PodFailurePolicyRule) *SafeJobWrapper {
	if w.Spec.PodFailurePolicy == nil {
		w.Spec.PodFailurePolicy = &batchv1alpha1.PodFailurePolicy{}
	}
	w.Spec.PodFailurePolicy.Rules = append(w.Spec.PodFailurePolicy.Rules, rules...)
	return w
}

// RestartPolicy sets the template's restartPolicy.
func (w *SafeJobWrapper) RestartPolicy(p corev1.RestartPolicy) *SafeJobWrapper {
	w.Spec.Template.Spec.RestartPolicy = p
	return w
}

// Schedule makes the SafeJob a scheduled parent.
func (w *SafeJobWrapper) Schedule(s string) *SafeJobWrapper {
	w.Spec.Schedule = &s
	return w
}

// TimeZone sets spec.timeZone.
func (w *SafeJobWrapper) TimeZone(tz string) *SafeJobWrapper {
	w.Spec.TimeZone = &tz
	return w
}

// ConcurrencyPolicy sets spec.concurrencyPolicy.
func (w *SafeJobWrapper) ConcurrencyPolicy(p batchv1alpha1.ConcurrencyPolicy) *SafeJobWrapper {
	w.Spec.ConcurrencyPolicy = p
	return w
}

// StartingDeadlineSeconds sets spec.startingDeadlineSeconds.
func (w *SafeJobWrapper) StartingDeadlineSeconds(s int64) *SafeJobWrapper {
	w.Spec.StartingDeadlineSeconds = &s
	return w
}

// HistoryLimits sets the successful and failed run history limits.
func (w *SafeJobWrapper) HistoryLimits(successful, failed int32) *SafeJobWrapper {
	w.Spec.SuccessfulRunsHistoryLimit = &successful
	w.Spec.FailedRunsHistoryLimit = &failed
	return w
}

// Label sets a label on the SafeJob.
func (w *SafeJobWrapper) Label(k, v string) *SafeJobWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}
