package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// TestPodsEndingOutOfOrder runs one write's launches whose pods end out of
// order: the even indexes first, while the odd ones keep running. The
// ledger keeps the launches listed as one run with the ended pods inside it
// folded into the checkpoint, the API server stores it as written, and
// every later replay reads it: the SafeJob stays valid, completes with
// every index counted once, and every version the ledger watch saw replays.
func TestPodsEndingOutOfOrder(t *testing.T) {
	t.Parallel()
	oddHeld := func(p *corev1.Pod) testutil.Fate {
		i, err := strconv.Atoi(p.Labels[batchv1alpha1.CompletionIndexLabel])
		return testutil.Fate{Hold: err != nil || i%2 == 1}
	}
	h := newHarness(t, oddHeld, false)
	startManager(t, h.ns, managerOptions{})
	const n = 10
	sj := testutil.MakeSafeJob("shuffled", h.ns).Indexed().Completions(n).Parallelism(n).Obj()
	ctx := context.Background()
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	var run batchv1alpha1.LedgerEntry
	var err error
	waitFor(t, time.Minute, "a run listed with the even indexes folded inside it", func() (bool, error) {
		if err := k8s.Get(ctx, key, sj); err != nil {
			return false, err
		}
		if c := condition(sj, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status == metav1.ConditionFalse {
			t.Fatalf("ledger refused: %s", c.Message)
		}
		if sj.Status.Succeeded != n/2 {
			return false, nil
		}
		var found bool
		run, found, err = runWithFoldedPods(&sj.Status.Ledger)
		return found, err
	})
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatalf("the stored ledger does not replay: %v", err)
	}
	if len(st.Open) != n/2 || st.Succeeded.String() != "0,2,4,6,8" {
		t.Fatalf("%d launches open and indexes %q succeeded, want the %d odd ones open and the even ones succeeded; run %+v",
			len(st.Open), st.Succeeded.String(), n/2, run)
	}
	h.kubelet.SetFate(succeed)
	sj = waitFinished(t, key, time.Minute)
	if !conditionTrue(sj, batchv1alpha1.ConditionComplete) || sj.Status.Succeeded != n || sj.Status.CompletedIndexes != "0-9" {
		t.Fatalf("finished with %d succeeded, indexes %q, conditions %+v; want Complete, %d, 0-9",
			sj.Status.Succeeded, sj.Status.CompletedIndexes, sj.Status.Conditions, n)
	}
	h.finalCheck(t, sj)
}

// runWithFoldedPods returns a listed run of launches that no longer stands
// for some of its pods: folded into l's checkpoint.
func runWithFoldedPods(l *batchv1alpha1.Ledger) (batchv1alpha1.LedgerEntry, bool, error) {
	for _, e := range l.Entries {
		pods, err := jobs.Unpack(&batchv1alpha1.Ledger{Checkpoint: l.Checkpoint, Entries: []batchv1alpha1.LedgerEntry{e}})
		if err != nil {
			return e, false, err
		}
		if e.Type == batchv1alpha1.EntryLaunched && len(pods) < int(e.Pods()) {
			return e, true, nil
		}
	}
	return batchv1alpha1.LedgerEntry{}, false, nil
}
