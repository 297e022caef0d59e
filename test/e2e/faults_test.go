package e2e

import (
	"cmp"
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/test/cluster"
)

// soak is set by `make chaos`: longer, larger runs of every scenario.
var soak = os.Getenv("SAFEJOB_CHAOS") != ""

type scenario struct {
	name   string
	opts   cluster.Options
	quick  workload
	long   workload
	setup  func(e *env)                      // before operators start
	fault  func(ctx context.Context, e *env) // runs until the workload ends
	reruns bool                              // the fault deletes running pods: their re-runs are needed work
	// quickTimeout and longTimeout bound the wait for every job to finish
	// (0: 3 and 15 minutes), for a scenario where a controller is known
	// never to finish.
	quickTimeout, longTimeout time.Duration
}

func scenarios() []scenario {
	short := workload{jobs: 40, completions: 1, parallelism: 1, duration: "500ms"}
	delayed := cluster.ProxyFault{MinDelay: 500 * time.Millisecond, MaxDelay: 3 * time.Second, CutEvery: 30 * time.Second}
	return []scenario{
		{name: "pod GC at threshold 1", opts: cluster.Options{PodGCThreshold: 1},
			quick: short, long: workload{jobs: 200, completions: 1, parallelism: 1, duration: "500ms"}},
		{name: "operator SIGKILLed every few seconds",
			quick: workload{jobs: 30, completions: 3, parallelism: 2, duration: "1s"},
			long:  workload{jobs: 200, completions: 3, parallelism: 2, duration: "1s"},
			fault: every(2*time.Second, func(e *env) { e.killOperator() })},
		// Both controllers reach the API server through the proxy: the
		// built-in Job controller's reads of its own writes (KEP-5647,
		// Kubernetes v1.36) meet the same delays as SafeJob's ledger.
		{name: "watch delayed 0.5-3s and cut by a proxy",
			opts:  cluster.Options{ControllerManagerProxy: &delayed},
			quick: workload{jobs: 6, completions: 2, parallelism: 2, duration: "500ms"},
			long:  workload{jobs: 20, completions: 3, parallelism: 2, duration: "500ms"},
			setup: func(e *env) { e.throughProxy(delayed.MinDelay, delayed.MaxDelay, delayed.CutEvery) }},
		{name: "two replicas without leader election",
			quick: workload{jobs: 20, completions: 4, parallelism: 2, duration: "500ms"},
			long:  workload{jobs: 100, completions: 5, parallelism: 3, duration: "500ms"},
			setup: func(e *env) { e.startOperator() }},
		{name: "kube-apiserver restarted mid-run",
			quick: workload{jobs: 20, completions: 3, parallelism: 2, duration: "1s"},
			long:  workload{jobs: 100, completions: 3, parallelism: 2, duration: "1s"},
			fault: once(3*time.Second, func(ctx context.Context, e *env) {
				if err := e.c.RestartAPIServer(ctx); err != nil && ctx.Err() == nil {
					e.t.Errorf("restarting kube-apiserver: %v", err)
				}
			})},
		{name: "running pods force-deleted (finalizer stripped)",
			quick: workload{jobs: 20, completions: 3, parallelism: 2, duration: "2s"},
			long:  workload{jobs: 100, completions: 3, parallelism: 2, duration: "2s"},
			fault: forNext(10*time.Second, every(700*time.Millisecond, forceDeleteRunningPod)), reruns: true},
		// An ops team's way to unstick pods: the moment a pod succeeds, all
		// its finalizers are removed and it is force-deleted. The built-in
		// Job controller counts a pod only through its tracking finalizer,
		// so it runs such pods again without end: bounded waits.
		{name: "succeeded pods stripped and force-deleted",
			quick: workload{jobs: 5, completions: 1, parallelism: 1, duration: "500ms"},
			long:  workload{jobs: 100, completions: 1, parallelism: 1, duration: "1s"},
			setup: unstickSucceeded, quickTimeout: time.Minute, longTimeout: 5 * time.Minute},
	}
}

