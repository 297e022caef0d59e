package controller

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// gatherAll brings the SafeJob's Workload up to date when it is queued and
// gathers the ledger input, with the queue's gate.
func (r *SafeJobReconciler) gatherAll(ctx context.Context, sj *batchv1alpha1.SafeJob) (*queued, *jobs.Observation, time.Duration, error) {
	q := &queued{}
	if queueName(sj) != "" {
		var err error
		if q, err = r.syncWorkload(ctx, sj); err != nil {
			return nil, nil, 0, err
		}
	}
	obs, wait, err := r.gather(ctx, sj)
	if err != nil {
		return nil, nil, 0, err
	}
	obs.Input().Queue = q.gate
	return q, obs, wait, nil
}

// gather builds the ledger input: the cached pods, the terminal states seen
// of vanished pods, the launches this process has yet to create and, for launches that
// none of these explain, a live read of the API server. It returns the input
// observed, for the decision to take the replay of the ledger made here.
func (r *SafeJobReconciler) gather(ctx context.Context, sj *batchv1alpha1.SafeJob) (*jobs.Observation, time.Duration, error) {
	pods, err := r.podsOf(ctx, sj.Namespace, sj.UID)
	if err != nil {
		return nil, 0, err
	}
	key := client.ObjectKeyFromObject(sj)
	in := &jobs.Input{
		Name:          sj.Name,
		UID:           sj.UID,
		Held:          r.tracker.heldNames(key, r.cachedPod(ctx, sj.Namespace)),
		Spec:          &sj.Spec,
		Status:        &sj.Status,
		Pods:          pods,
		LastSeen:      r.tracker.lastSeen(key, sj.UID),
		Uncreated:     r.tracker.uncreated(key, sj.UID),
		CreateRefusal: r.tracker.refusal(key, sj.UID),
		Gone:          map[string]bool{},
		Taken:         map[string]bool{},
		Fence:         r.Options.Fence,
		Backoff:       r.Options.Backoff,
		Now:           r.Clock.Now(),
	}
	obs := jobs.Observe(in)
	unaccounted, wait, err := obs.Unaccounted()
	if err != nil {
		return obs, 0, nil // Decide reports the invalid ledger
	}
	if len(unaccounted) == 0 {
		return obs, wait, nil
	}
	names := make([]string, len(unaccounted))
	for i, ref := range unaccounted {
		names[i] = ref.Name
	}
	reads, err := readAllLive(ctx, r, sj, names, func() *corev1.Pod { return &corev1.Pod{} })
	if err != nil {
		return nil, 0, fmt.Errorf("confirming pods: %w", err)
	}
	// The decision is taken now, not before the reads: on a slow API server
	// they take seconds, and the launches it commits carry its time, from
	// which their create window runs. The next launch due for a live read
	// was counted from before them too: one that fell due meanwhile was not
	// read, and is asked for at once.
	now := r.Clock.Now()
	if wait > 0 {
		wait = max(wait-now.Sub(in.Now), time.Millisecond)
	}
	in.Now = now
	for i, read := range reads {
		pod := read.obj
		switch read.holder {
		case heldByNone:
			in.Gone[names[i]] = true
		case heldByStranger:
			// The name is held by a pod this SafeJob does not control (an
			// earlier SafeJob's of the same name, or anyone's): it never
			// counts here, and the launch runs again under a new name.
			in.Taken[names[i]] = true
		default:
			// Ours, yet not in the cache: its create not seen yet, or the
			// name label the cache selects on removed (relabel.go), which
			// is put back. Until the cache shows the pod again, it is read
			// live on every pass, and a pass is due within the grace.
			if err := r.relabelLive(ctx, sj, pod); err != nil {
				// Retried by every reconcile until it succeeds: once its
				// outcome is recorded below, no live read looks at it again.
				log.FromContext(ctx).Error(err, "Pod not labelled: tried again", "pod", pod.Name)
				r.tracker.sawUnlabeled(client.ObjectKeyFromObject(sj), unlabeledPod{name: pod.Name, uid: pod.UID})
			}
			if jobs.IsTerminal(pod) {
				// Terminal and stripped of the finalizer by someone else
				// while no handler of this process saw it, or unlabelled:
				// its state decides.
				obs.AddPods(pod)
			} else {
				wait = ledger.MinPositive(wait, r.fence().LostGrace())
			}
		}
	}
	return obs, wait, nil
}

// cachedPod reports whether the cache holds the pod of this name and UID
// in namespace ns.
func (r *SafeJobReconciler) cachedPod(ctx context.Context, ns string) func(string, types.UID) bool {
	return func(name string, uid types.UID) bool {
		pod := &corev1.Pod{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod, client.UnsafeDisableDeepCopy)
		return err == nil && pod.UID == uid
	}
}

// liveReadsAtOnce bounds the live reads one pass has in flight: a SafeJob
// whose pods were removed while no operator ran may have as many to read as
// its parallelism, and one after another they would hold its decision (and
// its new launches) for as many round trips.
const liveReadsAtOnce = 8

// liveRead is what readAllLive found under one name.
type liveRead[T client.Object] struct {
	obj    T
	holder holder
}

// readAllLive reads each of names live (readLive), up to liveReadsAtOnce at
// a time, into objects made by newObj; the results are in the order of
// names. It fails if any read fails.
func readAllLive[T client.Object](ctx context.Context, r *SafeJobReconciler, sj *batchv1alpha1.SafeJob,
	names []string, newObj func() T) ([]liveRead[T], error) {
	out := make([]liveRead[T], len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(liveReadsAtOnce)
	for i, name := range names {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return fmt.Errorf("reading %s: %w", name, err) // another read failed: this one would too
			}
			obj := newObj()
			holder, err := r.readLive(gctx, sj, name, obj)
			if err != nil {
				return fmt.Errorf("reading %s: %w", name, err)
			}
			out[i] = liveRead[T]{obj: obj, holder: holder}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("live reads of %d names: %w", len(names), err)
	}
	return out, nil
}

// holder is who a live read found holding a name a SafeJob committed.
type holder int

const (
	heldByNone holder = iota
	// heldByStranger: an object the SafeJob does not control holds the name.
	heldByStranger
	heldByOwn
)

// readLive reads the object of this name in the SafeJob's namespace from
// the API server itself (a quorum read, not the cache) into obj, and says
// who holds the name.
func (r *SafeJobReconciler) readLive(ctx context.Context, sj *batchv1alpha1.SafeJob, name string, obj client.Object) (holder, error) {
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sj.Namespace, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return heldByNone, nil
	case err != nil:
		return heldByNone, err
	case controls(sj, obj):
		return heldByOwn, nil
	}
	return heldByStranger, nil
}

// controls reports whether sj controls obj: its controller reference, or
// for a run MultiKueue dispatches, the parent its annotations name.
func controls(sj *batchv1alpha1.SafeJob, obj client.Object) bool {
	if run, ok := obj.(*batchv1alpha1.SafeJob); ok {
		return batchv1alpha1.IsRunOf(run, sj)
	}
	return metav1.IsControlledBy(obj, sj)
}
