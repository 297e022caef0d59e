package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// MultiKueueManagedBy is the spec.managedBy of a SafeJob Kueue's
	// MultiKueue dispatches to a worker cluster.
	MultiKueueManagedBy = "kueue.x-k8s.io/multikueue"
	// ParentUIDAnnotation carries, on a run MultiKueue dispatches, the UID
	// of the scheduled SafeJob that controls it; ParentLabel's annotation
	// carries its name. Such a run has no owner reference: MultiKueue copies
	// a SafeJob to a worker whole, and an owner reference there would name a
	// parent the worker does not have, so its garbage collector would delete
	// the copy. The operator deletes such a run once its parent is gone.
	ParentUIDAnnotation = "batch.safejob.dev/parent-uid"
)

// Dispatched reports whether MultiKueue runs this SafeJob on a worker
// cluster: its managedBy names MultiKueue.
func (sj *SafeJob) Dispatched() bool {
	return sj.Spec.ManagedBy != nil && *sj.Spec.ManagedBy == MultiKueueManagedBy
}

// RunParent returns the reference to the scheduled SafeJob that controls
// run, or nil: its controller owner reference when that is a SafeJob, or,
// for a run MultiKueue dispatches that has no owner reference, the parent
// its annotations name.
func RunParent(run *SafeJob) *metav1.OwnerReference {
	if ref := metav1.GetControllerOfNoCopy(run); ref != nil {
		if IsSafeJobRef(ref) {
			return ref
		}
		return nil
	}
	name, uid := run.Annotations[ParentLabel], run.Annotations[ParentUIDAnnotation]
	if !run.Dispatched() || len(run.OwnerReferences) > 0 || name == "" || uid == "" {
		return nil
	}
	controller := true
	return &metav1.OwnerReference{
		APIVersion: GroupVersion.String(), Kind: "SafeJob", Name: name, UID: types.UID(uid), Controller: &controller,
	}
}

// IsSafeJobRef reports whether an owner reference names a SafeJob, of any
// version of the group: as upstream controllers do, it compares group and
// kind, so that what one version made stays owned once the operator speaks
// another (a pod created under v1alpha1 is not a stray to a v1beta1 build).
func IsSafeJobRef(ref *metav1.OwnerReference) bool {
	if ref.Kind != "SafeJob" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == GroupVersion.Group && gv.Version != ""
}

// IsRunOf reports whether parent controls run (RunParent).
func IsRunOf(run, parent *SafeJob) bool {
	ref := RunParent(run)
	return ref != nil && ref.UID == parent.UID
}
