package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
)

// TestDecisionTimedAfterLiveReads checks that a decision that needed live
// reads is timed after them: on a slow API server they take seconds, and a
// launch committed with the time from before them had its create window
// spent by the reads, so that it was never created and went Lost again.
func TestDecisionTimedAfterLiveReads(t *testing.T) {
	start := time.Unix(1000, 0)
	const readTakes = 12 * time.Second
	clk := clocktesting.NewFakePassiveClock(start)
	sj := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"},
		Spec:       batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)},
		Status: batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{
			{Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "a-0-0",
				Time: metav1.NewTime(start.Add(-ledger.DefaultFence.LostGrace() - time.Second))}}}},
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reads := 0
	live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads++
			clk.SetTime(clk.Now().Add(readTakes))
			return c.Get(ctx, key, obj, opts...) // not found: the launch's pod never came
		},
	}).Build()
	cached := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&corev1.Pod{}, controllerUIDIndex, indexActivePodController).Build()
	r := &SafeJobReconciler{Client: cached, APIReader: live, tracker: newTracker(), Metrics: NewMetrics(), Clock: clk}

	in, _, err := r.gather(context.Background(), sj)
	if err != nil {
		t.Fatal(err)
	}
	if reads != 1 || !in.Gone["a-0-0"] {
		t.Fatalf("live reads %d, gone %v; want the open launch read once and found gone", reads, in.Gone)
	}
	plan, err := jobs.Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	var relaunch *batchv1alpha1.LedgerEntry
	for i, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched {
			relaunch = &plan.Append[i]
		}
	}
	if relaunch == nil {
		t.Fatalf("appended %v; want the index launched again", plan.Append)
	}
	if want := start.Add(readTakes); !relaunch.Time.Time.Equal(want) {
		t.Errorf("new launch committed at %s; want %s, after the live read", relaunch.Time.Time, want)
	}
}

// TestRunDecisionTimedAfterLiveReads is TestDecisionTimedAfterLiveReads for
// a schedule's runs: the decision that follows live reads of open runs is
// timed after them.
func TestRunDecisionTimedAfterLiveReads(t *testing.T) {
	start := time.Unix(100_000, 0)
	const readTakes = 12 * time.Second
	clk := clocktesting.NewFakePassiveClock(start)
	committed := start.Add(-ledger.DefaultFence.LostGrace() - time.Second)
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cron", UID: "u1"},
		Status: batchv1alpha1.SafeJobStatus{Ledger: batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{
			{Seq: 1, Type: batchv1alpha1.EntryScheduled, Run: "cron-1666",
				ScheduledTime: ptr.To(metav1.NewTime(committed)), Time: metav1.NewTime(committed)}}}}}
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			clk.SetTime(clk.Now().Add(readTakes))
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	r := &SafeJobReconciler{APIReader: live, Clock: clk}
	in := &runs.Input{Name: sj.Name, Status: &sj.Status, Runs: map[string]*batchv1alpha1.SafeJob{},
		Gone: map[string]bool{}, Taken: map[string]bool{}, Now: start}
	if err := r.confirmRuns(context.Background(), sj, in); err != nil {
		t.Fatal(err)
	}
	if !in.Gone["cron-1666"] {
		t.Fatalf("gone %v; want the open run read and found gone", in.Gone)
	}
	if want := start.Add(readTakes); !in.Now.Equal(want) {
		t.Errorf("runs decided at %s; want %s, after the live read", in.Now, want)
	}
}
