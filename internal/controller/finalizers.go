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
	ctx, cancel := outlive(ctx, r.Options.ReleaseDrain)
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

// releaseSet is which pods of a SafeJob name a release frees: every one, or
// every one but those the SafeJob of one UID controls (the SafeJob that
// lives under the name now, whose ledger records their outcomes).
type releaseSet struct {
	every bool
	// kept is the UID whose pods are left alone when not every.
	kept types.UID
}

// everyPod is the set of every pod of a name.
func everyPod() releaseSet { return releaseSet{every: true} }

// allPodsBut is the set of the pods of a name but those the SafeJob of uid
// controls; with no such SafeJob (uid ""), every pod.
func allPodsBut(uid types.UID) releaseSet {
	if uid == "" {
		return everyPod()
	}
	return releaseSet{kept: uid}
}

// holds reports whether pod is in the set.
func (s releaseSet) holds(pod *corev1.Pod) bool {
	return s.every || !controlledBy(pod, s.kept)
}

// releasePods frees the pods of the set that hold the ledger finalizer for
// a SafeJob of this name that is gone or going: with no ledger left to
// record their outcome, the finalizer only blocks their deletion. A pod is
// matched by the UID of the SafeJob that created it (its controller
// reference, or the controller-uid label that outlives an orphaning
// delete), never by name. A pod only labelled with the kept UID lost its
// controller reference by hand: that SafeJob reads it as a stranger's (its
// launch goes Lost, NameTaken) and never records its outcome, so it is
// released too. Pods without the ledger finalizer are never touched.
func (r *SafeJobReconciler) releasePods(ctx context.Context, key types.NamespacedName, set releaseSet) error {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(key.Namespace),
		client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: nameLabel(key.Name)}); err != nil {
		return fmt.Errorf("listing pods of deleted SafeJob: %w", err)
	}
	var errs []error
	for i := range list.Items {
		pod := &list.Items[i]
		if !set.holds(pod) {
			continue
		}
		ref := metav1.GetControllerOf(pod)
		if ref != nil && batchv1alpha1.IsSafeJobRef(ref) && ref.Name != key.Name {
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

// releaseLeftBehind frees the pods of this name that no living SafeJob's
// ledger records: all but those of the SafeJob that holds the name now,
// read live (the cache may lag behind a SafeJob created again under the
// name, or show one that is gone), and all of them when that is the
// SafeJob being deleted (deleting, its UID).
func (r *SafeJobReconciler) releaseLeftBehind(ctx context.Context, key types.NamespacedName, deleting types.UID) error {
	live := &batchv1alpha1.SafeJob{}
	if err := r.APIReader.Get(ctx, key, live); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading SafeJob %s live: %w", key.Name, err)
	}
	set := allPodsBut(live.UID)
	if live.UID == deleting {
		set = everyPod() // still the one being deleted: every pod of its name goes
	}
	return r.releasePods(ctx, key, set)
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

// releaseOwnerless frees the pods of this name that no SafeJob controls
// any more (an orphaning delete stripped their owner) once the pod handler
// has seen one (tracker.sawOwnerless); a failure notes them again.
func (r *SafeJobReconciler) releaseOwnerless(ctx context.Context, key types.NamespacedName) error {
	if !r.tracker.takeOwnerless(key) {
		return nil
	}
	if err := r.releaseLeftBehind(ctx, key, ""); err != nil {
		r.tracker.sawOwnerless(key)
		return err
	}
	return nil
}

// releaseDeleted lets go of what a SafeJob being deleted holds: its run
// finalizer once its parent cannot record it, its pods' and its Workloads'
// finalizers.
func (r *SafeJobReconciler) releaseDeleted(ctx context.Context, sj *batchv1alpha1.SafeJob) error {
	var errs []error
	if slices.Contains(sj.Finalizers, batchv1alpha1.RunFinalizer) {
		errs = append(errs, r.releaseRun(ctx, sj))
	}
	key := client.ObjectKeyFromObject(sj)
	errs = append(errs, r.releaseLeftBehind(ctx, key, sj.UID), r.releaseWorkloads(ctx, reconcile.Request{NamespacedName: key}, sj.UID))
	return errors.Join(errs...)
}

// releaseWorkload removes the resource-in-use finalizer of wl, and of no
// other Workload that has its name by now: the patch tests the UID.
func (r *SafeJobReconciler) releaseWorkload(ctx context.Context, wl *kueue.Workload) error {
	if !slices.Contains(wl.Finalizers, ResourceInUseFinalizer) {
		return nil
	}
	key := client.ObjectKeyFromObject(wl)
	newWorkload := func() client.Object { return &kueue.Workload{} }
	if err := r.removeFinalizerOf(ctx, key, wl.UID, ResourceInUseFinalizer, newWorkload, false); err != nil {
		return fmt.Errorf("removing finalizer %s of Workload %s: %w", ResourceInUseFinalizer, key.Name, err)
	}
	return nil
}

// removeFinalizerOf removes finalizer from the object of this key and UID
// only, with a JSON patch that tests the UID and the entry it removes, so
// that neither another object of the same name nor a concurrent finalizer
// edit is ever touched. It reads the cache first and, when the patch's test
// fails there (a stale copy), once more live. An object of another UID is
// read live too when liveOnOtherUID (a cache that lags behind the object),
// else taken as this one gone. Gone, or without the finalizer, is done.
func (r *SafeJobReconciler) removeFinalizerOf(ctx context.Context, key client.ObjectKey, uid types.UID, finalizer string,
	newObj func() client.Object, liveOnOtherUID bool) error {
	var err error
	for _, reader := range []client.Reader{r.Client, r.APIReader} {
		cur := newObj()
		if err = reader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cur.GetUID() != uid {
			if !liveOnOtherUID {
				return nil
			}
			err = nil
			continue
		}
		k := slices.Index(cur.GetFinalizers(), finalizer)
		if k < 0 {
			return nil
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},`+
			`{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`,
			uid, k, finalizer, k)
		err = r.Client.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, []byte(patch)))
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
			break // a failed test is Invalid: read again, live
		}
	}
	return err
}

// releaseWorkloads removes the finalizer of the Workloads of a SafeJob that
// is gone or going, matched by the SafeJob's UID, never by its name. When
// the SafeJob is gone and its UID unknown (uid ""), a Workload is released
// only if it is one this controller made for a SafeJob of that name whose
// UID no SafeJob has any more: controlled by that UID, labelled with it and
// named after it. A Workload of a SafeJob that exists is never touched.
func (r *SafeJobReconciler) releaseWorkloads(ctx context.Context, req reconcile.Request, uid types.UID) error {
	if !r.Options.Kueue {
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
