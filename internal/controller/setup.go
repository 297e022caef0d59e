package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// controllerUIDIndex indexes objects by the UID of the SafeJob that controls
// them: runs of a schedule, Workloads, and pods while they can still change
// its decision (indexActivePodController) where activePodsIndex cannot be
// read.
const controllerUIDIndex = "metadata.ownerReferences.controllerSafeJobUID"

// prebuiltWorkloadIndex indexes SafeJobs by the Workload MultiKueue made for
// them (jobs.PrebuiltWorkloadName): a label or an annotation, depending on
// the Kueue version, so a label selector cannot find them.
const prebuiltWorkloadIndex = "metadata.prebuiltWorkloadName"

// endedAndReleased reports a pod that has ended and no longer holds the ledger
// finalizer: its outcome is committed, or someone else stripped the
// finalizer, and the pod handler then keeps its last state.
func endedAndReleased(pod *corev1.Pod) bool {
	return jobs.IsTerminal(pod) && !slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
}

// indexActivePodController indexes a pod under its SafeJob while the pod can
// still change the SafeJob's decision: until it is settled. A settled pod
// is kept by the pod handler (or, after a restart, found by a live read),
// so the cache need not hand it to every reconcile, which in a SafeJob of
// many completions would cost each reconcile all the pods it ever ran.
func indexActivePodController(obj client.Object) []string {
	if pod, ok := obj.(*corev1.Pod); ok && endedAndReleased(pod) {
		return nil
	}
	return indexController(obj)
}

// activePodsIndex indexes pods on the pod informer itself, under
// "<namespace>/<UID of the SafeJob that controls them>", while they can
// still change its decision (indexActivePodController). podsOf reads the
// cached pods from it as they are: a cache List would copy every pod into
// its list, the largest cost of reading a SafeJob of many pods.
const activePodsIndex = "safejob.dev/active-pods"

func indexActivePods(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	keys := indexActivePodController(pod)
	for k := range keys {
		keys[k] = activePodsKey(pod.Namespace, types.UID(keys[k]))
	}
	return keys, nil
}

func activePodsKey(namespace string, uid types.UID) string { return namespace + "/" + string(uid) }

// podsOf returns the pods in namespace that the SafeJob of uid controls and
// that can still change its decision, from the cache. They are the cache's
// own objects and must not be modified.
func (r *SafeJobReconciler) podsOf(ctx context.Context, namespace string, uid types.UID) ([]*corev1.Pod, error) {
	if r.pods == nil {
		return r.listPodsOf(ctx, namespace, uid)
	}
	objs, err := r.pods.ByIndex(activePodsIndex, activePodsKey(namespace, uid))
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// listPodsOf is podsOf through a cache List, for a cache whose pod informer
// offers no indexer to read (one limited to some namespaces).
func (r *SafeJobReconciler) listPodsOf(ctx context.Context, namespace string, uid types.UID) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingFields{controllerUIDIndex: string(uid)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return pods, nil
}

// indexPods indexes the cached pods for podsOf: on the pod informer itself
// when it offers its indexer, else as a field of the cache.
func (r *SafeJobReconciler) indexPods(mgr manager.Manager) error {
	informer, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("getting the pod informer: %w", err)
	}
	indexed, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	if !ok {
		fields := mgr.GetFieldIndexer()
		if err := fields.IndexField(context.Background(), &corev1.Pod{}, controllerUIDIndex, indexActivePodController); err != nil {
			return fmt.Errorf("indexing pods by controller: %w", err)
		}
		return nil
	}
	if err := informer.AddIndexers(toolscache.Indexers{activePodsIndex: indexActivePods, heldPodsIndex: indexHeldPods}); err != nil {
		return fmt.Errorf("indexing pods by controller: %w", err)
	}
	r.pods = indexed.GetIndexer()
	if r.Metrics != nil {
		pods := r.pods
		r.Metrics.held.watch(r.Clock, func() []any {
			objs, _ := pods.ByIndex(heldPodsIndex, heldPodsKey) // fails only for an index not added
			return objs
		})
	}
	return nil
}

func indexController(obj client.Object) []string {
	if ref := metav1.GetControllerOf(obj); ref != nil && batchv1alpha1.IsSafeJobRef(ref) {
		return []string{string(ref.UID)}
	}
	return nil
}

