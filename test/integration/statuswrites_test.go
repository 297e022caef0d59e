package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	safejobtestutil "github.com/safejob/safejob/test/testutil"
)

// launchCommitDelay widens each launch commit, so that commits the bound
// let through together would be seen in flight together.
const launchCommitDelay = 100 * time.Millisecond

// TestLaunchCommitsBoundedEndToEnd runs SafeJobs arriving at once through a
// controller whose launch commits are bounded to one in flight
// (--concurrent-status-writes=1): no two are ever in flight together, and
// every SafeJob still gets exactly its one pod and records its success.
func TestLaunchCommitsBoundedEndToEnd(t *testing.T) {
	skipWithoutPacing(t)
	t.Parallel()
	ns := newNamespace(t)
	w := &launchCommitWatcher{}
	startManager(t, ns, managerOptions{statusWrites: 1, wrapClient: func(c client.Client, _ context.CancelFunc) client.Client {
		w.Client = c
		return w
	}})
	const n = 8
	for i := range n {
		if err := k8s.Create(context.Background(), safejobtestutil.MakeSafeJob(fmt.Sprintf("bounded-%d", i), ns).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitPods(t, ns, n)
	if got := w.most.Load(); got != 1 {
		t.Errorf("%d launch commits were in flight at once, want 1", got)
	}
	if got := w.commits.Load(); got != n {
		t.Errorf("%d status writes before any success, want %d (one launch commit each)", got, n)
	}
	for i := range pods {
		setPodStatus(t, &pods[i], func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	}
	for i := range n {
		key := client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("bounded-%d", i)}
		if got := waitFinished(t, key, 30*time.Second); !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 {
			t.Errorf("SafeJob %s: want Complete with 1 succeeded, got %+v", key.Name, got.Status)
		}
	}
	if got := len(podsIn(t, ns)); got != n {
		t.Errorf("%d pods, want %d", got, n)
	}
}

// launchCommitWatcher counts the SafeJob status writes in flight before any
// success, each held launchCommitDelay.
type launchCommitWatcher struct {
	client.Client
	inFlight, most, commits atomic.Int32
}

func (w *launchCommitWatcher) Status() client.SubResourceWriter {
	return launchCommitWriter{w.Client.Status(), w}
}

type launchCommitWriter struct {
	client.SubResourceWriter
	w *launchCommitWatcher
}

func (l launchCommitWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	sj, ok := obj.(*batchv1alpha1.SafeJob)
	if !ok || sj.Status.Succeeded > 0 {
		return l.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	}
	// Before any success, this test's SafeJobs write only to commit their
	// launch (their pods never run).
	l.w.commits.Add(1)
	now := l.w.inFlight.Add(1)
	defer l.w.inFlight.Add(-1)
	for {
		m := l.w.most.Load()
		if now <= m || l.w.most.CompareAndSwap(m, now) {
			break
		}
	}
	time.Sleep(launchCommitDelay)
	return l.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
