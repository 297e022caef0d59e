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
// ledger lists the launches as one run with the ended pods inside it
// folded, and that field comes back from the API server as written (the
// CRD's schema keeps it), so every later replay reads it: the SafeJob
// stays valid, completes with every index counted once, and every version
// the ledger watch saw replays.
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
	var folded batchv1alpha1.LedgerEntry
	waitFor(t, time.Minute, "a run listed with the even indexes folded", func() (bool, error) {
		if err := k8s.Get(ctx, key, sj); err != nil {
			return false, err
		}
		if c := condition(sj, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status == metav1.ConditionFalse {
			t.Fatalf("ledger refused: %s", c.Message)
		}
		for _, e := range sj.Status.Ledger.Entries {
			if e.Type == batchv1alpha1.EntryLaunched && e.FoldedIndexes != "" {
				folded = e
			}
		}
		return folded.FoldedIndexes != "" && sj.Status.Succeeded == n/2, nil
	})
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatalf("the stored ledger does not replay: %v", err)
	}
	if len(st.Open) != n/2 || st.Succeeded.String() != "0,2,4,6,8" {
		t.Fatalf("%d launches open and indexes %q succeeded, want the %d odd ones open and the even ones succeeded; run %+v",
			len(st.Open), st.Succeeded.String(), n/2, folded)
	}
	h.kubelet.SetFate(succeed)
	sj = waitFinished(t, key, time.Minute)
	if !conditionTrue(sj, batchv1alpha1.ConditionComplete) || sj.Status.Succeeded != n || sj.Status.CompletedIndexes != "0-9" {
		t.Fatalf("finished with %d succeeded, indexes %q, conditions %+v; want Complete, %d, 0-9",
			sj.Status.Succeeded, sj.Status.CompletedIndexes, sj.Status.Conditions, n)
	}
	h.finalCheck(t, sj)
}
