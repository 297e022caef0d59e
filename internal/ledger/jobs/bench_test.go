package jobs

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
// Pods end in one of two orders. In waves, every running pod succeeds
// together once no write can launch more, so the open launches stay in
// runs. Shuffled, a few running pods at a time succeed, picked at random
// (a fixed seed), while their replacements launch: a pod that ends inside a
// run of launches leaves it listed with that pod folded, and the listed
// ledger holds an entry for each write whose launches have not all ended.
//
//	go test ./internal/ledger/jobs -run '^$' -bench DecideToCompletion -benchtime 1x
func BenchmarkDecideToCompletion(b *testing.B) {
	for _, mode := range []batchv1alpha1.CompletionMode{batchv1alpha1.NonIndexedCompletion, batchv1alpha1.IndexedCompletion} {
		for _, completions := range []int32{1000, 10000, 100000} {
			for _, par := range []int32{100, 1000, 2000} {
				b.Run(fmt.Sprintf("%s/completions=%d/parallelism=%d", mode, completions, par), func(b *testing.B) {
					benchmarkToCompletion(b, mode, completions, par, 0)
				})
			}
		}
	}
	for _, mode := range []batchv1alpha1.CompletionMode{batchv1alpha1.NonIndexedCompletion, batchv1alpha1.IndexedCompletion} {
		for _, completions := range []int32{10000, 100000} {
			b.Run(fmt.Sprintf("%s/completions=%d/parallelism=%d/order=shuffled", mode, completions, 2000), func(b *testing.B) {
				benchmarkToCompletion(b, mode, completions, 2000, shuffledBatch)
			})
		}
	}
}

// shuffledBatch is how many running pods succeed between two decisions in
// the shuffled order: about what a SafeJob of parallelism 2,000 gathers in
// one pod batch period on the local cluster (docs/performance.md, "Pods that
// end out of order").
const shuffledBatch = 35

// benchmarkToCompletion drives one SafeJob to Complete; with batch 0 its
// pods end in waves, else batch of them at a time in a shuffled order.
func benchmarkToCompletion(b *testing.B, mode batchv1alpha1.CompletionMode, completions, par int32, batch int) {
	var writes, bytes, maxBytes int
	var decide time.Duration
	for b.Loop() {
		rng := rand.New(rand.NewPCG(1, 2))
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
			if batch > 0 {
				succeedShuffled(dr.pods, batch, rng)
			} else {
				// Pods run until every launch a write can start is running:
				// the largest parallelism is reached too.
				saturated := len(dr.uncreated) == 0 && !slices.ContainsFunc(plan.Append, func(e batchv1alpha1.LedgerEntry) bool {
					return e.Type == batchv1alpha1.EntryLaunched
				})
				for k, p := range dr.pods {
					if saturated && p.Status.Phase == corev1.PodRunning {
						dr.pods[k] = withPhase(p, corev1.PodSucceeded, 0)
					}
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

// succeedShuffled has up to n running pods, picked at random, succeed.
func succeedShuffled(pods []*corev1.Pod, n int, rng *rand.Rand) {
	var running []int
	for k, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			running = append(running, k)
		}
	}
	rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
	for _, k := range running[:min(n, len(running))] {
		pods[k] = withPhase(pods[k], corev1.PodSucceeded, 0)
	}
}

// BenchmarkDecideSteady measures one reconcile of a SafeJob whose
// parallelism is reached, as the controller runs it under load: a few pods
// have succeeded since the last pass (batch), one Observation's Unaccounted
// and Decide record them, and the next pass creates their replacements. A
// pass reads the whole listed ledger (every open launch), so its cost grows
// with parallelism while it records only a handful of completions: this, not
// BenchmarkDecideToCompletion's passes of thousands of outcomes, is what a
// completion costs the controller at large parallelism.
//
//	go test ./internal/ledger/jobs -run '^$' -bench DecideSteady
func BenchmarkDecideSteady(b *testing.B) {
	for _, mode := range []batchv1alpha1.CompletionMode{batchv1alpha1.NonIndexedCompletion, batchv1alpha1.IndexedCompletion} {
		for _, par := range []int32{100, 2000} {
			for _, batch := range []int{1, 20} {
				b.Run(fmt.Sprintf("%s/parallelism=%d/batch=%d", mode, par, batch), func(b *testing.B) {
					benchmarkSteady(b, mode, par, batch)
				})
			}
		}
	}
}

func benchmarkSteady(b *testing.B, mode batchv1alpha1.CompletionMode, par int32, batch int) {
	const completions = 100000
	var dr *driver
	start := func() {
		s := spec(par, completions)
		s.CompletionMode = mode
		dr = newDriver(s)
		for k := 0; dr.status.Active < par || len(dr.uncreated) > 0; k++ {
			if k > int(par) {
				b.Fatalf("parallelism %d not reached: %d active", par, dr.status.Active)
			}
			dr.step(b, t0)
		}
	}
	pass := func() { // as a reconcile: the live-read check, then the decision, on one Observation
		obs := Observe(dr.input(t0))
		if _, _, err := obs.Unaccounted(); err != nil {
			b.Fatal(err)
		}
		plan, err := obs.Decide()
		if err != nil {
			b.Fatal(err)
		}
		dr.carryOut(plan)
	}
	start()
	var recorded int
	for b.Loop() {
		if dr.status.Succeeded+int32(batch)+par >= completions {
			b.StopTimer()
			start()
			b.StartTimer()
		}
		ended := 0
		for k, p := range dr.pods {
			if ended < batch && p.Status.Phase == corev1.PodRunning {
				dr.pods[k] = withPhase(p, corev1.PodSucceeded, 0)
				ended++
			}
		}
		pass() // records the outcomes, releases the pods, launches again
		dr.pods = slices.DeleteFunc(dr.pods, func(p *corev1.Pod) bool { return IsTerminal(p) && len(p.Finalizers) == 0 })
		pass() // creates the launches its commit authorised
		recorded += ended
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(recorded), "ns/completion")
}
