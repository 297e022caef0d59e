package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRunParent(t *testing.T) {
	parent := &SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "p-uid"}}
	multiKueue := MultiKueueManagedBy
	other := "example.com/elsewhere"
	names := map[string]string{ParentLabel: "p", ParentUIDAnnotation: "p-uid"}
	owned := *metav1.NewControllerRef(parent, GroupVersion.WithKind("SafeJob"))
	pod := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "p-uid", Controller: owned.Controller}
	for _, c := range []struct {
		name      string
		refs      []metav1.OwnerReference
		ann       map[string]string
		managedBy *string
		want      bool
	}{
		{"owned", []metav1.OwnerReference{owned}, nil, nil, true},
		{"dispatched, named in annotations", nil, names, &multiKueue, true},
		{"annotations without MultiKueue", nil, names, nil, false},
		{"annotations of another controller's SafeJob", nil, names, &other, false},
		{"annotations beside another controller reference", []metav1.OwnerReference{pod}, names, &multiKueue, false},
		{"a parent UID without its name", nil, map[string]string{ParentUIDAnnotation: "p-uid"}, &multiKueue, false},
		{"nothing", nil, nil, &multiKueue, false},
	} {
		run := &SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-1", OwnerReferences: c.refs, Annotations: c.ann},
			Spec: SafeJobSpec{ManagedBy: c.managedBy}}
		if got := IsRunOf(run, parent); got != c.want {
			t.Errorf("%s: IsRunOf = %v, want %v", c.name, got, c.want)
		}
		if ref := RunParent(run); c.want && (ref.Name != "p" || ref.Kind != "SafeJob" || ref.Controller == nil || !*ref.Controller) {
			t.Errorf("%s: RunParent = %+v", c.name, ref)
		}
	}
	if IsRunOf(&SafeJob{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ParentLabel: "p", ParentUIDAnnotation: "x"}},
		Spec: SafeJobSpec{ManagedBy: &multiKueue}}, parent) {
		t.Error("a run naming another UID is a run of the parent")
	}
}

// TestIsSafeJobRefByGroupAndKind: a controller reference written under any
// version of the batch.safejob.dev group names a SafeJob, as upstream
// controllers compare group and kind; so the pods and runs a build made
// under v1alpha1 stay owned once a later build speaks another version.
func TestIsSafeJobRefByGroupAndKind(t *testing.T) {
	for _, c := range []struct {
		apiVersion, kind string
		want             bool
	}{
		{GroupVersion.String(), "SafeJob", true},
		{"batch.safejob.dev/v1beta1", "SafeJob", true},
		{"batch.safejob.dev/v1", "SafeJob", true},
		{"batch.safejob.dev/v1alpha1", "Job", false},
		{"batch/v1", "SafeJob", false},
		{"batch/v1", "Job", false},
		{"example.com/v1alpha1", "SafeJob", false},
		{"batch.safejob.dev.example.com/v1alpha1", "SafeJob", false},
		{"batch.safejob.dev", "SafeJob", false},
		{"", "SafeJob", false},
		{"batch.safejob.dev/v1alpha1/extra", "SafeJob", false},
	} {
		ref := &metav1.OwnerReference{APIVersion: c.apiVersion, Kind: c.kind, Name: "sj", UID: "u"}
		if got := IsSafeJobRef(ref); got != c.want {
			t.Errorf("IsSafeJobRef(%s, %s) = %v, want %v", c.apiVersion, c.kind, got, c.want)
		}
	}
	// A run made under another version of the group is still its parent's.
	parent := &SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "p-uid"}}
	controller := true
	run := &SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-1", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "batch.safejob.dev/v1beta1", Kind: "SafeJob", Name: "p", UID: "p-uid", Controller: &controller}}}}
	if !IsRunOf(run, parent) {
		t.Error("a run whose reference names batch.safejob.dev/v1beta1 is not its parent's")
	}
}
