package controller

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
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
	// JobsFinished counts SafeJobs that finished, by completion mode, result
	// and the reason of their finished condition (as batch/v1's
	// job_finished_total).
	JobsFinished *prometheus.CounterVec
	// PodFailures counts pod failures committed, by the podFailurePolicy
	// action that handled them (as batch/v1's
	// pod_failures_handled_by_failure_policy_total, with Count for failures
	// no rule matched).
	PodFailures *prometheus.CounterVec
	// ReconcileDuration is how long reconciles take, by result.
	ReconcileDuration *prometheus.HistogramVec
	// StatusWrites counts SafeJob status writes by kind: ledger (it
	// appended to the ledger), counts (only the pod counters active, ready
	// and terminating changed) and other (conditions and the rest). Counts
	// writes are the ones the ready batch periods hold back.
	StatusWrites *prometheus.CounterVec
	// ReleasesWaiting is how many finalizer releases of recorded pods wait
	// for a release worker: a count that keeps growing says the API server
	// takes the operator's pod writes more slowly than pods end.
	ReleasesWaiting prometheus.Gauge
	// LaunchWindowHeld is how many launched pods hold a place in the launch
	// window (not started yet); LaunchWindowWaiting how many SafeJobs wait
	// for a place.
	// LaunchWindowHeldOutcomes how many SafeJobs have a status write that
	// records successes held meanwhile; LaunchWindowSize the places the
	// window has, as it follows how fast pods start.
	LaunchWindowHeld, LaunchWindowWaiting, LaunchWindowHeldOutcomes, LaunchWindowSize prometheus.Gauge
	// EventsDropped counts events not written because the event writers'
	// queue was full (the API server answering too slowly).
	EventsDropped prometheus.Counter
	// LedgersRefused counts reconciles that wrote nothing to a SafeJob for a
	// reason that lasts until someone acts, by reason: format_unknown (its
	// ledger is of a newer build), rolled_back (its ledger shows less than
	// was seen of it), crd_outdated (the installed CRD drops what this build
	// writes), invalid (the API server refuses the status this build writes).
	LedgersRefused *prometheus.CounterVec
	// held reports, when scraped, the pods the ledger finalizer holds
	// (safejob_finalizer_held_pods, safejob_finalizer_held_oldest_seconds).
	held *heldPods
}

// refused counts a reconcile that wrote nothing to a SafeJob for reason.
func (m *Metrics) refused(reason string) {
	if m != nil {
		m.LedgersRefused.WithLabelValues(reason).Inc()
	}
}

// labelResult is the label of a reconcile's or a SafeJob's result.
const labelResult = "result"

// NewMetrics creates the metrics; Register makes them visible.
func NewMetrics() *Metrics {
	return &Metrics{
		Reconciles: counterVec("safejob_reconciles_total",
			"SafeJob reconciles, by result (success, error).", labelResult),
		Conflicts: counter("safejob_status_conflicts_total",
			"Status writes refused because the SafeJob changed since it was read."),
		PodsCreated: counter("safejob_pods_created_total", "Pods created for SafeJobs."),
		CreatesExpired: counter("safejob_pod_creates_expired_total",
			"Launches whose create window passed before their pod create could start."),
		LedgerAppends: counterVec("safejob_ledger_appends_total",
			"Ledger entries committed, by entry type.", "type"),
		CommitObserve: seconds("safejob_commit_observe_seconds",
			"Time from a ledger commit to its observation in the informer cache."),
		JobsFinished: counterVec("safejob_jobs_finished_total",
			"SafeJobs that finished, by completion mode, result (succeeded, failed) and reason.", "completion_mode", labelResult, "reason"),
		PodFailures: counterVec("safejob_pod_failures_total",
			"Pod failures committed, by the podFailurePolicy action that handled them (Count when no rule matched).", "action"),
		ReconcileDuration: secondsVec("safejob_reconcile_duration_seconds",
			"Duration of SafeJob reconciles, by result (success, error).", labelResult),
		StatusWrites: counterVec("safejob_status_writes_total",
			"SafeJob status writes, by kind: ledger (appended to the ledger), counts (only active, ready or terminating changed), other.", "kind"),
		ReleasesWaiting: gauge("safejob_finalizer_releases_waiting",
			"Ledger finalizer releases of pods whose outcome is recorded, waiting for a release worker."),
		LaunchWindowHeld: gauge("safejob_launch_window_pods",
			"Launched pods not started yet that hold a place in the launch window."),
		LaunchWindowWaiting: gauge("safejob_launch_window_waiting_safejobs",
			"SafeJobs waiting for a place in the launch window to launch pods."),
		LaunchWindowHeldOutcomes: gauge("safejob_launch_window_held_outcomes",
			"SafeJobs whose pod successes wait to be recorded while other SafeJobs wait for the launch window."),
		LaunchWindowSize: gauge("safejob_launch_window_size",
			"The places the launch window has: it follows how fast pods start, within its configured least and most."),
		EventsDropped: counter("safejob_events_dropped_total",
			"Events not written because the queue of event writes was full."),
		LedgersRefused: counterVec("safejob_ledgers_refused_total",
			"Reconciles that wrote nothing to a SafeJob for a lasting reason: format_unknown, rolled_back, crd_outdated, invalid.", "reason"),
		held: newHeldPods(),
	}
}

