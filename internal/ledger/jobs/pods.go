package jobs

import (
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// RefFromPod reads a pod's index and attempt from its labels.
func RefFromPod(pod *corev1.Pod) (PodRef, bool) {
	i, err1 := strconv.ParseInt(pod.Labels[batchv1alpha1.CompletionIndexLabel], 10, 32)
	a, err2 := strconv.ParseInt(pod.Labels[batchv1alpha1.AttemptLabel], 10, 32)
	if err1 != nil || err2 != nil {
		return PodRef{}, false
	}
	return PodRef{Name: pod.Name, Index: int32(i), Attempt: int32(a)}, true
}

// IsTerminal reports whether a pod has ended, Succeeded or Failed.
func IsTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func isReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasFinalizer(pod *corev1.Pod) bool {
	return slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
}

// endedAt is when a terminal pod ended, as batch/v1 reads it: its
// containers' latest finish, else when it stopped being ready, else its
// deletion time less its grace period; never before its launch (launched)
// nor after now, and now when the pod tells nothing.
func endedAt(pod *corev1.Pod, launched, now time.Time) time.Time {
	var at time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.Time
		}
	}
	if at.IsZero() {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
				at = c.LastTransitionTime.Time
			}
		}
	}
	if at.IsZero() && pod.DeletionTimestamp != nil {
		at = pod.DeletionTimestamp.Add(-time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second)
	}
	switch {
	case at.IsZero() || at.After(now):
		at = now
	case at.Before(launched):
		at = launched
	}
	return at.Truncate(time.Second) // as the ledger stores it, so replay decides the same
}
