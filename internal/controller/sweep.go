package controller

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// A pod whose name label was removed while no operator process watched
// never reaches the cache (CacheOptions selects on the label). While its
// launch is open, the live read of the launch finds it and puts the label
// back (gather); once its outcome is recorded nothing reads it live, and
// its ledger finalizer, released through the cache, would stay for good.
// So a process that starts leading first looks, once, for the pods that
// hold the ledger finalizer without the label, and labels those a SafeJob
// controls: in the cache again, they are released as any other (their
// outcome recorded), or as strays (their SafeJob gone).

// sweepPageSize is how many pods one list of the sweep asks for: it reads
// every unlabelled pod in the cluster's metadata, once per start.
const sweepPageSize = 500

// sweepUnlabeled lists, by metadata only and page by page, the pods without
// the SafeJob name label in r.Namespaces (all when empty), and relabels each
// that holds the ledger finalizer and is controlled by a SafeJob. It returns
// how many it labelled.
func (r *SafeJobReconciler) sweepUnlabeled(ctx context.Context) (int, error) {
	unlabeled, err := labels.NewRequirement(batchv1alpha1.SafeJobNameLabel, selection.DoesNotExist, nil)
	if err != nil {
		return 0, fmt.Errorf("selecting unlabelled pods: %w", err)
	}
	sel := client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*unlabeled)}
	namespaces := r.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	labelled := 0
	for _, ns := range namespaces {
		var cont string
		for {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
			if err := r.APIReader.List(ctx, list, client.InNamespace(ns), sel,
				client.Limit(sweepPageSize), client.Continue(cont)); err != nil {
				return labelled, fmt.Errorf("listing pods without the name label: %w", err)
			}
			for i := range list.Items {
				pod := &list.Items[i]
				ref := metav1.GetControllerOfNoCopy(pod)
				if ref == nil || !batchv1alpha1.IsSafeJobRef(ref) ||
					!slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
					continue
				}
				key := types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}
				if err := r.relabel(ctx, key, unlabeledPod{name: pod.Name, uid: pod.UID}); err != nil {
					return labelled, err
				}
				labelled++
			}
			if cont = list.GetContinue(); cont == "" {
				break
			}
		}
	}
	return labelled, nil
}

// runSweep runs sweepUnlabeled until it succeeds once, backing off after
// each failure up to a minute (an expired continue token starts the list
// over), or until ctx ends.
func (r *SafeJobReconciler) runSweep(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("sweep")
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: time.Minute}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		n, err := r.sweepUnlabeled(ctx)
		if err != nil {
			logger.Error(err, "Looking for unlabelled pods that hold the ledger finalizer: tried again", "labelled", n)
			return false, nil
		}
		logger.V(1).Info("Looked for unlabelled pods that hold the ledger finalizer", "labelled", n)
		return true, nil
	})
	return nil // never the manager's error: it fails only when ctx ends
}
