package integration

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

// TestLedgerScale runs 5000 completions at parallelism 100: the status stays
// under 64 KiB through every version (the ledger watch checks each one) and
// the counts are exact.
func TestLedgerScale(t *testing.T) {
	if testing.Short() {
		t.Skip("5000 pods: skipped with -short")
	}
	t.Parallel()
	h := newHarness(t, nil, true)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("scale", h.ns).Completions(5000).Parallelism(100).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := waitFinishedProgressing(t, client.ObjectKeyFromObject(sj), 2*time.Minute)
	t.Logf("5000 completions in %s", time.Since(start).Round(time.Second))
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 5000 {
		t.Fatalf("want Complete with 5000 succeeded, got %d and %+v", got.Status.Succeeded, got.Status.Conditions)
	}
	if n := h.kubelet.MaxActive(); n > 100 {
		t.Errorf("%d pods active at once, parallelism 100", n)
	}
	if creates := h.finalCheck(t, got); len(creates) != 5000 {
		t.Errorf("%d pods created for 5000 completions", len(creates))
	}
}