// The constructors of the metrics NewMetrics makes: a name and its help,
// and the labels of a vector. Durations are histograms of seconds from a
// millisecond up, doubling.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

var secondsBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

func seconds(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: secondsBuckets})
}

func secondsVec(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: secondsBuckets}, labels)
}

// collectors are all the metrics, in the order docs/reference/metrics.md
// lists them.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Reconciles, m.ReconcileDuration, m.Conflicts, m.StatusWrites, m.LedgerAppends, m.CommitObserve,
		m.PodsCreated, m.CreatesExpired, m.PodFailures, m.JobsFinished, m.ReleasesWaiting, m.held,
		m.LaunchWindowHeld, m.LaunchWindowWaiting, m.LaunchWindowHeldOutcomes, m.LaunchWindowSize, m.EventsDropped, m.LedgersRefused}
}

// Register adds the metrics to a registry.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metric: %w", err)
		}
	}
	return nil
}

func (m *Metrics) countReconcile(err error, took time.Duration) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.Reconciles.WithLabelValues(result).Inc()
	m.ReconcileDuration.WithLabelValues(result).Observe(took.Seconds())
}

// policyAction names the podFailurePolicy action of a Failed entry's reason.
var policyAction = map[string]string{
	batchv1alpha1.FailReasonCounted:   "Count",
	batchv1alpha1.FailReasonIgnored:   "Ignore",
	batchv1alpha1.FailReasonFailIndex: "FailIndex",
	batchv1alpha1.FailReasonFailJob:   "FailJob",
}

// recordFinished counts a SafeJob that a write finished: before did not
// carry a finished condition, after does.
func (m *Metrics) recordFinished(before, after *batchv1alpha1.SafeJob) {
	if ledger.Finished(before.Status.Conditions) != nil {
		return
	}
	c := ledger.Finished(after.Status.Conditions)
	if c == nil {
		return
	}
	result := "succeeded"
	if c.Type == batchv1alpha1.ConditionFailed {
		result = "failed"
	}
	m.JobsFinished.WithLabelValues(string(after.Spec.CompletionMode), result, c.Reason).Inc()
}

func (m *Metrics) observeCommit(d time.Duration) { m.CommitObserve.Observe(d.Seconds()) }

// recordWrite counts a status write from before to after that appended
// the given entries to the ledger.
func (m *Metrics) recordWrite(before, after *batchv1alpha1.SafeJobStatus, appended []batchv1alpha1.LedgerEntry) {
	kind := "other"
	switch {
	case len(appended) > 0:
		kind = "ledger"
	case countsOnly(before, after):
		kind = "counts"
	}
	m.StatusWrites.WithLabelValues(kind).Inc()
	m.recordAppends(appended)
}

func (m *Metrics) recordAppends(entries []batchv1alpha1.LedgerEntry) {
	for _, e := range entries {
		m.LedgerAppends.WithLabelValues(string(e.Type)).Inc()
		if action, ok := policyAction[e.Reason]; ok && e.Type == batchv1alpha1.EntryFailed {
			m.PodFailures.WithLabelValues(action).Inc()
		}
	}
}
