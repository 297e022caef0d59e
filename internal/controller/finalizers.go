package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/release"
)

// releaseFinalizer removes the ledger finalizer of pod, and of no other pod
// that has its name by now, with a strategic merge patch that deletes it by
// value, as the Job controller removes its own: another's edit of the list
// is never clobbered, and there is no index to go stale. The patch carries
// pod's UID, which the API server refuses to change: a pod created under
// the same name since pod was read is left as it is. A pod shown without
// the finalizer, or gone, is left alone.
//
// A release once begun is finished when the manager stops meanwhile: the
// patch runs under a context that outlives ctx by ReleaseDrain, so that a
// stopping operator does not leave the finalizer to a successor there may
// never be (an uninstall).
func (r *SafeJobReconciler) releaseFinalizer(ctx context.Context, pod *corev1.Pod) error {
	if !slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
		return nil
	}
	ctx, cancel := outlive(ctx, r.ReleaseDrain)
	defer cancel()
	err := r.Client.Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, release.PodPatch(pod.UID)))
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case release.UIDRefused(err):
		log.FromContext(ctx).Info("Pod finalizer not released: its name is held by another pod now", "pod", klog.KObj(pod), "uid", pod.UID)
		return nil
	}
	return fmt.Errorf("removing finalizer %s of %s: %w", batchv1alpha1.LedgerFinalizer, pod.Name, err)
}

// releaseOrphans frees the pods that hold the ledger finalizer for a SafeJob
// of this name that is gone or going: with no ledger left to record their
// outcome, the finalizer only blocks their deletion. A pod is matched by the
// UID of the SafeJob that created it (its controller reference, or the
// controller-uid label that outlives an orphaning delete), never by name:
// the pods keep controls, keep being the SafeJob of this name that lives now
// (if any), are left alone. A pod only labelled with keep's UID lost its
// controller reference by hand: keep reads it as a stranger's (its launch
// goes Lost, NameTaken) and never records its outcome, so it is released
// too. Pods without the ledger finalizer are never touched.
func (r *SafeJobReconciler) releaseOrphans(ctx context.Context, ns, name string, keep types.UID) error {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns),
		client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: nameLabel(name)}); err != nil {
		return fmt.Errorf("listing pods of deleted SafeJob: %w", err)
	}
	var errs []error
	key := types.NamespacedName{Namespace: ns, Name: name}
	for i := range list.Items {
		pod := &list.Items[i]
		if keep != "" && controlledBy(pod, keep) {
			continue
		}
		ref := metav1.GetControllerOf(pod)
		if ref != nil && batchv1alpha1.IsSafeJobRef(ref) && ref.Name != name {
			continue // another SafeJob's pod whose name label is shortened to the same
		}
		if ref != nil && batchv1alpha1.IsSafeJobRef(ref) {
			// Its name stays held until it is deleted (its delete event
			// forgets it): a SafeJob created again under this name names
			// its launches apart from it.
			r.tracker.sawHeld(key, pod.Name, pod.UID)
		}
		if !slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
			continue
		}
		log.FromContext(ctx).V(1).Info("Releasing pod of deleted SafeJob", "pod", klog.KObj(pod), "creator", creatorUID(pod))
		errs = append(errs, r.releaseFinalizer(ctx, pod))
	}
	return errors.Join(errs...)
}

// controlledBy reports whether the SafeJob of this UID controls pod.
func controlledBy(pod *corev1.Pod, uid types.UID) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && batchv1alpha1.IsSafeJobRef(ref) && ref.UID == uid
}

// creatorUID is the UID of the SafeJob that created a pod: its controller
// reference, or else the controller-uid label ("" when it has neither).
func creatorUID(pod *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(pod); ref != nil && batchv1alpha1.IsSafeJobRef(ref) {
		return ref.UID
	}
	return types.UID(pod.Labels[batchv1alpha1.ControllerUIDLabel])
}

// releaseStrays releases the ledger finalizer of pods of this name that no
// SafeJob controls any more (an orphaning delete stripped their owner) once
// the pod handler has seen one: the SafeJob of this name is read live, so a
// cache that lags behind a recreated SafeJob never frees a live one's pods.
func (r *SafeJobReconciler) releaseStrays(ctx context.Context, key types.NamespacedName) error {
	if !r.tracker.takeStrays(key) {
		return nil
	}
	sj := &batchv1alpha1.SafeJob{}
	err := r.APIReader.Get(ctx, key, sj)
	if client.IgnoreNotFound(err) != nil {
		r.tracker.sawStray(key)
		return fmt.Errorf("reading SafeJob %s live: %w", key.Name, err)
	}
	if err := r.releaseOrphans(ctx, key.Namespace, key.Name, sj.UID); err != nil {
		r.tracker.sawStray(key)
		return err
	}
	return nil
}

