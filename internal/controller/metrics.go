package controller

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// Metrics are the controller's Prometheus metrics. Labels come from short
// fixed sets; no metric carries an object's name.
type Metrics struct {
	// Reconciles counts reconciles by result: success, error.
	Reconciles *prometheus.CounterVec
	// Conflicts counts status writes refused because the SafeJob had changed.
	Conflicts prometheus.Counter
	// PodsCreated counts pods created.
	PodsCreated prometheus.Counter
	// CreatesExpired counts launches whose create window passed before their
	// create could start; each is recorded Lost and runs again.
	CreatesExpired prometheus.Counter
	// LedgerAppends counts ledger entries committed, by entry type.
	LedgerAppends *prometheus.CounterVec
	// CommitObserve is the time from a status write to its appearance in the cache.
	CommitObserve prometheus.Histogram
}

// NewMetrics creates the metrics; Register makes them visible.
func NewMetrics() *Metrics {
	return &Metrics{
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "safejob_reconciles_total",
			Help: "SafeJob reconciles, by result (success, error).",
		}, []string{"result"}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "safejob_status_conflicts_total",
			Help: "Status writes refused because the SafeJob changed since it was read.",
		}),
		PodsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "safejob_pods_created_total",
			Help: "Pods created for SafeJobs.",
		}),
		CreatesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "safejob_pod_creates_expired_total",
			Help: "Launches whose create window passed before their pod create could start.",
		}),
		LedgerAppends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "safejob_ledger_appends_total",
			Help: "Ledger entries committed, by entry type.",
		}, []string{"type"}),
		CommitObserve: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "safejob_commit_observe_seconds",
			Help:    "Time from a ledger commit to its observation in the informer cache.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
	}
}

// Register adds the metrics to a registry.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Reconciles, m.Conflicts, m.PodsCreated, m.CreatesExpired, m.LedgerAppends, m.CommitObserve} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metric: %w", err)
		}
	}
	return nil
}

func (m *Metrics) countReconcile(err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.Reconciles.WithLabelValues(result).Inc()
}

func (m *Metrics) observeCommit(d time.Duration) { m.CommitObserve.Observe(d.Seconds()) }

func (m *Metrics) recordAppends(entries []batchv1alpha1.LedgerEntry) {
	for _, e := range entries {
		m.LedgerAppends.WithLabelValues(string(e.Type)).Inc()
	}
}
