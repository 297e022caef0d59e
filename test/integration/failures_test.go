package integration

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

func failWith(code int32, conds ...corev1.PodConditionType) testutil.Fate {
	return testutil.Fate{Fail: true, ExitCode: code, Conditions: conds}
}

// TestFailures covers backoffLimit, backoffLimitPerIndex and podFailurePolicy.
func TestFailures(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		sj          *batchv1alpha1.SafeJob
		fate        func(*corev1.Pod) testutil.Fate
		wantCond    string
		wantReason  string
		wantSucc    int32
		wantFailed  int32
		wantFailIdx *string
		wantCreates int
	}{
		"backoffLimit": {
			sj:       testutil.MakeSafeJob("backoff", "").BackoffLimit(2).Obj(),
			fate:     func(*corev1.Pod) testutil.Fate { return failWith(1) },
			wantCond: batchv1alpha1.ConditionFailed, wantReason: batchv1alpha1.ReasonBackoffLimitExceeded,
			wantFailed: 3, wantCreates: 3,
		},
		"backoffLimitPerIndex": {
			sj: testutil.MakeSafeJob("perindex", "").Indexed().Completions(4).Parallelism(2).BackoffLimitPerIndex(1).Obj(),
			fate: func(p *corev1.Pod) testutil.Fate {
				if p.Labels[batchv1alpha1.CompletionIndexLabel] == "2" {
					return failWith(1)
				}
				return testutil.Fate{}
			},
			wantCond: batchv1alpha1.ConditionFailed, wantReason: batchv1alpha1.ReasonFailedIndexes,
			wantSucc: 3, wantFailed: 2, wantFailIdx: ptr.To("2"), wantCreates: 5,
		},
		"podFailurePolicy FailJob on exit code": {
			sj: testutil.MakeSafeJob("failjob", "").BackoffLimit(6).PodFailurePolicy(batchv1alpha1.PodFailurePolicyRule{
				Action:      batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1alpha1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
			}).Obj(),
			fate:     func(*corev1.Pod) testutil.Fate { return failWith(42) },
			wantCond: batchv1alpha1.ConditionFailed, wantReason: batchv1alpha1.ReasonPodFailurePolicy,
			wantFailed: 1, wantCreates: 1,
		},
		"podFailurePolicy Ignore on DisruptionTarget": {
			sj: testutil.MakeSafeJob("ignore", "").BackoffLimit(0).PodFailurePolicy(batchv1alpha1.PodFailurePolicyRule{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1alpha1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}).Obj(),
			fate: func(p *corev1.Pod) testutil.Fate {
				if p.Labels[batchv1alpha1.AttemptLabel] == "0" {
					return failWith(137, corev1.DisruptionTarget)
				}
				return testutil.Fate{}
			},
			wantCond: batchv1alpha1.ConditionComplete, wantReason: batchv1alpha1.ReasonCompletionsReached,
			wantSucc: 1, wantCreates: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.fate, false)
			startManager(t, h.ns, managerOptions{})
			sj := tc.sj
			sj.Namespace = h.ns
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatal(err)
			}
			got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
			c := condition(got, tc.wantCond)
			if c == nil || c.Reason != tc.wantReason {
				t.Fatalf("want %s with reason %s, got %+v", tc.wantCond, tc.wantReason, got.Status.Conditions)
			}
			if got.Status.Succeeded != tc.wantSucc || got.Status.Failed != tc.wantFailed {
				t.Errorf("succeeded/failed %d/%d, want %d/%d", got.Status.Succeeded, got.Status.Failed, tc.wantSucc, tc.wantFailed)
			}
			if diff := cmp.Diff(tc.wantFailIdx, got.Status.FailedIndexes); diff != "" {
				t.Errorf("failedIndexes (-want,+got):\n%s", diff)
			}
			if creates := h.finalCheck(t, got); len(creates) != tc.wantCreates {
				t.Errorf("%d pods created, want %d", len(creates), tc.wantCreates)
			}
		})
	}
}

// TestActiveDeadline fails a SafeJob whose pods outlive activeDeadlineSeconds
// and stops its pods, counting them failed as batch/v1 does.
func TestActiveDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("deadline", h.ns).Parallelism(2).Completions(4).ActiveDeadlineSeconds(2).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	c := condition(got, batchv1alpha1.ConditionFailed)
	if c == nil || c.Reason != batchv1alpha1.ReasonDeadlineExceeded {
		t.Fatalf("want Failed with DeadlineExceeded, got %+v", got.Status.Conditions)
	}
	if (got.Status.Active != 0 || openLaunches(t, got) != 0) || got.Status.Failed != 2 {
		t.Errorf("active %d failed %d, want 0 and 2 (pods stopped because the SafeJob fails count as failed, as in batch/v1)",
			got.Status.Active, got.Status.Failed)
	}
	h.finalCheck(t, got)
}