// releaseGone releases the pods of a SafeJob the cache no longer shows. A
// SafeJob of the same name the cache has not seen yet may exist: it is read
// live, and its pods are left alone.
func (r *SafeJobReconciler) releaseGone(ctx context.Context, req reconcile.Request) error {
	live := &batchv1alpha1.SafeJob{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, live); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading SafeJob %s live: %w", req.Name, err)
	}
	return r.releaseOrphans(ctx, req.Namespace, req.Name, live.UID)
}

// releaseAll lets go of what a deleted SafeJob holds: its run finalizer
// once its parent cannot record it, its pods' and its Workloads' finalizers.
func (r *SafeJobReconciler) releaseAll(ctx context.Context, req reconcile.Request, sj *batchv1alpha1.SafeJob) error {
	var errs []error
	if slices.Contains(sj.Finalizers, batchv1alpha1.RunFinalizer) {
		errs = append(errs, r.releaseRun(ctx, sj))
	}
	// The cache may show this SafeJob after it is gone and a SafeJob of the
	// same name took its place (a cache behind the API server, or a second
	// operator process): the live one's pods are left alone, as in
	// releaseGone.
	live := &batchv1alpha1.SafeJob{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, live); client.IgnoreNotFound(err) != nil {
		return errors.Join(append(errs, fmt.Errorf("reading SafeJob %s live: %w", req.Name, err))...)
	}
	keep := live.UID
	if keep == sj.UID {
		keep = "" // still this one, deleting: every pod of its name goes
	}
	errs = append(errs, r.releaseOrphans(ctx, req.Namespace, req.Name, keep), r.releaseWorkloads(ctx, req, sj.UID))
	return errors.Join(errs...)
}

// releaseWorkload removes the resource-in-use finalizer of wl, and of no
// other Workload that has its name by now: the patch tests the UID.
func (r *SafeJobReconciler) releaseWorkload(ctx context.Context, wl *kueue.Workload) error {
	if !slices.Contains(wl.Finalizers, ResourceInUseFinalizer) {
		return nil
	}
	key := client.ObjectKeyFromObject(wl)
	var err error
	for _, reader := range []client.Reader{r.Client, r.APIReader} {
		cur := &kueue.Workload{}
		if err = reader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		k := slices.Index(cur.Finalizers, ResourceInUseFinalizer)
		if cur.UID != wl.UID || k < 0 {
			return nil
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},`+
			`{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`,
			wl.UID, k, ResourceInUseFinalizer, k)
		err = r.Client.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, []byte(patch)))
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
			break // a failed test is Invalid: read again, live
		}
	}
	return fmt.Errorf("removing finalizer %s of Workload %s: %w", ResourceInUseFinalizer, key.Name, err)
}

// releaseWorkloads removes the finalizer of the Workloads of a SafeJob that
// is gone or going, matched by the SafeJob's UID, never by its name. When
// the SafeJob is gone and its UID unknown (uid ""), a Workload is released
// only if it is one this controller made for a SafeJob of that name whose
// UID no SafeJob has any more: controlled by that UID, labelled with it and
// named after it. A Workload of a SafeJob that exists is never touched.
func (r *SafeJobReconciler) releaseWorkloads(ctx context.Context, req reconcile.Request, uid types.UID) error {
	if !r.Kueue {
		return nil
	}
	var candidates []*kueue.Workload
	if uid != "" {
		list, err := r.controlledWorkloads(ctx, req.Namespace, uid)
		if err != nil {
			return err
		}
		candidates = list
	} else {
		var list kueue.WorkloadList
		if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
			return fmt.Errorf("listing Workloads: %w", err)
		}
		for i := range list.Items {
			if madeFor(&list.Items[i], req.Name) && slices.Contains(list.Items[i].Finalizers, ResourceInUseFinalizer) {
				candidates = append(candidates, &list.Items[i])
			}
		}
		if len(candidates) == 0 {
			return nil
		}
		// The cache said the SafeJob is gone; the API server says which UID
		// holds the name now, if any.
		live := &batchv1alpha1.SafeJob{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, live); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting SafeJob: %w", err)
		}
		candidates = slices.DeleteFunc(candidates, func(wl *kueue.Workload) bool {
			return live.UID != "" && metav1.IsControlledBy(wl, live)
		})
	}
	var errs []error
	for _, wl := range candidates {
		errs = append(errs, r.releaseWorkload(ctx, wl))
	}
	return errors.Join(errs...)
}

// madeFor reports whether wl is a Workload this controller made for a
// SafeJob of that name: controlled by its UID, labelled with it and named
// after it, or made by MultiKueue and adopted by it (see adoptPrebuilt).
func madeFor(wl *kueue.Workload, name string) bool {
	ref := metav1.GetControllerOfNoCopy(wl)
	return ref != nil && batchv1alpha1.IsSafeJobRef(ref) && ref.Name == name && ref.UID != "" &&
		wl.Labels[JobUIDLabel] == string(ref.UID) &&
		(slices.Contains(jobs.WorkloadNames(ref.Name, ref.UID), wl.Name) || wl.Labels[kueue.MultiKueueOriginLabel] != "")
}
