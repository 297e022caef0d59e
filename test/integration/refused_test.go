package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// TestPodCreatesRefusedByQuota: while a ResourceQuota refuses every pod, the
// SafeJob says so in one condition (PodCreateFailure, reason FailedCreate,
// the API server's message) and one event, not one per pod and retry;
// one launch at a time waits for its pod, so launches that go Lost churn a
// single slot; status.active counts no pod. Once the quota allows pods the
// condition goes and the SafeJob completes.
func TestPodCreatesRefusedByQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, succeed, false)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods", Namespace: h.ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := k8s.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	setQuota(t, quota, "0")
	startManager(t, h.ns, managerOptions{fence: shortFence})
	sj := testutil.MakeSafeJob("quota", h.ns).Completions(3).Parallelism(3).Obj()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	waitFor(t, 30*time.Second, "the PodCreateFailure condition", func() (bool, error) {
		err := k8s.Get(ctx, key, sj)
		return conditionTrue(sj, batchv1alpha1.ConditionPodCreateFailure), err
	})
	c := condition(sj, batchv1alpha1.ConditionPodCreateFailure)
	if c.Reason != jobs.ReasonFailedCreate || !strings.Contains(c.Message, "exceeded quota") || strings.Contains(c.Message, `"quota-`) {
		t.Errorf("condition %+v: want reason %s and the quota's message without a pod name", c, jobs.ReasonFailedCreate)
	}
	// The three first launches go Lost after their grace; from then on at
	// most one launch is open, however many go Lost.
	var st *jobs.State
	waitFor(t, 2*time.Minute, "five launches recorded Lost", func() (bool, error) {
		if err := k8s.Get(ctx, key, sj); err != nil {
			return false, err
		}
		var err error
		if st, err = jobs.Replay(&sj.Status.Ledger); err != nil {
			return false, err
		}
		if st.Lost >= 3 && len(st.Open) > 1 {
			t.Fatalf("%d launches open while creates are refused: %v", len(st.Open), st.Open)
		}
		if sj.Status.Active != 0 {
			t.Fatalf("status.active %d with no pod", sj.Status.Active)
		}
		return st.Lost >= 5, nil
	})
	if failedCreate := countEvents(t, h.ns, sj.Name, "FailedCreate"); failedCreate != 1 {
		t.Errorf("%d FailedCreate events for %d refused launches, want one", failedCreate, st.Lost)
	}
	setQuota(t, quota, "10")
	sj = waitFinished(t, key, time.Minute)
	if !conditionTrue(sj, batchv1alpha1.ConditionComplete) || condition(sj, batchv1alpha1.ConditionPodCreateFailure) != nil {
		t.Errorf("conditions %+v: want Complete and no PodCreateFailure", sj.Status.Conditions)
	}
	h.finalCheck(t, sj)
}

// setQuota sets a quota's pod limit, and its status as the quota controller
// would (none runs here): admission reads the status.
func setQuota(t *testing.T, quota *corev1.ResourceQuota, pods string) {
	t.Helper()
	ctx := context.Background()
	quota.Spec.Hard[corev1.ResourcePods] = resource.MustParse(pods)
	if err := k8s.Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard,
		Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if err := k8s.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
}

// countEvents counts the events with the reason about the named object.
func countEvents(t *testing.T, ns, name, reason string) int {
	t.Helper()
	events := &corev1.EventList{}
	if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events.Items {
		if e.Reason == reason && e.InvolvedObject.Name == name {
			n++
		}
	}
	return n
}