// indexPrebuiltWorkload indexes a worker cluster's copy of a SafeJob under
// the Workload MultiKueue made for it.
func indexPrebuiltWorkload(obj client.Object) []string {
	if name := jobs.PrebuiltWorkloadName(obj); name != "" {
		return []string{name}
	}
	return nil
}

// indexRunParent indexes a run under the parent that controls it
// (batchv1alpha1.RunParent).
func indexRunParent(obj client.Object) []string {
	if run, ok := obj.(*batchv1alpha1.SafeJob); ok {
		if ref := batchv1alpha1.RunParent(run); ref != nil {
			return []string{string(ref.UID)}
		}
	}
	return nil
}

// CacheOptions limits the pod cache to pods that carry the SafeJob label and
// leaves managedFields out of every cached object: nothing here reads them,
// they are a large part of every cached object's bytes (docs/performance.md,
// "Why the defaults"), and a status write sent without them leaves the
// server's copy as it is. Cached SafeJobs and pods also go without the
// annotation in which `kubectl apply` keeps a whole copy of the object
// (stripForCache), and cached Workloads without their pod templates
// (stripDefault).
func CacheOptions() cache.Options {
	sel := labels.NewSelector()
	req, err := labels.NewRequirement(batchv1alpha1.SafeJobNameLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant requirement
	}
	return cache.Options{
		// Workloads are stripped by the default transform, not by an entry
		// of their own: an entry makes the cache resolve the type when it
		// starts, which fails on a cluster that does not serve Kueue.
		DefaultTransform: stripDefault,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:            {Label: sel.Add(*req), Transform: stripForCache},
			&batchv1alpha1.SafeJob{}: {Transform: stripForCache},
			&batchv1.Job{}:           {Transform: stripForeignJob},
		},
	}
}

// stripForeignJob keeps of a cached Job that SafeJob does not manage only
// its metadata, without managedFields: the cache holds every Job of the
// cluster, and only those that name SafeJob in spec.managedBy are read
// (JobReconciler); its predicate drops the rest.
func stripForeignJob(in any) (any, error) {
	in, _ = stripForCache(in) // never fails
	if job, ok := in.(*batchv1.Job); ok && !batchv1alpha1.ManagesJob(job) {
		job.Spec, job.Status = batchv1.JobSpec{}, batchv1.JobStatus{}
		job.Annotations = nil
	}
	return in, nil
}

var stripManagedFields = cache.TransformStripManagedFields()

// stripDefault is the transform of every cached object without one of its
// own: it leaves out managedFields and, of a Workload, the pod template of
// each pod set. That template is a copy of the SafeJob's made when the
// Workload was created, never read back here (pod sets are read for their
// names, counts and topology requests), and much of a Workload's bytes
// (docs/performance.md, "Memory"). The writes that send a whole Workload, a
// spec update and the adoption of a prebuilt one, read it live first
// (syncWorkload, adoptPrebuilt); of a status write, the API server takes
// only the status.
func stripDefault(in any) (any, error) {
	in, _ = stripManagedFields(in) // never fails
	if wl, ok := in.(*kueue.Workload); ok {
		for i := range wl.Spec.PodSets {
			wl.Spec.PodSets[i].Template = corev1.PodTemplateSpec{}
		}
	}
	return in, nil
}

// stripForCache leaves out of a cached object its managedFields and the
// last configuration `kubectl apply` recorded on it, which can be as large
// as the object itself. Only objects this controller never writes whole are
// cached so: it writes a SafeJob's status (the API server keeps the rest of
// the stored object) and patches metadata, and it patches pods; an update
// built from a stripped copy would drop the annotation from the server's.
func stripForCache(in any) (any, error) {
	in, _ = stripManagedFields(in) // never fails
	obj, err := meta.Accessor(in)
	if err != nil {
		return in, nil // a tombstone: nothing of it is kept
	}
	if a := obj.GetAnnotations(); a != nil {
		if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
			delete(a, corev1.LastAppliedConfigAnnotation)
			obj.SetAnnotations(a) // a copy, for an unstructured object
		}
	}
	return in, nil
}

