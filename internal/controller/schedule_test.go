package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/runs"
)

// TestNewRunParentReference: a run is controlled by its parent through an
// owner reference, except a run MultiKueue dispatches, which names its
// parent in annotations; either way it is indexed and found as the
// parent's run.
func TestNewRunParentReference(t *testing.T) {
	at := time.Date(2026, 11, 25, 3, 0, 0, 0, time.UTC)
	for _, managedBy := range []*string{nil, ptr.To(batchv1alpha1.MultiKueueManagedBy)} {
		parent := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "parent-uid"},
			Spec: batchv1alpha1.SafeJobSpec{Schedule: ptr.To("@daily"), ManagedBy: managedBy}}
		run := newRun(parent, runs.Ref{Name: runs.Name("nightly", at), ScheduledTime: at})
		dispatched := managedBy != nil
		if got := len(run.OwnerReferences) == 0; got != dispatched {
			t.Errorf("managedBy %v: ownerReferences %v", managedBy, run.OwnerReferences)
		}
		if got := run.Annotations[batchv1alpha1.ParentUIDAnnotation] == "parent-uid"; got != dispatched {
			t.Errorf("managedBy %v: annotations %v", managedBy, run.Annotations)
		}
		if !batchv1alpha1.IsRunOf(run, parent) || !controls(parent, run) {
			t.Errorf("managedBy %v: the run is not the parent's", managedBy)
		}
		if got := indexRunParent(run); len(got) != 1 || got[0] != "parent-uid" {
			t.Errorf("managedBy %v: indexed under %v", managedBy, got)
		}
		if run.Spec.Schedule != nil || ptr.Deref(run.Spec.ManagedBy, "") != ptr.Deref(managedBy, "") {
			t.Errorf("managedBy %v: run spec schedule %v managedBy %v", managedBy, run.Spec.Schedule, run.Spec.ManagedBy)
		}
	}
}

// TestMultiKueueManagedBy: the API's copy of Kueue's MultiKueue controller
// name (the API package does not import Kueue) is Kueue's.
func TestMultiKueueManagedBy(t *testing.T) {
	if batchv1alpha1.MultiKueueManagedBy != kueue.MultiKueueControllerName {
		t.Errorf("%q, Kueue's is %q", batchv1alpha1.MultiKueueManagedBy, kueue.MultiKueueControllerName)
	}
}
