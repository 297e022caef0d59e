package integration

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

// TestSeedWatchDelay is kubernetes#130103: parallelism 1, completions 1,
// backoffLimit 0; the pod succeeds and is deleted at once while the
// controller sees SafeJob events two seconds after pod events. Exactly one
// pod may ever be created.
func TestSeedWatchDelay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, true)
	startManager(t, h.ns, managerOptions{wrapTransport: testutil.DelayWatch("/safejobs", 2*time.Second)})
	sj := testutil.MakeSafeJob("seed1", h.ns).BackoffLimit(0).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 {
		t.Fatalf("want Complete with 1 succeeded, got %d and %+v", got.Status.Succeeded, got.Status.Conditions)
	}
	if creates := h.finalCheck(t, got); len(creates) != 1 {
		t.Errorf("%d pods created, want exactly 1: %v", len(creates), creates)
	}
}

// TestSeedPodGC deletes every pod the moment it is terminal, as
// --terminated-pod-gc-threshold=1 would: every completion counts once and
// nothing re-runs.
func TestSeedPodGC(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, true)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("seed2", h.ns).Completions(20).Parallelism(5).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 20 {
		t.Fatalf("want Complete with 20 succeeded, got %d and %+v", got.Status.Succeeded, got.Status.Conditions)
	}
	if creates := h.finalCheck(t, got); len(creates) != 20 {
		t.Errorf("%d pods created for 20 completions: %v", len(creates), creates)
	}
}

// TestSeedLostEvents: the controller stops right after creating the pod, so
// it never sees it; the pod finishes and is deleted (or is force-deleted,
// finalizer and all) while no controller runs; a controller with an empty
// cache takes over. No deadlock, no duplicate, no timeout needed.
func TestSeedLostEvents(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		forceDelete bool
		// keepPod: the finished pod is not deleted; only its finalizer is
		// stripped (forceDelete).
		keepPod     bool
		wantCreates int
		wantLost    int
	}{
		"pod finished and deleted unseen": {wantCreates: 1},
		"pod force-deleted unseen":        {forceDelete: true, wantCreates: 2, wantLost: 1},
		// The pod is still there, terminal, without the finalizer: its
		// outcome is read from it, not declared Lost.
		"finalizer stripped from finished pod unseen": {forceDelete: true, keepPod: true, wantCreates: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, !tc.keepPod)
			wrap, crashed := stopAfter(isPodCreate, true)
			stop := startManager(t, h.ns, managerOptions{wrapClient: wrap})
			sj := testutil.MakeSafeJob("seed3", h.ns).BackoffLimit(0).Obj()
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatal(err)
			}
			awaitCrash(t, crashed)
			stop()
			pod := &corev1.Pod{}
			key := client.ObjectKey{Namespace: h.ns, Name: "seed3-0-0"}
			waitFor(t, 30*time.Second, "the pod to finish while no controller runs", func() (bool, error) {
				err := k8s.Get(context.Background(), key, pod)
				return err == nil && pod.Status.Phase == corev1.PodSucceeded && (tc.keepPod || pod.DeletionTimestamp != nil), client.IgnoreNotFound(err)
			})
			if tc.forceDelete {
				pod.Finalizers = nil
				if err := k8s.Update(context.Background(), pod); err != nil {
					t.Fatal(err)
				}
			}
			startManager(t, h.ns, managerOptions{})
			got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
			if !conditionTrue(got, batchv1alpha1.ConditionComplete) {
				t.Fatalf("want Complete, got %+v", got.Status.Conditions)
			}
			if n := countEntries(got, batchv1alpha1.EntryLost); n != tc.wantLost {
				t.Errorf("%d Lost entries, want %d", n, tc.wantLost)
			}
			if creates := h.finalCheck(t, got); len(creates) != tc.wantCreates {
				t.Errorf("%d pods created, want %d: %v", len(creates), tc.wantCreates, creates)
			}
		})
	}
}

// TestCrashBetweenCommitAndAct stops the controller after a ledger write and
// before the act it authorised: the pod create, or the finalizer release
// after an outcome commit. A restarted controller creates no duplicate and
// loses no completion.
func TestCrashBetweenCommitAndAct(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		crashOn     func(client.Object, string) bool
		wantCreates int
	}{
		// The launch is committed, the pod never created: after restart it is
		// confirmed absent, recorded Lost (not a failure: backoffLimit is 0)
		// and launched again under a new name.
		"before pod create": {crashOn: isPodCreate, wantCreates: 1},
		// The outcome is committed, the finalizer still on.
		"before finalizer release": {crashOn: isPodPatch, wantCreates: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, false)
			wrap, crashed := stopAfter(tc.crashOn, false)
			stop := startManager(t, h.ns, managerOptions{wrapClient: wrap})
			sj := testutil.MakeSafeJob("crash", h.ns).BackoffLimit(0).Obj()
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatal(err)
			}
			awaitCrash(t, crashed)
			stop()
			startManager(t, h.ns, managerOptions{})
			got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
			if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 || got.Status.Failed != 0 {
				t.Fatalf("want Complete with 1 succeeded and 0 failed, got %d/%d and %+v",
					got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
			}
			if creates := h.finalCheck(t, got); len(creates) != tc.wantCreates {
				t.Errorf("%d pods created, want %d: %v", len(creates), tc.wantCreates, creates)
			}
		})
	}
}

