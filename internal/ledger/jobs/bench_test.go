package jobs

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// BenchmarkDecideToCompletion drives one SafeJob from start to Complete
// through Decide, the way the controller does (a launch is created once its
// commit is observed, pods run and succeed, a released pod is deleted), and
// reports what each completion costs: the time in Decide (the driver's own
// bookkeeping is not counted), status writes, and the
// size of the status written. The cost per completion must not grow with
// completions: the ledger lists what is in flight, never the history.
//
//	go test ./internal/ledger/jobs -run '^$' -bench DecideToCompletion -benchtime 1x
func BenchmarkDecideToCompletion(b *testing.B) {
	for _, mode := range []batchv1alpha1.CompletionMode{batchv1alpha1.NonIndexedCompletion, batchv1alpha1.IndexedCompletion} {
		for _, completions := range []int32{1000, 10000, 100000} {
			for _, par := range []int32{100, 1000, 2000} {
				b.Run(fmt.Sprintf("%s/completions=%d/parallelism=%d", mode, completions, par), func(b *testing.B) {
					benchmarkToCompletion(b, mode, completions, par)
				})
			}
		}
	}
}

func benchmarkToCompletion(b *testing.B, mode batchv1alpha1.CompletionMode, completions, par int32) {
	var writes, bytes, maxBytes int
	var decide time.Duration
	for b.Loop() {
		s := spec(par, completions)
		s.CompletionMode = mode
		dr := newDriver(s)
		for step := 0; !findTrue(dr.status.Conditions, batchv1alpha1.ConditionComplete); step++ {
			if step > int(completions)*4 {
				b.Fatalf("not complete after %d steps: %d succeeded", step, dr.status.Succeeded)
			}
			prev := dr.status
			start := time.Now()
			plan := dr.step(b, t0)
			decide += time.Since(start)
			if dr.status != prev {
				raw, err := json.Marshal(dr.status)
				if err != nil {
					b.Fatal(err)
				}
				writes++
				bytes += len(raw)
				maxBytes = max(maxBytes, len(raw))
			}
			// Pods run until every launch a write can start is running: the
			// largest parallelism is reached too.
			saturated := len(dr.uncreated) == 0 && !slices.ContainsFunc(plan.Append, func(e batchv1alpha1.LedgerEntry) bool {
				return e.Type == batchv1alpha1.EntryLaunched
			})
			for k, p := range dr.pods {
				if saturated && p.Status.Phase == corev1.PodRunning {
					dr.pods[k] = withPhase(p, corev1.PodSucceeded, 0)
				}
			}
			dr.pods = slices.DeleteFunc(dr.pods, func(p *corev1.Pod) bool { return IsTerminal(p) && len(p.Finalizers) == 0 })
		}
	}
	n := float64(b.N) * float64(completions)
	b.ReportMetric(float64(decide.Nanoseconds())/n, "decide-ns/completion")
	b.ReportMetric(float64(writes)/n, "writes/completion")
	b.ReportMetric(float64(bytes)/float64(writes), "status-bytes/write")
	b.ReportMetric(float64(maxBytes), "max-status-bytes")
	b.ReportMetric(float64(bytes)/n, "status-bytes/completion")
	b.ReportMetric(0, "ns/op")
}
