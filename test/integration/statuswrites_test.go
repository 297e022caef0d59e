package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
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
		t.Errorf("%d launch commits were in flight at once, want 1; every attempt: %v", got, w.attempts())
	}
	for i := range n {
		name := fmt.Sprintf("bounded-%d", i)
		if got := w.stored(name); got != 1 {
			t.Errorf("SafeJob %s: %d ledger writes stored before any pod ran, want 1 (its launch commit); every attempt: %v",
				name, got, w.attempts())
		}
	}
	w.stop()
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

// launchCommitWatcher watches the SafeJob status writes that change the
// ledger until stop: before any pod has run, those are the launch commits.
// It counts how many are in flight at once, each held launchCommitDelay,
// and records each attempt: one that conflicted or failed stores nothing
// and is retried, so only those stored count as commits. Writes of the pod
// counters alone (active, once a pod is seen) are not commits and pass.
type launchCommitWatcher struct {
	client.Client
	inFlight, most atomic.Int32
	stopped        atomic.Bool

	mu  sync.Mutex
	log []launchCommitAttempt
}

// launchCommitAttempt is one ledger write and what the API server answered.
type launchCommitAttempt struct {
	name string
	err  error
}

func (a launchCommitAttempt) String() string {
	if a.err != nil {
		return a.name + ": " + a.err.Error()
	}
	return a.name + ": stored"
}

// stop ends the watch: the writes after it record outcomes.
func (w *launchCommitWatcher) stop() { w.stopped.Store(true) }

func (w *launchCommitWatcher) record(name string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, launchCommitAttempt{name: name, err: err})
}

// stored counts the ledger writes of SafeJob name the API server stored.
func (w *launchCommitWatcher) stored(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.log {
		if a.name == name && a.err == nil {
			n++
		}
	}
	return n
}

func (w *launchCommitWatcher) attempts() []launchCommitAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log)
}

func (w *launchCommitWatcher) Status() client.SubResourceWriter {
	return launchCommitWriter{w.Client.Status(), w}
}

type launchCommitWriter struct {
	client.SubResourceWriter
	w *launchCommitWatcher
}

func (l launchCommitWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if _, ok := obj.(*batchv1alpha1.SafeJob); !ok || l.w.stopped.Load() || !changesLedger(obj, patch) {
		return l.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	}
	now := l.w.inFlight.Add(1)
	defer l.w.inFlight.Add(-1)
	for {
		m := l.w.most.Load()
		if now <= m || l.w.most.CompareAndSwap(m, now) {
			break
		}
	}
	time.Sleep(launchCommitDelay)
	err := l.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	l.w.record(obj.GetName(), err)
	return err
}

// changesLedger reports whether a status merge patch writes the ledger's
// entries (a merge patch carries a list only when it changed).
func changesLedger(obj client.Object, patch client.Patch) bool {
	data, err := patch.Data(obj)
	if err != nil {
		return false
	}
	var p struct {
		Status struct {
			Ledger struct {
				Entries json.RawMessage `json:"entries"`
			} `json:"ledger"`
		} `json:"status"`
	}
	return json.Unmarshal(data, &p) == nil && p.Status.Ledger.Entries != nil
}
