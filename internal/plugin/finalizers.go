package plugin

import (
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/release"
)

const (
	// LeaseName is the operator's leader election Lease.
	LeaseName = "safejob.batch.safejob.dev"
	// DefaultOperatorNamespace is where the manifests and the chart install
	// the operator.
	DefaultOperatorNamespace = "safejob-system"
	// WorkloadFinalizer is the finalizer the operator's Kueue Workloads
	// carry until it lets them go.
	WorkloadFinalizer = kueue.ResourceInUseFinalizerName
)

// Alive describes the Lease of an operator that looks alive.
type Alive struct {
	Namespace string
	Holder    string
	// Age is how long ago it was renewed, Duration how long it lasts.
	Age, Duration time.Duration
}

func (a *Alive) String() string {
	return fmt.Sprintf("Lease %s/%s held by %s was renewed %s ago and lasts %s", a.Namespace, LeaseName, a.Holder,
		a.Age.Round(time.Second), a.Duration)
}

// OperatorAlive returns the operator's leader election Lease when it was
// renewed within its duration, nil when no Lease says an operator runs. It
// reads the Lease in every namespace the user can list, or, when that is
// refused, in ns.
func OperatorAlive(ctx context.Context, cl client.Reader, ns string, now time.Time) (*Alive, error) {
	var leases []coordinationv1.Lease
	var list coordinationv1.LeaseList
	err := cl.List(ctx, &list)
	switch {
	case err == nil:
		leases = list.Items
	case apierrors.IsForbidden(err):
		var l coordinationv1.Lease
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: LeaseName}, &l); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading Lease %s/%s: %w", ns, LeaseName, err)
		}
		leases = []coordinationv1.Lease{l}
	default:
		return nil, fmt.Errorf("listing Leases: %w", err)
	}
	for _, l := range leases {
		s := l.Spec
		if l.Name != LeaseName || s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue // a released Lease has no holder
		}
		age, d := now.Sub(s.RenewTime.Time), time.Duration(*s.LeaseDurationSeconds)*time.Second
		if age < d {
			return &Alive{Namespace: l.Namespace, Holder: *s.HolderIdentity, Age: max(age, 0), Duration: d}, nil
		}
	}
	return nil, nil
}

// WorkloadsServed reports whether the API server serves Kueue's Workloads
// (kueue.x-k8s.io/v1beta2), the version the operator makes.
func WorkloadsServed(d discovery.DiscoveryInterface) (bool, error) {
	res, err := d.ServerResourcesForGroupVersion(kueue.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) || discovery.IsGroupDiscoveryFailedError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the API server whether it serves %s: %w", kueue.SchemeGroupVersion, err)
	}
	for _, r := range res.APIResources {
		if r.Kind == "Workload" {
			return true, nil
		}
	}
	return false, nil
}

// listSafeJobs lists the SafeJobs of ns ("" for all namespaces); none when
// the SafeJob CRD is not installed.
func listSafeJobs(ctx context.Context, cl client.Reader, ns string) ([]batchv1alpha1.SafeJob, error) {
	var list batchv1alpha1.SafeJobList
	if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing SafeJobs: %w", err)
	}
	return list.Items, nil
}

// released is what came of removing one finalizer.
type released int

const (
	releasedNow   released = iota // removed
	releasedGone                  // the object is gone, or no longer holds it
	releasedTaken                 // the name is held by an object of another UID now
)

// releasePod removes the ledger finalizer of pod, and of no pod that took
// its name since it was read.
func releasePod(ctx context.Context, cl client.Writer, pod client.Object) (released, error) {
	err := cl.Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, release.PodPatch(pod.GetUID())))
	switch {
	case err == nil:
		return releasedNow, nil
	case apierrors.IsNotFound(err):
		return releasedGone, nil
	case release.UIDRefused(err):
		return releasedTaken, nil
	}
	return 0, fmt.Errorf("removing finalizer %s of pod %s/%s: %w", batchv1alpha1.LedgerFinalizer, pod.GetNamespace(), pod.GetName(), err)
}

// releaseByIndex removes finalizer from obj (a SafeJob or a Workload: no
// strategic merge patch for them) with a JSON patch that tests obj's UID
// and the finalizer's index, so that neither an object that took its name
// nor another's edit of the list is touched. A failed test reads it again.
func releaseByIndex(ctx context.Context, cl client.Client, obj client.Object, finalizer string) (released, error) {
	key := client.ObjectKeyFromObject(obj)
	var err error
	for range 3 {
		cur, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return 0, fmt.Errorf("copying %s", key)
		}
		if err = cl.Get(ctx, key, cur); err != nil {
			if apierrors.IsNotFound(err) {
				return releasedGone, nil
			}
			break
		}
		if cur.GetUID() != obj.GetUID() {
			return releasedTaken, nil
		}
		k := slices.Index(cur.GetFinalizers(), finalizer)
		if k < 0 {
			return releasedGone, nil
		}
		patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/uid","value":%q},`+
			`{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`,
			obj.GetUID(), k, finalizer, k)
		err = cl.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, []byte(patch)))
		switch {
		case err == nil:
			return releasedNow, nil
		case apierrors.IsNotFound(err):
			return releasedGone, nil
		case !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) && !apierrors.IsConflict(err):
			return 0, fmt.Errorf("removing finalizer %s of %s: %w", finalizer, key, err)
		}
		// a failed test is Invalid: the list changed, read it again
	}
	return 0, fmt.Errorf("removing finalizer %s of %s: %w", finalizer, key, err)
}