// TestSplitBrain runs two controllers without leader election on the same
// SafeJobs: optimistic concurrency on the ledger keeps I1-I3.
func TestSplitBrain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	startManager(t, h.ns, managerOptions{})
	jobs := []*batchv1alpha1.SafeJob{
		testutil.MakeSafeJob("brain-a", h.ns).Completions(30).Parallelism(5).Obj(),
		testutil.MakeSafeJob("brain-b", h.ns).Completions(20).Parallelism(4).Indexed().Obj(),
	}
	for _, sj := range jobs {
		if err := k8s.Create(context.Background(), sj); err != nil {
			t.Fatal(err)
		}
	}
	for _, sj := range jobs {
		got := waitFinished(t, client.ObjectKeyFromObject(sj), 2*time.Minute)
		if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != *sj.Spec.Completions {
			t.Fatalf("%s: want Complete with %d succeeded, got %d and %+v", sj.Name, *sj.Spec.Completions,
				got.Status.Succeeded, got.Status.Conditions)
		}
	}
	for _, sj := range jobs {
		got := &batchv1alpha1.SafeJob{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got); err != nil {
			t.Fatal(err)
		}
		h.finalCheck(t, got)
	}
	if n := h.kubelet.MaxActive(); n > 9 {
		t.Errorf("%d pods active at once, parallelism 5+4", n)
	}
}

// countEntries counts the outcomes of type typ, listed or folded (Lost and
// Evicted: the checkpoint keeps their count).
func countEntries(sj *batchv1alpha1.SafeJob, typ batchv1alpha1.EntryType) int {
	n := 0
	for _, e := range sj.Status.Ledger.Entries {
		if e.Type == typ {
			n++
		}
	}
	if cp := sj.Status.Ledger.Checkpoint; cp != nil {
		switch typ {
		case batchv1alpha1.EntryLost:
			n += int(cp.Lost)
		case batchv1alpha1.EntryEvicted:
			n += int(cp.Evicted)
		}
	}
	return n
}

func isPodCreate(obj client.Object, verb string) bool {
	_, ok := obj.(*corev1.Pod)
	return ok && verb == "create"
}

func isPodPatch(obj client.Object, verb string) bool {
	_, ok := obj.(*corev1.Pod)
	return ok && verb == "patch" && slices.Contains(obj.GetFinalizers(), batchv1alpha1.LedgerFinalizer)
}

var errCrashed = errors.New("controller stopped by the test")

// stopAfter returns a client wrapper that stops the controller at the first
// write matching match (after the write when passThrough, instead of it
// otherwise), and a channel closed when it has.
func stopAfter(match func(client.Object, string) bool, passThrough bool) (func(client.Client, context.CancelFunc) client.Client, <-chan struct{}) {
	crashed := make(chan struct{})
	return func(c client.Client, stop context.CancelFunc) client.Client {
		return &crashingClient{Client: c, match: match, passThrough: passThrough, stop: stop, done: crashed}
	}, crashed
}

// awaitCrash waits for a crashingClient to have stopped its controller.
func awaitCrash(t *testing.T, crashed <-chan struct{}) {
	t.Helper()
	select {
	case <-crashed:
	case <-time.After(time.Minute):
		t.Fatal("the controller never reached the write it was to stop at")
	}
}

type crashingClient struct {
	client.Client
	match       func(client.Object, string) bool
	passThrough bool
	stop        context.CancelFunc
	done        chan struct{}
	mu          sync.Mutex
	crashed     bool
}

func (c *crashingClient) crash(obj client.Object, verb string, write func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return errCrashed
	}
	if !c.match(obj, verb) {
		return write()
	}
	c.crashed = true
	var err error
	if c.passThrough {
		err = write()
	}
	c.stop()
	close(c.done)
	return errors.Join(err, errCrashed)
}

func (c *crashingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.crash(obj, "create", func() error { return c.Client.Create(ctx, obj, opts...) })
}

func (c *crashingClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	return c.crash(obj, "patch", func() error { return c.Client.Patch(ctx, obj, p, opts...) })
}

func (c *crashingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.crash(obj, "delete", func() error { return c.Client.Delete(ctx, obj, opts...) })
}

func (c *crashingClient) Status() client.SubResourceWriter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return crashedWriter{}
	}
	return c.Client.Status()
}

type crashedWriter struct{}

func (crashedWriter) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return errCrashed
}

func (crashedWriter) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	return errCrashed
}

func (crashedWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errCrashed
}

func (crashedWriter) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return errCrashed
}
