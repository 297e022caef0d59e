package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/release"
)

// TestPodWritesShareProcessWideSlots checks that a pod write runs only
// while it holds one of the process-wide slots: with every slot taken
// elsewhere, a reconcile's writes wait, and are skipped with an error if
// the reconcile's context ends first.
func TestPodWritesShareProcessWideSlots(t *testing.T) {
	r := &SafeJobReconciler{pacer: newPacer(Pacing{ConcurrentPodWrites: 2}, nil, nil)}
	for range 2 {
		if !r.pacer.podWrites.acquire(context.Background()) {
			t.Fatal("acquire of a free slot failed")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var calls int
	done := make(chan error)
	go func() { done <- r.parallel(ctx, 5, func(int) { calls++ }) }()
	cancel()
	if err := <-done; err == nil {
		t.Error("parallel returned no error after its context ended with writes left")
	}
	if calls != 0 {
		t.Errorf("%d writes ran while every slot was held elsewhere", calls)
	}

	// One freed slot lets all the writes through, one after another.
	r.pacer.podWrites.release()
	var mu sync.Mutex
	err := r.parallel(context.Background(), 20, func(int) {
		mu.Lock()
		calls++
		mu.Unlock()
	})
	if err != nil || calls != 20 {
		t.Errorf("with one slot free: err %v, %d of 20 writes ran; want nil, 20", err, calls)
	}
}

func TestUnboundedPodWrites(t *testing.T) {
	r := &SafeJobReconciler{pacer: newPacer(Pacing{}, nil, nil)}
	// Every write waits for all the others to start: this returns only if
	// actWorkers writes can be in flight at once.
	var started sync.WaitGroup
	started.Add(actWorkers)
	if err := r.parallel(context.Background(), actWorkers, func(int) {
		started.Done()
		started.Wait()
	}); err != nil {
		t.Fatal(err)
	}
}

// TestActRequeuesForCreatesPastTheirWindow: a launch whose create window
// passed before its create was issued, or before Decide planned one
// (Plan.Expired), gets no create (the reconciler has no client to make one),
// and act asks for the SafeJob to be decided again when
// the launch's absence may be trusted, since no pod event will ever come for
// it: LostGrace after its commit, or at once if that has passed.
func TestActRequeuesForCreatesPastTheirWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"}}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	grace := ledger.DefaultFence.LostGrace()
	late := jobs.PodRef{Name: "a-0-0", Time: now.Add(-ledger.DefaultFence.CreateWindow - 5*time.Second)}
	lost := jobs.PodRef{Name: "a-1-0", Index: 1, Time: now.Add(-grace - time.Second)}
	for name, tc := range map[string]struct {
		create, expired []jobs.PodRef
		want            time.Duration
	}{
		"window passed":     {create: []jobs.PodRef{late}, want: grace - ledger.DefaultFence.CreateWindow - 5*time.Second},
		"grace passed too":  {create: []jobs.PodRef{late, lost}, want: time.Millisecond},
		"nothing to create": {},
		// Decide found the window passed before it planned a create.
		"expired when decided":     {expired: []jobs.PodRef{late}, want: grace - ledger.DefaultFence.CreateWindow - 5*time.Second},
		"expired and one too late": {create: []jobs.PodRef{lost}, expired: []jobs.PodRef{late}, want: time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			r := &SafeJobReconciler{tracker: newTracker(), Metrics: NewMetrics(), Clock: clocktesting.NewFakePassiveClock(now)}
			var launched []batchv1alpha1.LedgerEntry
			for _, ref := range append(slices.Clone(tc.create), tc.expired...) {
				launched = append(launched, batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLaunched, Pod: ref.Name})
			}
			r.tracker.wrote(key, sj.UID, "1", now, launched, nil)
			got, err := r.act(context.Background(), sj, &jobs.Plan{Create: tc.create, Expired: tc.expired}, nil)
			if err != nil || got != tc.want {
				t.Errorf("act = %s, %v; want %s, nil", got, err, tc.want)
			}
			if left := r.tracker.uncreated(key, sj.UID); len(left) != 0 {
				t.Errorf("launches still to create here: %v", left)
			}
			if n := testutil.ToFloat64(r.Metrics.CreatesExpired); int(n) != len(tc.create)+len(tc.expired) {
				t.Errorf("%v creates counted expired, want %d", n, len(tc.create)+len(tc.expired))
			}
		})
	}
}

