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
