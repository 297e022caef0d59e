// Package controller runs SafeJobs: it gathers what the cluster shows, lets
// internal/ledger/jobs and internal/ledger/runs decide, and carries out the
// plan.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// SafeJobReconciler reconciles SafeJob objects.
type SafeJobReconciler struct {
	// Client reads from the cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly, to confirm a pod is gone.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Metrics   *Metrics
	// MaxConcurrentReconciles is the number of SafeJobs reconciled at once.
	MaxConcurrentReconciles int
	// PodBatchPeriod holds a SafeJob's reconcile after a pod event for up to
	// this long, and spaces the ledger writes of a SafeJob that runs several
	// pods at once by at least this long, so that the events of many pods
	// are decided in one status write (the Job controller batches pod events
	// for a second). Safety never depends on it: a later reconcile decides
	// the same from the ledger and the pods. 0 reconciles and writes at once.
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
	// Namespaces are those the operator's cache holds; empty: every
	// namespace. The look for unlabelled pods at start (sweep.go) reads
	// only these.
	Namespaces []string
	// OutcomeHold is the longest a status write that records nothing but
	// pod successes is held while SafeJobs wait for the launch window; 0:
	// never held.
	OutcomeHold time.Duration
	// ReleaseDrain is how long finalizer releases go on once the manager
	// stops (a rollout, a leader's SIGTERM, an uninstall): those in flight
	// finish and those queued are issued, so that a stopping operator does
	// not leave pods holding the ledger finalizer that no successor may
	// come to release. 0: they end with the manager.
	ReleaseDrain time.Duration

	tracker *tracker
	// pods is the pod informer's indexer (indexPods).
	pods toolscache.Indexer
	// podWrites holds the slots of ConcurrentPodWrites.
	podWrites slots
	// statusWrites holds the slots of ConcurrentStatusWrites.
	statusWrites slots
	// releases holds the finalizer releases issued in the background until
	// a release worker takes them (releaseInBackground).
	releases *releaseQueue
	// retry queues a SafeJob again when a finalizer release issued in the
	// background failed.
	retry chan event.GenericEvent
	// waiting returns how many SafeJobs wait in the work queue for a
	// worker; set when the queue is built, before any reconcile.
	waiting func() int
	// window bounds the launched pods not yet started (LaunchWindow); nil
	// when there is no bound.
	window *launchWindow
	// enqueue queues a SafeJob; set when the queue is built.
	enqueue func(types.NamespacedName)
	// readyHeld keeps the SafeJobs whose ready-only writes are held while
	// backlogged, for the ticker to queue once the backlog clears; nil:
	// each held change is looked at again when its hold falls due.
	readyHeld *readyHeld
}

// +kubebuilder:rbac:groups=batch.safejob.dev,resources=safejobs,verbs=get;list;watch;create;delete;patch
// Status is written with merge patches (commit); update stays granted so
// that the previous release, which updates it, runs under this RBAC (a
// rollback keeps the newer release's roles).
// +kubebuilder:rbac:groups=batch.safejob.dev,resources=safejobs/status,verbs=update;patch
// Pods, runs and Workloads carry a controller reference with
// blockOwnerDeletion to their SafeJob: the OwnerReferencesPermissionEnforcement
// admission plugin then requires update on the owner's finalizers.
// +kubebuilder:rbac:groups=batch.safejob.dev,resources=safejobs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile reconciles one SafeJob in up to two passes. When the first
// pass wrote status, the worker waits briefly for the informer to deliver
// that write, and a second pass acts on it at once (creates the launched
// pods, releases committed finalizers) rather than behind every other
// SafeJob in the queue.
// Pods of its name seen leaving the cache undeleted get their label back
// first (relabel.go); a failure there is logged and tried again within
// the fence's grace, without turning the reconcile into an error (which
// would trade the SafeJob's own timed wake-ups for the queue's backoff).
func (r *SafeJobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var retry time.Duration
	if err := r.relabelNoted(ctx, req.NamespacedName); err != nil {
		log.FromContext(ctx).Error(err, "Restoring the SafeJob name label of pods")
		retry = r.fence().LostGrace()
	}
	res, err := r.pass(ctx, req)
	if err != nil || !r.waitOwnWrite(ctx, req) {
		res.RequeueAfter = ledger.MinPositive(res.RequeueAfter, retry)
		return res, err
	}
	next, err := r.pass(ctx, req)
	if err == nil {
		next.RequeueAfter = ledger.MinPositive(next.RequeueAfter, res.RequeueAfter, retry)
	}
	return next, err
}

