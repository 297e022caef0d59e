package integration

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

func TestRunsToComplete(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		sj                   *batchv1alpha1.SafeJob
		wantCompletedIndexes string
	}{
		"nonindexed c5 p2": {sj: testutil.MakeSafeJob("plain", "").Completions(5).Parallelism(2).Obj()},
		"indexed c8 p3": {sj: testutil.MakeSafeJob("indexed", "").Completions(8).Parallelism(3).Indexed().Obj(),
			wantCompletedIndexes: "0-7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil, false)
			startManager(t, h.ns, managerOptions{})
			sj := tc.sj
			sj.Namespace = h.ns
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatal(err)
			}
			got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
			if !conditionTrue(got, batchv1alpha1.ConditionComplete) {
				t.Fatalf("want Complete, got conditions %+v", got.Status.Conditions)
			}
			if got.Status.Succeeded != *sj.Spec.Completions {
				t.Errorf("succeeded %d, want %d", got.Status.Succeeded, *sj.Spec.Completions)
			}
			if diff := cmp.Diff(tc.wantCompletedIndexes, got.Status.CompletedIndexes); diff != "" {
				t.Errorf("completedIndexes (-want,+got):\n%s", diff)
			}
			if n := h.kubelet.MaxActive(); n > int(*sj.Spec.Parallelism) {
				t.Errorf("%d pods active at once, parallelism %d", n, *sj.Spec.Parallelism)
			}
			creates := h.finalCheck(t, got)
			if len(creates) != int(*sj.Spec.Completions) {
				t.Errorf("%d pods created, want %d", len(creates), *sj.Spec.Completions)
			}
		})
	}
}
