package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// actWorkers bounds the pod writes of one reconcile in flight at once.
const actWorkers = 16

// act carries out the plan's pod work, which refers only to facts already
// observed in the ledger: create committed launches, release finalizers of
// committed outcomes, delete pods that must stop. It returns how soon the
// SafeJob must be decided again for the launches whose create window passed
// here, before their create was issued: no event will come for a pod never
// created, and only a decision after LostGrace records such a launch Lost.
func (r *SafeJobReconciler) act(ctx context.Context, sj *batchv1alpha1.SafeJob, plan *jobs.Plan, info *podSetInfo) (time.Duration, error) {
	key := client.ObjectKeyFromObject(sj)
	r.tracker.forgetLastSeen(key, sj.UID, plan.Forget)
	var errs []error
	var mu sync.Mutex
	fail := func(err error) {
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	var created []string
	var recheck time.Duration
	fail(r.parallel(ctx, len(plan.Create), func(i int) {
		ok, expired, err := r.createPod(ctx, sj, plan.Create[i], info)
		if err != nil {
			fail(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if ok {
			created = append(created, plan.Create[i].Name)
		}
		recheck = ledger.MinPositive(recheck, expired)
	}))
	for _, ref := range plan.Expired {
		recheck = ledger.MinPositive(recheck, r.expire(ctx, key, sj.UID, ref))
	}
	r.recordCreates(sj, created)
	r.releaseInBackground(key, sj.UID, r.tracker.unreleased(key, sj.UID, plan.Release, r.Clock.Now()))
	var deleted []string
	fail(r.parallel(ctx, len(plan.Delete), func(i int) {
		ok, err := r.deletePod(ctx, types.NamespacedName{Namespace: sj.Namespace, Name: plan.Delete[i]}, sj.UID)
		fail(err)
		if ok {
			mu.Lock()
			defer mu.Unlock()
			deleted = append(deleted, plan.Delete[i])
		}
	}))
	r.recordDeletes(sj, deleted)
	return recheck, errors.Join(errs...)
}

// releaseInBackground queues the release of the ledger finalizers of pods
// whose outcomes the observed ledger records, without holding the
// reconcile: the status write that follows (the next commit, and the pods it
// authorises) does not wait on them, nor does the worker. Releasing a
// recorded pod is safe at any time, in any order. Each pod counts as
// released from now (tracker), so a reconcile meanwhile does not patch it
// again; the queue holds a pod once however often it is asked for. The
// queue's workers (releaseWorkers) issue them.
func (r *SafeJobReconciler) releaseInBackground(key client.ObjectKey, uid types.UID, pods []string) {
	items := make([]releaseItem, 0, len(pods))
	for _, pod := range pods {
		r.tracker.released(key, uid, pod, r.Clock.Now())
		items = append(items, releaseItem{pod: types.NamespacedName{Namespace: key.Namespace, Name: pod}, job: key, uid: uid})
	}
	if len(items) > 0 {
		r.releases.add(items...)
	}
}

// releaseWorkers is how many finalizer releases are issued at once: half
// the pod-write slots, so that the creates users wait on always find the
// other half free of releases.
func (r *SafeJobReconciler) releaseWorkers() int {
	if r.Options.Pacing.ConcurrentPodWrites <= 0 {
		return actWorkers
	}
	return max(r.Options.Pacing.ConcurrentPodWrites/2, 1)
}

// releaseOne issues one queued release, holding a pod-write slot. A release
// that fails is forgotten, so the next reconcile plans it again; its error
// is that reconcile's error (and backoff, reconcileJob), and the SafeJob is
// queued for it, once for the failures that reconcile will return. ctx
// outlives the manager's by the release drain (releaseQueue.run); stopping
// is closed when the manager's ends, after which no SafeJob is queued: its
// successor plans a failed release again from the ledger.
func (r *SafeJobReconciler) releaseOne(ctx context.Context, stopping <-chan struct{}, it releaseItem) {
	if !r.pacer.podSlots().acquire(ctx) {
		return
	}
	err := r.releasePodOf(ctx, it.pod, it.uid)
	r.pacer.podSlots().release()
	if err == nil {
		r.tracker.releaseDone(it.job, it.uid, it.pod.Name, r.Clock.Now())
		return
	}
	if !r.tracker.releaseFailed(it.job, it.uid, it.pod.Name, err) {
		return // the SafeJob is queued already for an earlier failure
	}
	select {
	case r.releases.retry <- event.GenericEvent{Object: &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{
		Namespace: it.job.Namespace, Name: it.job.Name, UID: it.uid}}}:
	case <-stopping:
	case <-ctx.Done():
	}
}

// recordCreates reports the pods one reconcile created in one event (one
// event per pod would be as many writes to the API server as pods). The
// ledger of a managed Job reports them on the Job, as batch/v1 does: one
// event per pod (jobEventTarget).
func (r *SafeJobReconciler) recordCreates(sj *batchv1alpha1.SafeJob, created []string) {
	slices.Sort(created)
	if job := jobEventTarget(sj); job != nil {
		counted := int(sj.Status.Active + sj.Status.Succeeded + sj.Status.Failed)
		for k, name := range created {
			r.Recorder.Eventf(job, podEventRelated(sj, name, counted+k), corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod",
				"Created pod: %s", name)
		}
		return
	}
	switch {
	case len(created) == 0:
	case len(created) == 1:
		r.Recorder.Eventf(sj, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created pod: %s", created[0])
	default:
		names := strings.Join(created[:min(len(created), 10)], ", ")
		if len(created) > 10 {
			names += fmt.Sprintf(" and %d more", len(created)-10)
		}
		r.Recorder.Eventf(sj, nil, corev1.EventTypeNormal, "SuccessfulCreate", "CreatePod", "Created %d pods: %s", len(created), names)
	}
}

// createPod creates the pod of an observed launch and reports whether it
// did; when the launch's create window had passed, it issues none and
// returns how long until the launch's absence may be trusted (at least a
// millisecond). It is the one place a pod create is issued, and it keeps the fence
// (ledger.Fence): no create starts once the launch's window has passed, and
// each one carries a deadline of the window plus the create timeout, so that
// none can land after the launch may be declared Lost. AlreadyExists ends
// the launch's creating here: names are deterministic, so a repeat can never
// duplicate, and a name held by a stranger is found by the live read that
// precedes Lost.
func (r *SafeJobReconciler) createPod(ctx context.Context, sj *batchv1alpha1.SafeJob, ref jobs.PodRef,
	info *podSetInfo) (created bool, expired time.Duration, _ error) {
	key := client.ObjectKeyFromObject(sj)
	fence := r.fence()
	if !fence.MayCreate(ref.Time, r.Clock.Now()) {
		// Waited too long (for a write slot, or in the queue since the
		// commit).
		return false, r.expire(ctx, key, sj.UID, ref), nil
	}
	ctx, cancel := withServerDeadline(ctx, fence.CreateDeadline(ref.Time))
	defer cancel()
	pod := newPod(sj, ref)
	info.apply(pod)
	err := r.Client.Create(ctx, pod)
	switch {
	case err == nil:
		r.tracker.created(key, sj.UID, ref.Name)
		r.tracker.answered(key, sj.UID, "")
		r.Metrics.PodsCreated.Inc()
		return true, 0, nil
	case apierrors.IsAlreadyExists(err):
		// Ours (an earlier create that landed) or not: the cache or a live
		// read tells, once the launch is due for one. A stranger's pod
		// brings no event of this SafeJob: the reconcile comes back then.
		r.tracker.created(key, sj.UID, ref.Name)
		return false, r.untilGrace(ref), nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		// Refused for sure: the launch stays uncreated and is retried with
		// backoff. The PodCreateFailure condition carries the message; an
		// event is recorded when the refusal starts or its message changes,
		// not for every pod and retry.
		if r.tracker.answered(key, sj.UID, refusalMessage(err, ref.Name)) {
			r.recordFailedCreate(sj, ref.Name, err)
		}
		return false, 0, fmt.Errorf("creating pod %s: %w", ref.Name, err)
	default:
		// The pod may or may not exist: a live read settles it later.
		r.tracker.created(key, sj.UID, ref.Name)
		return false, 0, fmt.Errorf("creating pod %s: %w", ref.Name, err)
	}
}

// expire gives up creating a launch whose create window has passed: it goes
// Lost after its grace and runs again, in a decision that nothing but the
// time left brings (no event comes for a pod never created). It returns
// that time, at least a millisecond.
func (r *SafeJobReconciler) expire(ctx context.Context, key client.ObjectKey, uid types.UID, ref jobs.PodRef) time.Duration {
	r.tracker.created(key, uid, ref.Name)
	r.Metrics.CreatesExpired.Inc()
	log.FromContext(ctx).Info("Pod create window passed; the launch will be recorded Lost and run again", "pod", ref.Name)
	return r.untilGrace(ref)
}

// untilGrace is how long until a launch's absence may be trusted, when a
// live read may record it Lost: at least a millisecond.
func (r *SafeJobReconciler) untilGrace(ref jobs.PodRef) time.Duration {
	return max(ref.Time.Add(r.fence().LostGrace()).Sub(r.Clock.Now()), time.Millisecond)
}

// refusalMessage is the API server's refusal of a pod create without the
// pod's name, so that the refusals of one cause read the same for every pod
// and retry: `pods "sj-0-1" is forbidden: exceeded quota: ...` becomes
// `pods is forbidden: exceeded quota: ...`.
func refusalMessage(err error, pod string) string {
	return ledger.Truncate(strings.Replace(err.Error(), " "+strconv.Quote(pod), "", 1), maxCopiedMessage)
}

// fence is the reconciler's fence, or the default.
func (r *SafeJobReconciler) fence() ledger.Fence { return r.Options.Fence.OrDefault() }

// deletePod deletes the pod of this name that the SafeJob of UID owner
// created, as the cache shows it, under that pod's UID: a pod another
// created under the name since is never touched. It reports whether this
// call deleted it.
func (r *SafeJobReconciler) deletePod(ctx context.Context, key types.NamespacedName, owner types.UID) (bool, error) {
	pod, err := r.podOf(ctx, key, owner)
	if pod == nil {
		return false, err
	}
	err = r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err):
		log.FromContext(ctx).Info("Pod not deleted: its name is held by another pod now", "pod", key.Name, "uid", pod.UID)
		return false, nil
	}
	return false, fmt.Errorf("deleting pod %s: %w", key.Name, err)
}

// releasePodOf releases the ledger finalizer of the pod of this name that
// the SafeJob of UID owner created, as the cache shows it (releaseFinalizer).
func (r *SafeJobReconciler) releasePodOf(ctx context.Context, key types.NamespacedName, owner types.UID) error {
	pod, err := r.podOf(ctx, key, owner)
	if pod == nil {
		return err
	}
	return r.releaseFinalizer(ctx, pod)
}

// podOf reads the cached pod of this name if the SafeJob of UID owner
// created it (creatorUID), else returns nil: a pod that is gone, or another's
// that took the name, is none of its writes' business.
func (r *SafeJobReconciler) podOf(ctx context.Context, key types.NamespacedName, owner types.UID) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, key, pod); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if creatorUID(pod) != owner {
		return nil, nil
	}
	return pod, nil
}

