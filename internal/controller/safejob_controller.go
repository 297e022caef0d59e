package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
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
	// Options are the reconciler's configuration, set before
	// SetupWithManager and never changed after.
	Options Options

	// tracker is what this process remembers of each SafeJob beyond the
	// cache: the safety state the ledger cannot hold (memory.go).
	tracker *tracker
	// pacer decides when decided writes are made, for throughput alone
	// (pacing.go).
	pacer *pacer
	// pods is the pod informer's indexer (indexPods).
	pods toolscache.Indexer
	// releases holds the finalizer releases issued in the background until
	// a release worker takes them (releaseInBackground).
	releases *releaseQueue
	// queue reaches the work queue once it is built.
	queue *workQueue
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
	replaced, uid, arrived := r.tracker.outstanding(req.NamespacedName)
	if replaced == "" {
		return false
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, sj); err != nil || sj.UID != uid {
		return false
	}
	if sj.ResourceVersion != replaced {
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
			r.pacer.forget(req.NamespacedName)
			r.tracker.takeOwnerless(req.NamespacedName)
			return reconcile.Result{}, errors.Join(r.releaseLeftBehind(ctx, req.NamespacedName, ""), r.releaseWorkloads(ctx, req, ""))
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
		return reconcile.Result{}, r.releaseDeleted(ctx, sj)
	}
	if sj.Status.Ledger.Format > batchv1alpha1.LedgerFormat {
		return reconcile.Result{}, r.refuseFormat(ctx, sj)
	}
	if err := r.tracker.sawLedger(sj); err != nil {
		return reconcile.Result{}, r.refuseRolledBack(ctx, sj, err)
	}
	if err := r.releaseOwnerless(ctx, req.NamespacedName); err != nil {
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
	q, obs, wait, err := r.gatherAll(ctx, sj)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan, err := obs.Decide()
	if err != nil {
		return reconcile.Result{}, r.markLedgerInvalid(ctx, sj, err)
	}
	expired, err := r.act(ctx, sj, plan, q.podInfo)
	if err != nil {
		return reconcile.Result{}, err
	}
	paced, err := r.pacer.pace(sj, obs, plan)
	if err != nil {
		return reconcile.Result{}, r.markLedgerInvalid(ctx, sj, err)
	}
	written := false
	if !paced.deferred {
		written, err = r.writeStatus(ctx, sj, paced.plan)
	}
	r.pacer.settleWindow(sj, paced.room, written, paced.plan.Append)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.afterDecide(ctx, sj, q, paced.heard(sj)); err != nil {
		return reconcile.Result{}, err
	}
	_, res := r.ttlResult(sj)
	res.RequeueAfter = ledger.MinPositive(res.RequeueAfter, paced.plan.RequeueAfter, wait, paced.wait, expired)
	// Finalizer releases that failed in the background are this reconcile's
	// error once its status is written: retried with the queue's backoff.
	if err := r.tracker.takeReleaseError(client.ObjectKeyFromObject(sj), sj.UID); err != nil {
		return reconcile.Result{}, err
	}
	return res, nil
}
