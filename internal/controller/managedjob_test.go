package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
		"running":                             {status: batchv1alpha1.SafeJobStatus{StartTime: started, Active: 1}},
		"never started, suspended":            {suspend: true, want: true},
		"suspended and stopped":               {suspend: true, status: batchv1alpha1.SafeJobStatus{StartTime: started, Conditions: suspendedCond}, want: true},
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