// pass is one counted reconcile. A status write superseded by a newer
// version of the SafeJob ends it without error: the newer version's watch
// event brings the SafeJob back.
func (r *SafeJobReconciler) pass(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	res, err := r.reconcile(ctx, req)
	if errors.Is(err, errSuperseded) {
		res, err = reconcile.Result{}, nil
	}
	r.Metrics.countReconcile(err, time.Since(start))
	return res, err
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

// DefaultReleaseDrain is the operator's ReleaseDrain: within the shipped
// Deployment's termination grace period (30 s) and the manager's graceful
// shutdown timeout, with room for the rest of the shutdown.
const DefaultReleaseDrain = 20 * time.Second

// FollowUpWait bounds how long a worker waits for the informer to deliver
// its own status write before leaving the rest to the write's watch event.
const FollowUpWait = 500 * time.Millisecond

// waitOwnWrite waits, up to FollowUpWait, until the cache shows the
// SafeJob past this process's last status write for it; false when there
// was no such write or it did not show in time. The informer wakes it
// (tracker.delivered); the cache is read once first, for a delivery that
// came before the write was recorded.
func (r *SafeJobReconciler) waitOwnWrite(ctx context.Context, req reconcile.Request) bool {
	over, uid, arrived := r.tracker.outstanding(req.NamespacedName)
	if over == "" {
		return false
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, sj); err != nil || sj.UID != uid {
		return false
	}
	if sj.ResourceVersion != over {
		return true
	}
	timer := time.NewTimer(FollowUpWait)
	defer timer.Stop()
	select {
	case <-arrived:
		return true
	case <-timer.C:
	case <-ctx.Done():
	}
	return false
}

// reconcile gathers the SafeJob and its pods, lets the ledger decide, acts on
// the plan and writes status once, under the resourceVersion precondition.
func (r *SafeJobReconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	sj := &batchv1alpha1.SafeJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, sj); err != nil {
		if apierrors.IsNotFound(err) {
			r.tracker.forget(req.NamespacedName)
			if r.window != nil {
				r.window.gone(req.NamespacedName)
			}
			r.readyHeld.drop(req.NamespacedName)
			r.tracker.takeStrays(req.NamespacedName)
			return reconcile.Result{}, errors.Join(r.releaseGone(ctx, req), r.releaseWorkloads(ctx, req, ""))
		}
		return reconcile.Result{}, fmt.Errorf("getting SafeJob: %w", err)
	}
	// controller-runtime's logger names the SafeJob already.
	logger := log.FromContext(ctx)
	if dispatched(sj) {
		return r.reconcileDispatched(ctx, sj)
	}
	if by := ptr.Deref(sj.Spec.ManagedBy, batchv1alpha1.ControllerName); by != batchv1alpha1.ControllerName &&
		(!sj.Dispatched() || sj.Spec.Schedule == nil) {
		logger.V(2).Info("Skipping SafeJob managed by another controller", "managedBy", by)
		return reconcile.Result{}, nil
	}
	if !r.tracker.showsOwnWrite(sj, r.Clock.Now(), r.Metrics) {
		// Our last status write is not in the cache yet: its watch event
		// will bring us back. Deciding now would only meet a conflict.
		return reconcile.Result{}, nil
	}
	if sj.DeletionTimestamp != nil {
		return reconcile.Result{}, r.releaseAll(ctx, req, sj)
	}
	if sj.Status.Ledger.Format > batchv1alpha1.LedgerFormat {
		return reconcile.Result{}, r.refuseFormat(ctx, sj)
	}
	if err := r.tracker.sawLedger(sj); err != nil {
		return reconcile.Result{}, r.refuseRolledBack(ctx, sj, err)
	}
	if err := r.releaseStrays(ctx, req.NamespacedName); err != nil {
		return reconcile.Result{}, err
	}
	if sj.Spec.Schedule != nil {
		return r.reconcileParent(ctx, sj)
	}
	return r.reconcileJob(ctx, sj)
}

