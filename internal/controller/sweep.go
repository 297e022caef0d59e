package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// A pod whose name label was removed while no operator process watched
// never reaches the cache (CacheOptions selects on the label). While its
// launch is open, the live read of the launch finds it and puts the label
// back (gather); once its outcome is recorded nothing reads it live, and
// its ledger finalizer, released through the cache, would stay for good.
// So a process that starts leading looks, once and beside its reconciles,
// for the pods that hold the ledger finalizer without the label and that a
// SafeJob controls: it labels those whose SafeJob lives, which brings them
// back to the cache to be counted and released as any other, and releases
// those whose SafeJob is gone.

// sweepPageSize is how many pods one list of the sweep asks for: it reads
// every unlabelled pod in the cluster's metadata, once per start.
const sweepPageSize = 500

// sweepRetry is the first wait after a round of the sweep that failed; it
// doubles with every round up to a minute.
var sweepRetry = time.Second

// sweptPod is a pod the sweep found: the SafeJob name (key) and UID
// (owner) its controller reference gives, and the pod.
type sweptPod struct {
	key   types.NamespacedName
	owner types.UID
	pod   unlabeledPod
}

// sweepUnlabeled lists, by metadata only and page by page, the pods without
// the SafeJob name label in Options.Namespaces (all when empty), and settles each
// that holds the ledger finalizer and is controlled by a SafeJob
// (settleSwept); failed holds, by UID, those it could not settle yet, and
// it removes from failed those it settled. It returns how many it settled,
// and an error if a list failed or ctx ended (each pod of the pages read
// was tried, and those that failed are in failed).
func (r *SafeJobReconciler) sweepUnlabeled(ctx context.Context, failed map[types.UID]sweptPod) (int, error) {
	unlabeled, err := labels.NewRequirement(batchv1alpha1.SafeJobNameLabel, selection.DoesNotExist, nil)
	if err != nil {
		return 0, fmt.Errorf("selecting unlabelled pods: %w", err)
	}
	sel := client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*unlabeled)}
	namespaces := r.Options.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	settled := 0
	for _, ns := range namespaces {
		var cont string
		for {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
			if err := r.APIReader.List(ctx, list, client.InNamespace(ns), sel,
				client.Limit(sweepPageSize), client.Continue(cont)); err != nil {
				return settled, fmt.Errorf("listing pods without the name label: %w", err)
			}
			for i := range list.Items {
				if err := ctx.Err(); err != nil {
					return settled, fmt.Errorf("looking for unlabelled pods: %w", err)
				}
				pod := &list.Items[i]
				ref := metav1.GetControllerOfNoCopy(pod)
				if ref == nil || !batchv1alpha1.IsSafeJobRef(ref) ||
					!slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
					continue
				}
				p := sweptPod{key: types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name},
					owner: ref.UID, pod: unlabeledPod{name: pod.Name, uid: pod.UID}}
				if r.settleNoting(ctx, failed, p) {
					settled++
				}
			}
			if cont = list.GetContinue(); cont == "" {
				break
			}
		}
	}
	return settled, nil
}

// settleSwept settles one pod the sweep found, and reports whether it did.
// Its SafeJob is read live: while it lives, the pod is labelled, back in
// the cache to be counted and released as any other; once it is gone (a
// SafeJob of the same name may have taken its place), nothing will record
// the pod's outcome, and its finalizer is released, as releasePods
// releases those of the pods of a SafeJob that no longer lives.
func (r *SafeJobReconciler) settleSwept(ctx context.Context, p sweptPod) bool {
	// relabel and releaseFinalizer name the pod; the sweep reads every
	// namespace, so its logger says which.
	logger := log.FromContext(ctx).WithValues("namespace", p.key.Namespace, "creator", p.owner)
	ctx = log.IntoContext(ctx, logger)
	live := &batchv1alpha1.SafeJob{}
	err := r.APIReader.Get(ctx, p.key, live)
	switch {
	case client.IgnoreNotFound(err) != nil:
		err = fmt.Errorf("reading SafeJob %s live: %w", p.key, err)
	case err == nil && live.UID == p.owner:
		err = r.relabel(ctx, p.key, p.pod)
	default:
		logger.V(1).Info("Releasing unlabelled pod of deleted SafeJob", "pod", p.pod.name)
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name, pod.UID = p.key.Namespace, p.pod.name, p.pod.uid
		pod.Finalizers = []string{batchv1alpha1.LedgerFinalizer}
		err = r.releaseFinalizer(ctx, pod)
	}
	if err != nil {
		if ctx.Err() == nil { // not when the process stops: no retry comes then
			logger.Error(err, "Pod holding the ledger finalizer not settled: tried again", "pod", p.pod.name)
		}
		return false
	}
	return true
}

// settleNoting settles p (settleSwept) and keeps failed, by pod UID, to
// the pods not settled yet: p leaves it when settled, joins it when not.
func (r *SafeJobReconciler) settleNoting(ctx context.Context, failed map[types.UID]sweptPod, p sweptPod) bool {
	if r.settleSwept(ctx, p) {
		delete(failed, p.pod.uid)
		return true
	}
	failed[p.pod.uid] = p
	return false
}

// runSweep runs sweepUnlabeled until one list has gone through every page,
// and settles again the pods it could not settle until none is left, each
// round after the last failed, backing off up to a minute; or until ctx ends.
// A list that starts over (after any failure) skips the pods already
// labelled (the selector leaves them out) or released.
func (r *SafeJobReconciler) runSweep(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("sweep")
	ctx = log.IntoContext(ctx, logger)
	failed := map[types.UID]sweptPod{}
	listed, settled := false, 0
	for delay := sweepRetry; ; delay = min(2*delay, time.Minute) {
		if !listed {
			n, err := r.sweepUnlabeled(ctx, failed)
			settled += n
			if listed = err == nil; !listed && ctx.Err() == nil {
				logger.Error(err, "Looking for unlabelled pods that hold the ledger finalizer: tried again")
			}
		} else {
			for _, p := range failed {
				if ctx.Err() != nil {
					break
				}
				if r.settleNoting(ctx, failed, p) {
					settled++
				}
			}
		}
		if listed && len(failed) == 0 {
			if settled > 0 {
				logger.Info("Settled unlabelled pods that held the ledger finalizer", "settled", settled)
			} else {
				logger.V(1).Info("Found no unlabelled pod holding the ledger finalizer")
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // never the manager's error
		case <-time.After(delay):
		}
	}
}