// queue is the controller's work queue type.
type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// newQueue builds controller-runtime's default queue (the priority queue)
// and keeps its length for backlogged.
func (r *SafeJobReconciler) newQueue(mgr manager.Manager) func(string, workqueue.TypedRateLimiter[reconcile.Request]) queue {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) queue {
		q := priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) {
			o.Log = mgr.GetLogger().WithValues("controller", name)
			o.RateLimiter = rl
		})
		r.queue.waiting = q.Len
		r.queue.enqueue = func(key types.NamespacedName) { q.Add(reconcile.Request{NamespacedName: key}) }
		return &stoppableQueue{PriorityQueue: q, done: make(chan struct{})}
	}
}

// stoppableQueue is the priority queue with a shutdown that always
// returns. controller-runtime v0.23's priority queue can hand an item to a
// worker that has just returned on shutdown: the hand-over then blocks for
// ever holding the queue's lock, and every worker's next call (Done, Add,
// Get) blocks on that lock, so the manager's stop waits out its whole grace
// period (kubernetes-sigs/controller-runtime#3538, fixed upstream in later
// minor releases). The race needs the queue's own shutdown, so this one
// never shuts it down: workers wait on the queue and on this shutdown, and
// after it get nothing more and add nothing more. The inner queue's few
// goroutines then idle until the process ends.
type stoppableQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	done chan struct{}
	once sync.Once
}

type gotItem struct {
	req      reconcile.Request
	priority int
	shutdown bool
}

func (q *stoppableQueue) stopped() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// GetWithPriority returns the next item, or shutdown as soon as the queue
// is shut down. An item the queue hands over after that is dropped with
// the rest of the queue.
func (q *stoppableQueue) GetWithPriority() (reconcile.Request, int, bool) {
	if q.stopped() {
		return reconcile.Request{}, 0, true
	}
	got := make(chan gotItem, 1)
	go func() {
		req, priority, shutdown := q.PriorityQueue.GetWithPriority()
		got <- gotItem{req, priority, shutdown}
	}()
	select {
	case g := <-got:
		return g.req, g.priority, g.shutdown
	case <-q.done:
		return reconcile.Request{}, 0, true
	}
}

// Get is GetWithPriority without the priority.
func (q *stoppableQueue) Get() (reconcile.Request, bool) {
	req, _, shutdown := q.GetWithPriority()
	return req, shutdown
}

// AddWithOpts adds items until the shutdown.
func (q *stoppableQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if !q.stopped() {
		q.PriorityQueue.AddWithOpts(o, items...)
	}
}

// Add adds an item until the shutdown.
func (q *stoppableQueue) Add(item reconcile.Request) {
	if !q.stopped() {
		q.PriorityQueue.Add(item)
	}
}

// AddAfter adds an item after a delay, until the shutdown.
func (q *stoppableQueue) AddAfter(item reconcile.Request, d time.Duration) {
	if !q.stopped() {
		q.PriorityQueue.AddAfter(item, d)
	}
}

// AddRateLimited adds an item after its backoff, until the shutdown.
func (q *stoppableQueue) AddRateLimited(item reconcile.Request) {
	if !q.stopped() {
		q.PriorityQueue.AddRateLimited(item)
	}
}

// ShutDown releases every waiting worker; see the type's comment.
func (q *stoppableQueue) ShutDown() { q.once.Do(func() { close(q.done) }) }

// ShutDownWithDrain is ShutDown: controller-runtime does not drain.
func (q *stoppableQueue) ShutDownWithDrain() { q.ShutDown() }

// ShuttingDown reports whether ShutDown was called.
func (q *stoppableQueue) ShuttingDown() bool { return q.stopped() }

// addRunnables adds what runs beside the reconciles, under the same leader
// election: the finalizer release workers, and the look for unlabelled
// pods that hold the ledger finalizer (sweep.go).
func (r *SafeJobReconciler) addRunnables(mgr manager.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.releases.run(ctx, r.releaseWorkers(), r.Options.ReleaseDrain, r.releaseOne)
		return nil
	})); err != nil {
		return fmt.Errorf("adding the finalizer release workers: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(r.runSweep)); err != nil {
		return fmt.Errorf("adding the look for unlabelled pods: %w", err)
	}
	return nil
}

