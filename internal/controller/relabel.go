package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/release"
)

// The operator's cache holds only the pods that carry the SafeJob name
// label (CacheOptions). A pod of a SafeJob whose label someone removed is
// still the SafeJob's (ownership is its controller reference, docs/design.md,
// "Ownership"), but no event of it reaches the operator any more: its
// outcome would wait for a live read that nothing schedules, and its
// finalizer, released through the cache, would stay. So the operator puts
// the label back, as it first set it, on its own pods only.

// relabelNoted puts the label back on the pods of this SafeJob's name that
// the pod handler saw leave the cache undeleted, or whose restore after a
// live read failed; those it cannot label stay noted.
func (r *SafeJobReconciler) relabelNoted(ctx context.Context, key types.NamespacedName) error {
	var errs []error
	for _, p := range r.tracker.takeUnlabeled(key) {
		if err := r.relabel(ctx, key, p); err != nil {
			r.tracker.sawUnlabeled(key, p) // the next reconcile tries again
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// relabelLive puts the label back on pod, read live and found to be the
// SafeJob's, when it lacks it.
func (r *SafeJobReconciler) relabelLive(ctx context.Context, sj *batchv1alpha1.SafeJob, pod *corev1.Pod) error {
	if _, has := pod.Labels[batchv1alpha1.SafeJobNameLabel]; has {
		return nil
	}
	return r.relabel(ctx, client.ObjectKeyFromObject(sj), unlabeledPod{name: pod.Name, uid: pod.UID})
}

// relabel sets the name label of the SafeJob of this key on its pod p, as
// the pod was created with it, and on no other pod that took its name since
// (the patch carries the UID, which the API server refuses to change).
func (r *SafeJobReconciler) relabel(ctx context.Context, key types.NamespacedName, p unlabeledPod) error {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = key.Namespace, p.name
	label := nameLabel(key.Name)
	err := r.Client.Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, relabelPatch(p.uid, label)))
	switch {
	case err == nil:
		log.FromContext(ctx).Info("Restored the SafeJob name label of a pod", "pod", p.name, "label", label)
		return nil
	case apierrors.IsNotFound(err), release.UIDRefused(err):
		return nil // gone, or another pod has the name: not this SafeJob's business
	}
	return fmt.Errorf("labelling pod %s: %w", p.name, err)
}

// relabelPatch is the strategic merge patch that sets the SafeJob name
// label of the pod with this UID and changes nothing else.
func relabelPatch(uid types.UID, label string) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{ // strings only: never fails
		"uid": uid, "labels": map[string]string{batchv1alpha1.SafeJobNameLabel: label}}})
	return patch
}
