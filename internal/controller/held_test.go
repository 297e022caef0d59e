package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestHeldPods(t *testing.T) {
	now := time.Unix(10_000, 0)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	fin := []string{batchv1alpha1.LedgerFinalizer}
	ended := func(phase corev1.PodPhase, finalizers []string, ago time.Duration) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Finalizers: finalizers, CreationTimestamp: at(time.Hour)},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{
				{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: at(ago + time.Minute)}}},
				{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: at(ago)}}},
			}},
		}
	}
	deleting := func(ago time.Duration) *corev1.Pod {
		d := at(ago)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Finalizers: fin, DeletionTimestamp: &d, CreationTimestamp: at(time.Hour)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	readyChanged := ended(corev1.PodFailed, fin, 0)
	readyChanged.Status.ContainerStatuses = nil
	readyChanged.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, LastTransitionTime: at(7 * time.Minute)}}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Finalizers: fin}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pods := []any{
		running,                            // not ended: not held
		ended(corev1.PodSucceeded, nil, 0), // released
		ended(corev1.PodSucceeded, fin, 5*time.Minute), // held 5m, since its last container ended
		ended(corev1.PodFailed, fin, 0),                // held 0s
		deleting(time.Minute),                          // grace ran out 1m ago
		deleting(-time.Minute),                         // grace not over yet: counted, not yet old
		"not a pod",
	}
	h := newHeldPods()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	const before = `
# HELP safejob_finalizer_held_pods Pods that ended or are being deleted and still carry the ledger finalizer.
# TYPE safejob_finalizer_held_pods gauge
safejob_finalizer_held_pods 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(before), "safejob_finalizer_held_pods"); err != nil {
		t.Fatalf("before a source is set: %v", err)
	}
	h.watch(clocktesting.NewFakePassiveClock(now), func() []any { return pods })
	want := `
# HELP safejob_finalizer_held_oldest_seconds How long the longest-held of those pods has carried the ledger finalizer since it ended or its deletion grace ran out; 0 when none.
# TYPE safejob_finalizer_held_oldest_seconds gauge
safejob_finalizer_held_oldest_seconds 300
# HELP safejob_finalizer_held_pods Pods that ended or are being deleted and still carry the ledger finalizer.
# TYPE safejob_finalizer_held_pods gauge
safejob_finalizer_held_pods 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	pods = append(pods, readyChanged)
	if got := testutil.ToFloat64(oldestOnly{h}); got != 420 {
		t.Errorf("with a pod that ended 7m ago by its Ready condition: oldest %vs, want 420", got)
	}
}

// oldestOnly is the collector's oldest-held gauge alone, for ToFloat64.
type oldestOnly struct{ h *heldPods }

func (o oldestOnly) Describe(ch chan<- *prometheus.Desc) { ch <- o.h.oldest }
func (o oldestOnly) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 2)
	o.h.Collect(all)
	close(all)
	for m := range all {
		if m.Desc() == o.h.oldest {
			ch <- m
		}
	}
}