// reconcileJob runs one SafeJob that is not a schedule: decide its pods from
// the ledger, act on the plan, write status once, then settle its Workload.
func (r *SafeJobReconciler) reconcileJob(ctx context.Context, sj *batchv1alpha1.SafeJob) (reconcile.Result, error) {
	if done, err := r.expireTTL(ctx, sj); done || err != nil {
		return reconcile.Result{}, err
	}
	q, in, wait, err := r.gatherAll(ctx, sj)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan, err := jobs.Decide(in)
	if err != nil {
		return reconcile.Result{}, r.markLedgerInvalid(ctx, sj, err)
	}
	expired, err := r.act(ctx, sj, plan, q.podInfo)
	if err != nil {
		return reconcile.Result{}, err
	}
	holdWait := r.spaceWrites(sj, plan)
	room := 0
	var decided batchv1alpha1.SafeJobStatus
	if holdWait > 0 {
		// Written too recently: the facts decided now join the next write.
		// The pod work above acted on observed facts only; the Workload too
		// hears only of what is written (its quota and finalizer wait).
		plan.Status, decided, plan.Stopped = sj.Status, sj.Status, false
	} else {
		var held bool
		if plan, room, held, err = r.fitWindow(sj, in, plan); err != nil {
			return reconcile.Result{}, r.markLedgerInvalid(ctx, sj, err)
		}
		decided = plan.Status
		if outcomesHeld := r.holdOutcomes(sj, plan); held || outcomesHeld {
			// Waiting for room in the launch window, or its outcomes held
			// while others wait: the window queues it again.
			plan.Status, decided, plan.Stopped = sj.Status, sj.Status, false
		} else if holdWait = r.deferReadyOnly(sj, plan); holdWait > 0 {
			plan.Status = sj.Status // nothing but the ready count changed: batch it with the next change
		}
	}
	written, err := r.writeStatus(ctx, sj, plan)
	r.settleWindow(sj, room, written, plan.Append)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan.Status = decided
	if err := r.afterDecide(ctx, sj, q, plan); err != nil {
		return reconcile.Result{}, err
	}
	_, res := r.ttlResult(sj)
	res.RequeueAfter = ledger.MinPositive(res.RequeueAfter, plan.RequeueAfter, wait, holdWait, expired)
	// Finalizer releases that failed in the background are this reconcile's
	// error once its status is written: retried with the queue's backoff.
	if err := r.tracker.takeReleaseError(client.ObjectKeyFromObject(sj), sj.UID); err != nil {
		return reconcile.Result{}, err
	}
	return res, nil
}

// spaceWrites returns how long to hold a status write that appends to the
// ledger of a SafeJob running several pods at once, so that it writes at
// most once per PodBatchPeriod: the outcomes of pods that finish meanwhile
// join the next write instead of costing one each. 0 means write now.
func (r *SafeJobReconciler) spaceWrites(sj *batchv1alpha1.SafeJob, plan *jobs.Plan) time.Duration {
	if r.PodBatchPeriod <= 0 || len(plan.Append) == 0 || ptr.Deref(sj.Spec.Parallelism, 1) <= 1 {
		return 0
	}
	return r.tracker.spacingLeft(client.ObjectKeyFromObject(sj), sj.UID, r.Clock.Now(), r.PodBatchPeriod)
}

// deferReadyOnly returns how long to hold a status write whose only change
// is in the pod counters (active, ready, terminating); 0 means write now.
func (r *SafeJobReconciler) deferReadyOnly(sj *batchv1alpha1.SafeJob, plan *jobs.Plan) time.Duration {
	// The pod counters (active, ready, terminating) follow the pods, not
	// the ledger: a change of them alone travels with the next write.
	if r.ReadyBatchPeriod <= 0 || len(plan.Append) > 0 || !countsOnly(&sj.Status, &plan.Status) {
		return 0
	}
	hold, busy := r.ReadyBatchPeriod, r.backlogged()
	if r.ReadyBusyPeriod > hold && busy {
		hold = r.ReadyBusyPeriod
	}
	// A change that falls due while the backlog lasts is held again, up to
	// ReadyBusyLimit: the pods of a busy cluster stay ready for longer than
	// one hold before their outcomes come.
	key, now := client.ObjectKeyFromObject(sj), r.Clock.Now()
	left, limit := r.tracker.deferReady(key, sj.UID, now, hold, busy, r.ReadyBusyLimit)
	if left > 0 && busy && r.readyHeld != nil && limit > left {
		// Looked at again once the backlog has cleared (wakeReadyHeld), or
		// at the limit: not at every renewal while the backlog lasts.
		r.readyHeld.hold(key, now.Add(left))
		return limit
	}
	return left
}

// countsOnly reports whether after differs from before in the pod counters
// (active, ready, terminating) and nothing else.
func countsOnly(before, after *batchv1alpha1.SafeJobStatus) bool {
	if after.Active == before.Active && after.Ready == before.Ready && ptr.Equal(after.Terminating, before.Terminating) {
		return false
	}
	same := *after // shallow: only its counters are set, the rest is only read
	same.Active, same.Ready, same.Terminating = before.Active, before.Ready, before.Terminating
	return equality.Semantic.DeepEqual(same, *before)
}

// backlogged reports whether SafeJobs wait in the queue for a worker, or
// for room in the launch window.
func (r *SafeJobReconciler) backlogged() bool {
	return (r.waiting != nil && r.waiting() > 0) || (r.window != nil && r.window.busy())
}