// TestFaults runs every scenario, for SafeJob, batch/v1 Job and Jobs managed
// by SafeJob side by side, and prints the table. SafeJob, and Jobs it
// manages, must create no extra pod, lose no completion and leave no job
// stuck, in every scenario.
func TestFaults(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	var mu sync.Mutex
	var rows []result
	t.Cleanup(func() { // after every scenario, which run in parallel
		t.Log(report(t, rows))
		if soak {
			_ = os.WriteFile(os.Getenv("SAFEJOB_CHAOS"), []byte(report(t, rows)), 0o600)
		}
	})
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel() // each scenario has its own cluster
			w, timeout := sc.quick, cmp.Or(sc.quickTimeout, 3*time.Minute)
			if soak {
				w, timeout = sc.long, cmp.Or(sc.longTimeout, 15*time.Minute)
			}
			e := newEnv(t, sc.opts)
			if sc.setup != nil {
				sc.setup(e)
			}
			e.startOperator()
			e.submit(w)
			// Faults start once the workload is submitted, and are over before
			// the cluster is torn down, whatever way the test ends.
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { stop(); wg.Wait() })
			if sc.fault != nil {
				wg.Go(func() { sc.fault(ctx, e) })
			}
			forced := e.forcedDeletes()
			got := e.waitAndMeasure(sc.name, w, timeout, func(ns string) int {
				if sc.reruns {
					return forced(ns)
				}
				return 0
			})
			stop()
			wg.Wait()
			mu.Lock()
			rows = append(rows, got...)
			mu.Unlock()
			for _, sj := range []result{got[0], got[2]} {
				if sj.extra != 0 || sj.lost != 0 || sj.stuck != 0 || sj.duplicates != 0 || sj.holds != 0 {
					t.Errorf("%s: %d extra pods, %d lost completions, %d stuck, %d pod names created twice, %d pods holding the finalizer",
						sj.controller, sj.extra, sj.lost, sj.stuck, sj.duplicates, sj.holds)
					e.logOperators()
				}
			}
			t.Log(report(t, got))
		})
	}
}

func every(d time.Duration, f func(*env)) func(context.Context, *env) {
	return func(ctx context.Context, e *env) {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f(e)
			}
		}
	}
}

// forNext runs a fault for a while only, so the workload can then finish.
func forNext(d time.Duration, fault func(context.Context, *env)) func(context.Context, *env) {
	return func(ctx context.Context, e *env) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		fault(ctx, e)
	}
}

func once(after time.Duration, f func(context.Context, *env)) func(context.Context, *env) {
	return func(ctx context.Context, e *env) {
		select {
		case <-ctx.Done():
		case <-time.After(after):
			f(ctx, e)
		}
	}
}

// forceDeleteRunningPod strips the finalizers of one random running pod of
// each controller and deletes it at once, as a careless third party would.
func forceDeleteRunningPod(e *env) {
	ctx := context.Background()
	for _, ns := range []string{nsSafeJob, nsBatch, nsManaged} {
		var pods corev1.PodList
		if err := e.cl.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			continue
		}
		var running []corev1.Pod
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running = append(running, p)
			}
		}
		if len(running) == 0 {
			continue
		}
		p := running[rand.IntN(len(running))]
		patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
		if err := e.cl.Patch(ctx, &p, patch); err != nil {
			continue
		}
		if err := e.cl.Delete(ctx, &p, client.GracePeriodSeconds(0)); err == nil {
			e.noteForced(ns)
		}
	}
}

// unstickSucceeded watches every pod of both controllers and, the moment one
// has succeeded, removes all its finalizers and deletes it at once.
func unstickSucceeded(e *env) {
	handled := map[string]bool{} // pod UIDs; the watch calls one at a time
	watchPods(e.t, e.c, func(ctx context.Context, pod *corev1.Pod) {
		if pod.Status.Phase != corev1.PodSucceeded || handled[string(pod.UID)] ||
			(pod.Namespace != nsSafeJob && pod.Namespace != nsBatch && pod.Namespace != nsManaged) {
			return
		}
		handled[string(pod.UID)] = true
		pod = pod.DeepCopy() // the watch's own copy stays as it was
		patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))
		if err := e.cl.Patch(ctx, pod, patch); err != nil {
			return // already gone
		}
		_ = e.cl.Delete(ctx, pod, client.GracePeriodSeconds(0))
	})
}