// TestActRequeuesForNameTaken: a create refused because the name is held
// (by a stranger's pod, which brings no event of this SafeJob) asks for the
// SafeJob to be decided again when the launch is due for the live read that
// tells whose the pod is. Without it, nothing came back to the launch.
func TestActRequeuesForNameTaken(t *testing.T) {
	now := time.Unix(1000, 0)
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"}}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	ref := jobs.PodRef{Name: "a-0-0", Time: now.Add(-time.Second)}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, ref.Name)
		},
	}).Build()
	r := &SafeJobReconciler{Client: c, tracker: newTracker(), Metrics: NewMetrics(), Clock: clocktesting.NewFakePassiveClock(now),
		pacer: newPacer(Pacing{ConcurrentPodWrites: 1}, nil, nil)}
	r.tracker.wrote(key, sj.UID, "1", now, []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched, Pod: ref.Name}}, nil)
	got, err := r.act(context.Background(), sj, &jobs.Plan{Create: []jobs.PodRef{ref}}, nil)
	if want := ledger.DefaultFence.LostGrace() - time.Second; err != nil || got != want {
		t.Errorf("act = %s, %v; want %s, nil", got, err, want)
	}
	if left := r.tracker.uncreated(key, sj.UID); len(left) != 0 {
		t.Errorf("launches still to create here: %v", left)
	}
}

// TestPodWritesOnlyUnderTheOwnPodsUID checks that a release or a delete
// planned by name reaches only the pod the SafeJob created, and under that
// pod's UID: a pod of the name that another SafeJob created, or none, gets
// no write, and the write sent names the cached pod's UID, so that a pod
// created under the name after the cache saw it is refused by the API
// server (TestReleaseOnlyUnderItsUID, test/integration).
func TestPodWritesOnlyUnderTheOwnPodsUID(t *testing.T) {
	const owner = types.UID("sj-uid")
	pod := func(name string, uid, creator types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid,
			Finalizers: []string{batchv1alpha1.LedgerFinalizer},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob",
				Name: "sj", UID: creator, Controller: ptr.To(true)}}}}
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var writes []string
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(pod("mine", "pod-a", owner), pod("theirs", "pod-b", "other-sj")).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				data, err := patch.Data(obj)
				if err != nil {
					return err
				}
				writes = append(writes, fmt.Sprintf("patch %s %s", obj.GetName(), data))
				return c.Patch(ctx, obj, patch, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				var do client.DeleteOptions
				do.ApplyOptions(opts)
				uid := "none"
				if do.Preconditions != nil && do.Preconditions.UID != nil {
					uid = string(*do.Preconditions.UID)
				}
				writes = append(writes, fmt.Sprintf("delete %s under %s", obj.GetName(), uid))
				return c.Delete(ctx, obj, opts...)
			},
		}).Build()
	r := &SafeJobReconciler{Client: c}
	ctx := context.Background()
	for _, name := range []string{"theirs", "gone", "mine"} {
		key := types.NamespacedName{Namespace: "ns", Name: name}
		if err := r.releasePodOf(ctx, key, owner); err != nil {
			t.Errorf("release of %s: %v", name, err)
		}
		if _, err := r.deletePod(ctx, key, owner); err != nil {
			t.Errorf("delete of %s: %v", name, err)
		}
	}
	want := []string{
		fmt.Sprintf("patch mine %s", release.PodPatch("pod-a")),
		"delete mine under pod-a",
	}
	if !slices.Equal(writes, want) {
		t.Errorf("writes:\n%s\nwant:\n%s", strings.Join(writes, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(string(release.PodPatch("pod-a")), `"uid":"pod-a"`) {
		t.Errorf("release patch %s does not carry the pod's UID", release.PodPatch("pod-a"))
	}
	theirs := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "theirs"}, theirs); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(theirs.Finalizers, batchv1alpha1.LedgerFinalizer) {
		t.Errorf("another SafeJob's pod lost its finalizer: %v", theirs.Finalizers)
	}
}

// TestUIDRefused checks which refusals of a release patch are taken for a
// pod that took the name (and so ignored): only an invalid metadata.uid,
// the API server's answer to a patch that carries another UID
// (TestReleaseOnlyUnderItsUID); any other refusal is the reconcile's error.
func TestUIDRefused(t *testing.T) {
	gk := schema.GroupKind{Kind: "Pod"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"uid", apierrors.NewInvalid(gk, "p", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "b", "field is immutable")}), true},
		{"another field", apierrors.NewInvalid(gk, "p", field.ErrorList{field.Invalid(field.NewPath("metadata", "finalizers"), "x", "bad")}), false},
		{"conflict", apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("changed")), false},
		{"wrapped uid", fmt.Errorf("patching: %w", apierrors.NewInvalid(gk, "p", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "b", "")})), true},
		{"not an API error", errors.New("metadata.uid"), false},
	} {
		if got := release.UIDRefused(tc.err); got != tc.want {
			t.Errorf("%s: uidRefused(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
