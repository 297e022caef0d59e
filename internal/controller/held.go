package controller

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// heldPodsIndex indexes, on the pod informer, under heldPodsKey, the pods
// the ledger finalizer holds: ended, or asked to be deleted, and still
// carrying it. A pod stays so until its outcome is committed and the
// finalizer released; one held long says a release is not happening.
const (
	heldPodsIndex = "safejob.dev/held-pods"
	heldPodsKey   = "held"
)

// heldByFinalizer reports a pod the ledger finalizer keeps from going.
func heldByFinalizer(pod *corev1.Pod) bool {
	return (jobs.IsTerminal(pod) || pod.DeletionTimestamp != nil) &&
		slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
}

func indexHeldPods(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok && heldByFinalizer(pod) {
		return []string{heldPodsKey}, nil
	}
	return nil, nil
}

// heldSince is when the finalizer began to hold a held pod: when it ended
// (its last container's finish, or its Ready condition's last change), or
// when its deletion grace ran out, whichever came first. A pod that says
// neither is taken as held since it was created.
func heldSince(pod *corev1.Pod) time.Time {
	var since time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (since.IsZero() || t.Before(since)) {
			since = t
		}
	}
	if pod.DeletionTimestamp != nil {
		earlier(pod.DeletionTimestamp.Time) // the request's time plus its grace
	}
	if jobs.IsTerminal(pod) {
		var ended time.Time
		for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			if t := s.State.Terminated; t != nil && t.FinishedAt.After(ended) {
				ended = t.FinishedAt.Time
			}
		}
		if ended.IsZero() {
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodReady {
					ended = c.LastTransitionTime.Time
				}
			}
		}
		earlier(ended)
	}
	if since.IsZero() {
		return pod.CreationTimestamp.Time
	}
	return since
}

// heldPods is a collector, read when metrics are scraped, of the pods the
// ledger finalizer holds: how many, and how long the oldest has been held.
// Its source is set once the pod informer is indexed; until then it
// reports none.
type heldPods struct {
	count, oldest *prometheus.Desc

	mu     sync.Mutex
	clock  clock.PassiveClock
	source func() []any
}

func newHeldPods() *heldPods {
	return &heldPods{
		count: prometheus.NewDesc("safejob_finalizer_held_pods",
			"Pods that ended or are being deleted and still carry the ledger finalizer.", nil, nil),
		oldest: prometheus.NewDesc("safejob_finalizer_held_oldest_seconds",
			"How long the longest-held of those pods has carried the ledger finalizer since it ended or its deletion grace ran out; "+
				"0 when none.", nil, nil),
	}
}

// watch makes the collector read the held pods from source, on clk's time.
func (h *heldPods) watch(clk clock.PassiveClock, source func() []any) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock, h.source = clk, source
}

func (h *heldPods) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.count
	ch <- h.oldest
}

func (h *heldPods) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	clk, source := h.clock, h.source
	h.mu.Unlock()
	var n int
	var oldest time.Duration
	if source != nil {
		now := clk.Now()
		for _, obj := range source() {
			pod, ok := obj.(*corev1.Pod)
			if !ok || !heldByFinalizer(pod) {
				continue
			}
			n++
			oldest = max(oldest, now.Sub(heldSince(pod)))
		}
	}
	ch <- prometheus.MustNewConstMetric(h.count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(h.oldest, prometheus.GaugeValue, oldest.Seconds())
}
