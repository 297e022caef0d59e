package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestTTLResult(t *testing.T) {
	finished := time.Unix(1000, 0)
	sj := &batchv1alpha1.SafeJob{
		Spec: batchv1alpha1.SafeJobSpec{TTLSecondsAfterFinished: ptr.To[int32](60)},
		Status: batchv1alpha1.SafeJobStatus{Conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionComplete,
			Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(finished)}}},
	}
	clk := clocktesting.NewFakePassiveClock(finished.Add(20 * time.Second))
	r := &SafeJobReconciler{Clock: clk}
	if expired, res := r.ttlResult(sj); expired || res.RequeueAfter != 40*time.Second {
		t.Errorf("20s after finish: expired %v requeue %s, want false and 40s", expired, res.RequeueAfter)
	}
	clk.SetTime(finished.Add(60 * time.Second))
	if expired, _ := r.ttlResult(sj); !expired {
		t.Error("60s after finish with TTL 60: not expired")
	}
	sj.Status.Conditions = nil
	if expired, res := r.ttlResult(sj); expired || res.RequeueAfter != 0 {
		t.Error("TTL applied to an unfinished SafeJob")
	}
}