// setupBeside registers what runs beside the SafeJob controller: the
// background runnables, the controller of managed Jobs, and the pacing
// that is turned on.
func (r *SafeJobReconciler) setupBeside(mgr manager.Manager) error {
	if err := r.addRunnables(mgr); err != nil {
		return err
	}
	managedJobs := &JobReconciler{Client: r.Client, Recorder: r.Recorder, Clock: r.Clock, Kueue: r.Options.Kueue,
		MaxConcurrentReconciles: r.Options.MaxConcurrentReconciles}
	if err := managedJobs.SetupWithManager(mgr); err != nil {
		return err
	}
	if r.Options.Pacing.LaunchWindow > 0 {
		if err := r.pacer.setupWindow(mgr, r.Metrics); err != nil {
			return err
		}
	}
	if r.Options.Pacing.ReadyBatchPeriod > 0 {
		if err := r.setupReadyHeld(mgr); err != nil {
			return err
		}
	}
	return nil
}

// SetupWithManager registers the controller and its pod index.
func (r *SafeJobReconciler) SetupWithManager(mgr manager.Manager) error {
	r.tracker = newTracker()
	r.queue = &workQueue{}
	r.pacer = newPacer(r.Options.Pacing, r.Clock, r.queue)
	var waiting prometheus.Gauge
	if r.Metrics != nil {
		waiting = r.Metrics.ReleasesWaiting
	}
	r.releases = newReleaseQueue(waiting)
	if err := r.setupBeside(mgr); err != nil {
		return err
	}
	indexer := mgr.GetFieldIndexer()
	if err := r.indexPods(mgr); err != nil {
		return err
	}
	if err := indexer.IndexField(context.Background(), &batchv1alpha1.SafeJob{}, controllerUIDIndex, indexRunParent); err != nil {
		return fmt.Errorf("indexing SafeJobs by owner: %w", err)
	}
	sjInformer, err := mgr.GetCache().GetInformer(context.Background(), &batchv1alpha1.SafeJob{})
	if err != nil {
		return fmt.Errorf("getting the SafeJob informer: %w", err)
	}
	deliver := func(obj any) {
		if sj, ok := obj.(*batchv1alpha1.SafeJob); ok {
			r.tracker.delivered(sj)
		}
	}
	if _, err := sjInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: deliver, UpdateFunc: func(_, obj any) { deliver(obj) },
	}); err != nil {
		return fmt.Errorf("watching own status writes: %w", err)
	}
	b := builder.ControllerManagedBy(mgr).
		For(&batchv1alpha1.SafeJob{}).
		Watches(&batchv1alpha1.SafeJob{}, &runHandler{cache: mgr.GetCache()})
	if r.Options.Kueue {
		if err := indexKueue(indexer); err != nil {
			return err
		}
		b = b.Owns(&kueue.Workload{}).Watches(&kueue.Workload{}, &prebuiltHandler{cache: mgr.GetCache()})
	}
	err = b.
		Watches(&corev1.Pod{}, &podHandler{tracker: r.tracker, cache: mgr.GetCache(),
			batch: r.Options.Pacing.PodBatchPeriod, window: r.pacer.window}).
		// A SafeJob whose background finalizer release failed is queued
		// with the queue's backoff (releaseInBackground).
		WatchesRawSource(source.Channel(r.releases.retry, handler.Funcs{
			GenericFunc: func(_ context.Context, e event.GenericEvent, q queue) {
				q.AddRateLimited(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
			},
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.MaxConcurrentReconciles, 1), NewQueue: r.newQueue(mgr)}).
		Named("safejob").
		Complete(r)
	if err != nil {
		return fmt.Errorf("building controller: %w", err)
	}
	return nil
}

// indexKueue adds the indexes queueing needs: Workloads by the SafeJob that
// controls them, and worker copies of SafeJobs by their prebuilt Workload.
func indexKueue(indexer client.FieldIndexer) error {
	if err := indexer.IndexField(context.Background(), &kueue.Workload{}, controllerUIDIndex, indexController); err != nil {
		return fmt.Errorf("indexing Workloads by owner: %w", err)
	}
	if err := indexer.IndexField(context.Background(), &batchv1alpha1.SafeJob{}, prebuiltWorkloadIndex, indexPrebuiltWorkload); err != nil {
		return fmt.Errorf("indexing SafeJobs by prebuilt Workload: %w", err)
	}
	return nil
}