// parallel runs f(0..n-1) on up to actWorkers goroutines, each call
// holding one of the process-wide pod-write slots. Items not started when
// ctx ends are skipped and counted in the returned error: the next
// reconcile plans them again.
func (r *SafeJobReconciler) parallel(ctx context.Context, n int, f func(int)) error {
	if n == 0 {
		return nil
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var skipped atomic.Int32
	for range min(n, actWorkers) {
		wg.Go(func() {
			for i := range work {
				if !r.pacer.podSlots().acquire(ctx) {
					skipped.Add(1)
					continue
				}
				f(i)
				r.pacer.podSlots().release()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if k := skipped.Load(); k > 0 {
		return fmt.Errorf("%d of %d pod writes not started: %w", k, n, context.Cause(ctx))
	}
	return nil
}

// slots bounds how many callers hold a slot at once; a nil slots is
// unbounded.
type slots chan struct{}

func newSlots(n int) slots {
	if n <= 0 {
		return nil
	}
	return make(slots, n)
}

// acquire takes a slot, waiting for one; it reports false if ctx ends first.
func (s slots) acquire(ctx context.Context) bool {
	if s == nil {
		return ctx.Err() == nil
	}
	select {
	case s <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s slots) release() {
	if s != nil {
		<-s
	}
}
