package controller

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TestTemplateFollows: a ledger takes its Job's template when batch/v1
// would let a Job's change (suspended, no active pod, never started or
// Suspended), as the immutable-spec policy allows, and at no other time.
func TestTemplateFollows(t *testing.T) {
	started := ptr.To(metav1.Now())
	suspendedCond := []metav1.Condition{{Type: batchv1alpha1.ConditionSuspended, Status: metav1.ConditionTrue}}
	resumedCond := []metav1.Condition{{Type: batchv1alpha1.ConditionSuspended, Status: metav1.ConditionFalse}}
	for name, tc := range map[string]struct {
		suspend bool
		status  batchv1alpha1.SafeJobStatus
		want    bool
	}{
		"running":                  {status: batchv1alpha1.SafeJobStatus{StartTime: started, Active: 1}},
		"never started, suspended": {suspend: true, want: true},
		"suspended and stopped":    {suspend: true, status: batchv1alpha1.SafeJobStatus{StartTime: started, Conditions: suspendedCond}, want: true},
		"suspended, a pod still terminating": {suspend: true, status: batchv1alpha1.SafeJobStatus{StartTime: started, Terminating: ptr.To[int32](1),
			Conditions: suspendedCond}},
		"suspend asked, pods still active":    {suspend: true, status: batchv1alpha1.SafeJobStatus{StartTime: started, Active: 2, Conditions: suspendedCond}},
		"suspend asked, not yet Suspended":    {suspend: true, status: batchv1alpha1.SafeJobStatus{StartTime: started, Conditions: resumedCond}},
		"resumed, no pod seen yet":            {status: batchv1alpha1.SafeJobStatus{StartTime: started, Conditions: resumedCond}},
		"resumed while the condition says so": {status: batchv1alpha1.SafeJobStatus{StartTime: started, Conditions: suspendedCond}},
	} {
		t.Run(name, func(t *testing.T) {
			ledger := &batchv1alpha1.SafeJob{Spec: batchv1alpha1.SafeJobSpec{Suspend: ptr.To(tc.suspend)}, Status: tc.status}
			if got := templateFollows(ledger); got != tc.want {
				t.Errorf("templateFollows = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFollowResumesWhenTemplateRefused: the API server refuses a ledger's
// template change (its immutable-spec policy is older than the operator):
// the resume that came with it still lands, with the template it had, and
// an event says the change was not applied.
func TestFollowResumesWhenTemplateRefused(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ledger := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns"},
		Spec: batchv1alpha1.SafeJobSpec{Suspend: ptr.To(true)},
		Status: batchv1alpha1.SafeJobStatus{StartTime: ptr.To(metav1.Now()),
			Conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionSuspended, Status: metav1.ConditionTrue}}}}
	refused := 0
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ledger).WithStatusSubresource(ledger).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object,
			patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			if strings.Contains(string(data), `"template"`) {
				refused++
				return apierrors.NewInvalid(schema.GroupKind{Group: "batch.safejob.dev", Kind: "SafeJob"}, obj.GetName(),
					field.ErrorList{field.Invalid(field.NewPath("spec", "template"), nil, "template is immutable")})
			}
			return c.Patch(ctx, obj, patch, opts...)
		}}).Build()
	if err := cl.Get(ctx, client.ObjectKeyFromObject(ledger), ledger); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	r := &JobReconciler{Client: cl, Recorder: rec}
	spec := *ledger.Spec.DeepCopy()
	spec.Suspend = ptr.To(false)
	spec.Template.Spec.NodeSelector = map[string]string{"flavor": "b"}
	if err := r.follow(ctx, &batchv1.Job{}, ledger, spec); err != nil {
		t.Fatalf("follow: %v", err)
	}
	got := &batchv1alpha1.SafeJob{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(ledger), got); err != nil {
		t.Fatal(err)
	}
	if refused != 1 || ptr.Deref(got.Spec.Suspend, true) || got.Spec.Template.Spec.NodeSelector != nil {
		t.Errorf("after a refused template: %d refused, suspend %v, node selector %v; want 1, false and none",
			refused, ptr.Deref(got.Spec.Suspend, true), got.Spec.Template.Spec.NodeSelector)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "SpecNotApplied") {
			t.Errorf("event %q, want SpecNotApplied", e)
		}
	default:
		t.Error("no event says the template change was not applied")
	}
}
