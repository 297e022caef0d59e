package jobs

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Backoff is the delay before a failed pod is replaced, as batch/v1 has it:
// Base after the first failure since the last success (of the index, with
// backoffLimitPerIndex), doubling with each further one, at most Max.
type Backoff struct {
	Base, Max time.Duration
}

// DefaultBackoff is batch/v1's: 10s doubling, at most 10 minutes.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Minute}

// NoBackoff replaces a failed pod at once.
var NoBackoff = Backoff{Base: -1}

// BackoffLeft is how long the SafeJob's next pod still waits out the
// backoff delay after the failures since the last success (without
// backoffLimitPerIndex).
func (st *State) BackoffLeft(b Backoff, now time.Time) time.Duration {
	return b.left(st.FailuresSinceSuccess, st.LastFailure, now)
}

// left is how long the next pod still waits after failures failures, the
// last recorded at last.
func (b Backoff) left(failures int32, last, now time.Time) time.Duration {
	if b == (Backoff{}) {
		b = DefaultBackoff
	}
	if failures <= 0 || b.Base <= 0 {
		return 0
	}
	delay := b.Base
	for i := int32(1); i < failures && delay < b.Max; i++ {
		delay *= 2
	}
	delay = min(delay, b.Max)
	// A failure time ahead of the clock (another controller's clock, a
	// hand-edited checkpoint) never makes the wait longer than the delay.
	return min(max(delay-now.Sub(last), 0), delay)
}

// restartsPastLimit is batch/v1's backoffLimit for restartPolicy OnFailure:
// the container restarts of the SafeJob's running and pending pods reach
// backoffLimit (any restart, when it is 0).
func (d *decision) restartsPastLimit() bool {
	if d.in.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for name := range d.st.Open {
		pod := d.observed[name]
		if pod == nil || (pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending) {
			continue
		}
		for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
			restarts += cs.RestartCount
		}
	}
	if limit := ptr.Deref(d.in.Spec.BackoffLimit, 6); limit > 0 {
		return restarts >= limit
	}
	return restarts > 0
}
