package controller

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TestStatusWritesShareProcessWideSlots checks that no more status writes
// are in flight at once than ConcurrentStatusWrites, however many
// reconciles commit together, that every one of them is still made, and
// that a commit whose context ends while it waits for a slot writes
// nothing and says so.
func TestStatusWritesShareProcessWideSlots(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	const n, slotsN = 12, 3
	var jobs []*batchv1alpha1.SafeJob
	var objs []client.Object
	for i := range n {
		sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sj-%d", i), Namespace: "ns"}}
		jobs = append(jobs, sj)
		objs = append(objs, sj)
	}
	var inFlight, most, writes, late atomic.Int32
	gate := make(chan struct{})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&batchv1alpha1.SafeJob{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				if ctx.Err() != nil { // the cancelled commit below, had it been let through
					late.Add(1)
					return ctx.Err()
				}
				now := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				<-gate // every write waits until the test lets them all go
				writes.Add(1)
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	r := &SafeJobReconciler{Client: c, Clock: clocktesting.NewFakePassiveClock(metav1.Now().Time),
		Metrics: NewMetrics(), tracker: newTracker(), statusWrites: newSlots(slotsN)}

	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, sj := range jobs {
		cur := &batchv1alpha1.SafeJob{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sj), cur); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			status := *cur.Status.DeepCopy()
			status.Active = 1
			_, err := r.commit(ctx, cur, status, nil)
			errs <- err
		})
	}
	for inFlight.Load() < slotsN { // every slot taken, by writes held at the gate
		goruntime.Gosched()
	}
	// A commit whose context ends while every slot is held makes no write.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	extra := jobs[0].DeepCopy()
	if _, err := r.commit(cancelled, extra, batchv1alpha1.SafeJobStatus{Active: 2}, nil); err == nil {
		t.Error("a commit whose context ended while waiting for a slot reported no error")
	}
	if late.Load() != 0 {
		t.Error("a commit whose context ended while every slot was held reached the API server")
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("commit: %v", err)
		}
	}
	if got := writes.Load(); got != n {
		t.Errorf("%d status writes made, want %d", got, n)
	}
	if got := most.Load(); got > slotsN {
		t.Errorf("%d status writes were in flight at once, want at most %d", got, slotsN)
	}
}
