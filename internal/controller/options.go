package controller

import (
	"time"

	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// Options configure a SafeJobReconciler: what it serves, how it is bounded
// and how it paces its writes. The operator builds them once from its flags
// (cmd/main.go); the zero Options serve SafeJobs alone, with batch/v1's
// backoff, the default fence and no pacing.
type Options struct {
	// MaxConcurrentReconciles is the number of SafeJobs reconciled at once.
	MaxConcurrentReconciles int
	// Kueue turns on queueing through Kueue Workloads (SafeJobs labelled
	// kueue.x-k8s.io/queue-name); set it when the Workload API is served.
	Kueue bool
	// NoPodsReady leaves the PodsReady condition of Workloads alone, as
	// Kueue's Job integration does when Kueue's waitForPodsReady is off;
	// false keeps it, which waitForPodsReady needs.
	NoPodsReady bool
	// Fence bounds when a launch's pod may be created and when its absence is
	// trusted (ledger.Fence); the zero Fence is ledger.DefaultFence.
	Fence ledger.Fence
	// Backoff is the delay before a failed pod is replaced; the zero
	// Backoff is jobs.DefaultBackoff, batch/v1's.
	Backoff jobs.Backoff
	// Namespaces are those the operator's cache holds; empty: every
	// namespace. The look for unlabelled pods at start (sweep.go) reads
	// only these.
	Namespaces []string
	// ReleaseDrain is how long finalizer releases go on once the manager
	// stops (a rollout, a leader's SIGTERM, an uninstall): those in flight
	// finish and those queued are issued, so that a stopping operator does
	// not leave pods holding the ledger finalizer that no successor may
	// come to release. 0: they end with the manager.
	ReleaseDrain time.Duration
	// Pacing groups facts into fewer writes and bounds the writes in
	// flight; the zero Pacing turns all of it off.
	Pacing Pacing
}

// Pacing configures what the controller does for throughput alone: when a
// decided status is written and how many writes and launches are in flight.
// Safety never depends on any of it (the pacer's doc comment says why); the
// zero Pacing writes every decision at once and bounds nothing.
type Pacing struct {
	// PodBatchPeriod holds a SafeJob's reconcile after a pod event for up to
	// this long, and spaces the ledger writes of a SafeJob that runs several
	// pods at once by at least this long, so that the events of many pods
	// are decided in one status write (the Job controller batches pod events
	// for a second). 0 reconciles and writes at once.
	PodBatchPeriod time.Duration
	// ReadyBatchPeriod holds a status write whose only change is the ready
	// count for up to this long, so that it travels with the next ledger
	// fact (a pod that runs for less than this never costs a write of its
	// own). Ledger facts are never delayed. 0 writes it at once.
	ReadyBatchPeriod time.Duration
	// ReadyBusyPeriod replaces ReadyBatchPeriod while SafeJobs wait in the
	// queue for a worker: a busy controller holds a ready-count change this
	// long, so that it travels with the pods' outcomes rather than costing a
	// write of its own when writes cost the most (the Job controller's
	// backlogged queue gathers them the same way). Ledger facts are never
	// held. At or below ReadyBatchPeriod it changes nothing.
	ReadyBusyPeriod time.Duration
	// ReadyBusyLimit bounds a hold renewed by ReadyBusyPeriod at a time: a
	// held ready-count change that falls due while SafeJobs still wait for
	// a worker waits on, never longer than this from when it was first
	// held. At or below ReadyBusyPeriod nothing is renewed.
	ReadyBusyLimit time.Duration
	// ConcurrentPodWrites bounds the pod creates, finalizer releases and
	// deletes in flight at once across all reconciles (see
	// DefaultConcurrentPodWrites). 0 or less leaves them unbounded.
	ConcurrentPodWrites int
	// ConcurrentStatusWrites bounds the status writes that commit launches
	// in flight at once across all reconciles (see
	// DefaultConcurrentStatusWrites); other status writes are not bounded.
	// 0 or less leaves them unbounded.
	ConcurrentStatusWrites int
	// LaunchWindow bounds the pods launched across all SafeJobs that have
	// not started yet (launchWindow); 0 or less: no bound.
	LaunchWindow int
	// LaunchWindowMin is the least the window shrinks to as it follows how
	// fast pods start (launchWindow); 0, or LaunchWindow or more: the
	// window stays at LaunchWindow.
	LaunchWindowMin int
	// LaunchWindowTimeout is the longest a pod that does not start holds
	// its place in the window; 0 is DefaultLaunchWindowTimeout.
	LaunchWindowTimeout time.Duration
	// OutcomeHold is the longest a status write that records nothing but
	// pod successes is held while SafeJobs wait for the launch window; 0:
	// never held.
	OutcomeHold time.Duration
}

// DefaultPodBatchPeriod is the operator's PodBatchPeriod: half the Job
// controller's second, which saves few writes more and leaves a large
// SafeJob's pods waiting on the batch (docs/performance.md, "Why the
// defaults").
const DefaultPodBatchPeriod = 500 * time.Millisecond

// DefaultReadyBatchPeriod is the operator's ReadyBatchPeriod: a second, as
// long as the Job controller gathers the pod events behind its ready count.
const DefaultReadyBatchPeriod = time.Second

// DefaultReadyBusyPeriod is the operator's ReadyBusyPeriod: it covers the
// few seconds a busy cluster's pods stay ready before they end, so that
// their ready counts travel with their outcomes (docs/performance.md, "Why
// the defaults").
const DefaultReadyBusyPeriod = 5 * time.Second

// DefaultReadyBusyLimit is the operator's ReadyBusyLimit: under a lasting
// backlog the pods of a busy cluster stay ready longer than one
// ReadyBusyPeriod before they end (docs/performance.md, "Why the
// defaults"), and a ready count shown half a minute late is still sooner
// than a backlogged Job controller's.
const DefaultReadyBusyLimit = 30 * time.Second

// DefaultLaunchWindow is the operator's LaunchWindow: large enough that a
// cluster whose pods take the whole timeout to start still starts new
// SafeJobs faster than the Job controller at its default client rate, small
// enough that a burst of SafeJobs does not queue thousands of pods at the
// kubelets (docs/performance.md, "A launch window").
const DefaultLaunchWindow = 500

// DefaultLaunchWindowMin is the operator's LaunchWindowMin: pods that start
// within a second, as on a local cluster of simulated nodes, keep the
// window near it; fewer places would leave the kubelets idle between
// launches (docs/performance.md, "A window that follows the starts").
const DefaultLaunchWindowMin = 32

// DefaultOutcomeHold is the operator's OutcomeHold: long enough that a
// burst of SafeJobs larger than the window gets its pods run first and its
// outcomes recorded after (docs/performance.md, "Outcomes after pods"),
// short enough that a SafeJob under a steady backlog still shows its finish
// within minutes.
const DefaultOutcomeHold = 2 * time.Minute

// DefaultLaunchWindowTimeout is the operator's LaunchWindowTimeout: longer
// than a busy cluster's pods take to start once scheduled, short enough that
// pods which never start hold the SafeJobs behind them for no more than that.
const DefaultLaunchWindowTimeout = 30 * time.Second

const (
	// DefaultConcurrentPodWrites bounds the pod writes in flight across all
	// reconciles. Every pod write is an event that kube-apiserver hands to
	// every pod watcher (scheduler, kubelets, controllers) through a buffer
	// that can be as small as 10 events; a burst that overflows a slow
	// watcher's buffer makes the API server close that watch, and the watcher
	// then lists or re-watches all pods. Bounding the writes in flight keeps
	// the operator's bursts within what the watchers drain.
	DefaultConcurrentPodWrites = 8
	// DefaultConcurrentStatusWrites leaves the status writes that commit
	// launches unbounded. A kubelet writes its pods' status a few at a
	// time, and the API server shares its CPU among the requests in flight:
	// many launch commits in flight make each pod wait longer to start and
	// finish. Bounding them (ConcurrentStatusWrites) brings a burst of a few
	// thousand SafeJobs' first pods sooner, and caps how fast pods are
	// launched under a larger one (docs/performance.md, "Launch commits in
	// flight"), so it is left to the operator's flag.
	DefaultConcurrentStatusWrites = 0
)
