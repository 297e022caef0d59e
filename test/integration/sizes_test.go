package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// maxParallelism and the index limits are the CRD's.
const (
	maxParallelism        = 2000
	maxCompletions        = 100000
	perIndexCompletions   = 20000
	maxFailedIndexesLarge = 1000
	// etcdRequestLimit is etcd's default --max-request-bytes: no object
	// larger is ever stored.
	etcdRequestLimit = 1536 << 10
)

// TestSizeLimits checks that the largest values of the bounds that keep a
// SafeJob's status storable are accepted; TestBadInputRefused checks that
// one more is refused, naming the field.
func TestSizeLimits(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	indexed := func(name string, completions int32) *testutil.SafeJobWrapper {
		return testutil.MakeSafeJob(name, ns).Indexed().Completions(completions).Suspend(true)
	}
	accepted := map[string]*batchv1alpha1.SafeJob{
		"largest parallelism":                  testutil.MakeSafeJob("par-max", ns).Parallelism(maxParallelism).Suspend(true).Obj(),
		"largest completions":                  indexed("comp-max", maxCompletions).Parallelism(maxParallelism).Obj(),
		"per-index limit without a cap":        indexed("per-index", perIndexCompletions).BackoffLimitPerIndex(3).Obj(),
		"per-index limit, capped failed index": indexed("per-index-cap", maxCompletions).BackoffLimitPerIndex(3).MaxFailedIndexes(maxFailedIndexesLarge).Obj(),
	}
	for name, sj := range accepted {
		t.Run("accepts "+name, func(t *testing.T) {
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// TestWorstCaseStatusFits writes the largest status a SafeJob the CRD
// accepts can have: every index string at its schema limit, the largest
// parallelism all open and all stopping under the longest pod names, their
// attempt counts folded, and the conditions. The API server must store it.
// An index's failure time is kept only while it waits to run again, not
// while it is open, and at most parallelism indexes are open or waiting:
// all of them open (two entries each) is the larger case.
func TestWorstCaseStatusFits(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	name := strings.Repeat("w", 63)
	sj := testutil.MakeSafeJob(name, ns).Indexed().Completions(maxCompletions).Parallelism(maxParallelism).
		BackoffLimitPerIndex(3).MaxFailedIndexes(maxFailedIndexesLarge).Suspend(true).Obj()
	ctx := context.Background()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	indexes := func(from int) string { // "from,from+2,from+4,...", as long as the schema allows
		var b strings.Builder
		for i := from; ; i += 2 {
			s := fmt.Sprint(i)
			if b.Len() > 0 {
				s = "," + s
			}
			if b.Len()+len(s) > 65536 {
				return b.String()
			}
			b.WriteString(s)
		}
	}
	status := &sj.Status
	status.CompletedIndexes, status.FailedIndexes = indexes(0), ptr.To(indexes(1))
	status.Completions = fmt.Sprintf("%d/%d", maxCompletions-1, maxCompletions)
	at := ptr.To(metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	status.Ledger.Checkpoint = &batchv1alpha1.LedgerCheckpoint{Seq: 1 << 40, Failed: 1 << 30, Lost: 1 << 30, Evicted: 1 << 30, Ignored: 1 << 30,
		SucceededIndexes: indexes(0), FailedIndexes: indexes(1), FailuresSinceSuccess: 1 << 30, LastFailureTime: at, LastSuccessTime: at}
	for i := range int32(maxParallelism) {
		status.Ledger.Checkpoint.Indexes = append(status.Ledger.Checkpoint.Indexes,
			batchv1alpha1.IndexState{Index: maxCompletions - 1 - i, Attempts: 1 << 30, Failures: 1 << 30})
	}
	seq := status.Ledger.Checkpoint.Seq
	for i := range int32(maxParallelism) {
		index, attempt := maxCompletions-1-i, int32(1<<30)
		pod := jobs.PodName(name, index, attempt)
		seq++
		status.Ledger.Entries = append(status.Ledger.Entries, batchv1alpha1.LedgerEntry{Seq: seq,
			Type: batchv1alpha1.EntryLaunched, Pod: pod, Index: index, Attempt: attempt, Time: now})
		seq++
		status.Ledger.Entries = append(status.Ledger.Entries, batchv1alpha1.LedgerEntry{Seq: seq,
			Type: batchv1alpha1.EntryStopping, Pod: pod, Index: index, Attempt: attempt, Time: now, Reason: jobs.EvictReasonScaledDown})
	}
	status.Ledger.Seq = seq
	for _, typ := range []string{batchv1alpha1.ConditionSuspended, batchv1alpha1.ConditionLedgerValid, batchv1alpha1.ConditionAdmitted,
		batchv1alpha1.ConditionFailureTarget} {
		status.Conditions = append(status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue,
			Reason: "WorstCase", Message: strings.Repeat("m", 1024), LastTransitionTime: now})
	}
	status.Active = maxParallelism
	if _, err := jobs.Replay(&status.Ledger); err != nil {
		t.Fatalf("the worst-case ledger does not replay: %v", err)
	}
	size, limit := testutil.StatusBytes(status, maxParallelism)
	if size > limit {
		t.Errorf("worst-case status %d bytes is above the I6 bound %d: the bound is wrong", size, limit)
	}
	if size > etcdRequestLimit*3/4 {
		t.Errorf("worst-case status %d bytes leaves less than a quarter of etcd's request limit %d", size, etcdRequestLimit)
	}
	if err := k8s.Status().Update(ctx, sj); err != nil {
		t.Fatalf("status of %d bytes refused: %v", size, err)
	}
	t.Logf("worst-case status: %d bytes", size)
	got := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatal(err)
	}
	if n := len(got.Status.Ledger.Entries); n != 2*maxParallelism {
		t.Fatalf("%d entries stored, want %d", n, 2*maxParallelism)
	}
}

// TestLargestParallelismStarts runs a SafeJob at the largest parallelism:
// every pod starts, launched in waves of status writes the API server takes,
// and the counts are exact.
func TestLargestParallelismStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("2000 pods: skipped with -short")
	}
	t.Parallel()
	h := newHarness(t, hold, true)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("widest", h.ns).Completions(maxParallelism).Parallelism(maxParallelism).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 5*time.Minute, fmt.Sprintf("%d pods running", maxParallelism), func() (bool, error) {
		return h.kubelet.MaxActive() == maxParallelism, nil
	})
	t.Logf("%d pods running after %s", maxParallelism, time.Since(start).Round(time.Second))
	h.kubelet.SetFate(succeed)
	got := waitFinished(t, client.ObjectKeyFromObject(sj), 10*time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != maxParallelism {
		t.Fatalf("want Complete with %d succeeded, got %d and %+v", maxParallelism, got.Status.Succeeded, got.Status.Conditions)
	}
	if n := h.kubelet.MaxActive(); n > maxParallelism {
		t.Errorf("%d pods active at once, parallelism %d", n, maxParallelism)
	}
	if creates := h.finalCheck(t, got); len(creates) != maxParallelism {
		t.Errorf("%d pods created for %d completions", len(creates), maxParallelism)
	}
}