// TestSuspendResume suspends a running SafeJob: its pods stop and are recorded
// Evicted, completions already counted stay, and after resuming it completes
// with exactly its completions.
func TestSuspendResume(t *testing.T) {
	t.Parallel()
	// Index 0 succeeds at once; the others run until the test lets them go.
	h := newHarness(t, func(p *corev1.Pod) testutil.Fate {
		return testutil.Fate{Hold: p.Labels[batchv1alpha1.CompletionIndexLabel] != "0"}
	}, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("suspend", h.ns).Parallelism(2).Completions(4).Indexed().Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	got := &batchv1alpha1.SafeJob{}
	waitFor(t, time.Minute, "one completion and two running pods", func() (bool, error) {
		err := k8s.Get(context.Background(), key, got)
		return err == nil && got.Status.Succeeded == 1 && got.Status.Ready == 2, err
	})
	setSuspend(t, key, true)
	waitFor(t, time.Minute, "suspension with no active pod", func() (bool, error) {
		err := k8s.Get(context.Background(), key, got)
		return err == nil && conditionTrue(got, batchv1alpha1.ConditionSuspended) && got.Status.Active == 0 && openLaunches(t, got) == 0, err
	})
	if got.Status.Succeeded != 1 || got.Status.Failed != 0 || countEntries(got, batchv1alpha1.EntryEvicted) != 2 {
		t.Fatalf("suspended with succeeded %d failed %d evicted %d, want 1, 0, 2",
			got.Status.Succeeded, got.Status.Failed, countEntries(got, batchv1alpha1.EntryEvicted))
	}
	h.kubelet.SetFate(succeed)
	setSuspend(t, key, false)
	got = waitFinished(t, key, time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 4 || got.Status.CompletedIndexes != "0-3" {
		t.Fatalf("want Complete with 4 succeeded (0-3), got %d (%s) and %+v", got.Status.Succeeded,
			got.Status.CompletedIndexes, got.Status.Conditions)
	}
	if c := condition(got, batchv1alpha1.ConditionSuspended); c == nil || c.Status != "False" {
		t.Errorf("want Suspended=False after resume, got %+v", c)
	}
	h.finalCheck(t, got)
}

func setSuspend(t *testing.T, key client.ObjectKey, suspend bool) {
	t.Helper()
	waitFor(t, 30*time.Second, "spec.suspend to be written", func() (bool, error) {
		sj := &batchv1alpha1.SafeJob{}
		if err := k8s.Get(context.Background(), key, sj); err != nil {
			return false, err
		}
		sj.Spec.Suspend = ptr.To(suspend)
		err := k8s.Update(context.Background(), sj)
		return err == nil, client.IgnoreAlreadyExists(ignoreConflict(err))
	})
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// TestTTLAfterFinished deletes a finished SafeJob after its TTL.
func TestTTLAfterFinished(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("ttl", h.ns).TTLSecondsAfterFinished(1).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the finished SafeJob to be deleted", func() (bool, error) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), &batchv1alpha1.SafeJob{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	h.watch.Check(t)
}

// TestFailureBackoff: a failed pod is replaced only after the backoff delay,
// doubling with each failure since the last success (batch/v1's 10s here
// 2s, so that the test stays short). Pod creation times have second
// precision, hence the second of slack.
func TestFailureBackoff(t *testing.T) {
	t.Parallel()
	failTwice := func(p *corev1.Pod) testutil.Fate {
		if p.Labels[batchv1alpha1.AttemptLabel] == "2" {
			return testutil.Fate{}
		}
		return failWith(1)
	}
	h := newHarness(t, failTwice, false)
	base := 2 * time.Second
	startManager(t, h.ns, managerOptions{backoff: jobs.Backoff{Base: base, Max: time.Minute}})
	sj := testutil.MakeSafeJob("backoff-delay", h.ns).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Failed != 2 {
		t.Fatalf("want Complete after 2 failures, got failed %d, conditions %+v", got.Status.Failed, got.Status.Conditions)
	}
	var created [3]time.Time
	for a := range created {
		pod := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: jobs.PodName(sj.Name, 0, int32(a))}, pod); err != nil {
			t.Fatal(err)
		}
		created[a] = pod.CreationTimestamp.Time
	}
	for k, want := range []time.Duration{base, 2 * base} {
		if gap := created[k+1].Sub(created[k]); gap < want-time.Second {
			t.Errorf("attempt %d created %s after attempt %d, want at least the %s delay", k+1, gap, k, want)
		}
	}
	h.finalCheck(t, got)
}

// refusingReleases fails every pod patch (the operator patches pods only to
// release their ledger finalizer) while refuse is set.
type refusingReleases struct {
	client.Client
	refuse  atomic.Bool
	refused atomic.Int32
}

func (c *refusingReleases) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*corev1.Pod); ok && c.refuse.Load() {
		c.refused.Add(1)
		return apierrors.NewServiceUnavailable("finalizer releases refused by the test")
	}
	return c.Client.Patch(ctx, obj, p, opts...)
}

// TestFailedReleasesRetried: finalizer releases go out without holding the
// SafeJob's ledger, so it completes while every release is refused; a
// release that failed is retried by itself, with backoff, once the API
// server accepts it again, though nothing changes on the pods or the SafeJob
// to bring another reconcile.
func TestFailedReleasesRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, succeed, false)
	rc := &refusingReleases{}
	rc.refuse.Store(true)
	startManager(t, h.ns, managerOptions{wrapClient: func(c client.Client, _ context.CancelFunc) client.Client {
		rc.Client = c
		return rc
	}})
	sj := testutil.MakeSafeJob("refused-release", h.ns).Parallelism(2).Completions(4).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 4 {
		t.Fatalf("want Complete with 4 succeeded while releases are refused, got %d succeeded, %+v",
			got.Status.Succeeded, got.Status.Conditions)
	}
	holding := func() (int, error) {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(h.ns)); err != nil {
			return 0, err
		}
		n := 0
		for _, p := range pods.Items {
			if slices.Contains(p.Finalizers, batchv1alpha1.LedgerFinalizer) {
				n++
			}
		}
		return n, nil
	}
	if n, err := holding(); err != nil || n != 4 || rc.refused.Load() == 0 {
		t.Fatalf("while releases are refused: %d pods hold the ledger finalizer (want 4), %d releases refused, %v",
			n, rc.refused.Load(), err)
	}
	rc.refuse.Store(false)
	waitFor(t, 30*time.Second, "every pod's ledger finalizer released", func() (bool, error) {
		n, err := holding()
		return n == 0, err
	})
	h.finalCheck(t, got)
}
