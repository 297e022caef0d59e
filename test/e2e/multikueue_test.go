package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/cluster"
)

// TestMultiKueue dispatches SafeJobs from a manager cluster to a worker
// cluster through the real Kueue's MultiKueue (testutil.KueueVersion, its
// generic adapter for custom jobs), each cluster with its own SafeJob
// operator, set up as docs/multikueue.md tells an admin
// (cluster.ConnectMultiKueue): MultiKueue reaches the worker with a token of
// a ServiceAccount bound to exactly config/multikueue/worker's role.
func TestMultiKueue(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	worker := &kueueEnv{env: newEnv(t, cluster.Options{Kueue: true}), ctx: context.Background()}
	manager := &kueueEnv{env: newEnv(t, cluster.Options{Kueue: true, MultiKueue: true, KueueOrigin: "manager"}),
		ctx: context.Background()}
	worker.startOperator()
	manager.startOperator()
	if err := cluster.ConnectMultiKueue(manager.ctx, manager.c, map[string]*cluster.Cluster{"worker": worker.c}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MultiKueueQueues(manager.ctx, manager.c, []*cluster.Cluster{worker.c}, nsSafeJob, "lq", 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logManagerOnFailure(t, manager)
		logWorkerOnFailure(t, "worker", worker)
	})
	t.Run("dispatched", func(t *testing.T) { testDispatched(t, manager, worker) })
	t.Run("manager's Kueue restarted mid-run", func(t *testing.T) { testKueueRestarted(t, manager, worker) })
	t.Run("cancelled while running", func(t *testing.T) { testCancelled(t, manager, worker) })
	t.Run("scheduled", func(t *testing.T) { testScheduledDispatched(t, manager, worker) })
}

// dispatchedJob is a SafeJob for the manager: queued in lq, run by MultiKueue.
// Two pods run at a time.
func dispatchedJob(name string, completions int32, indexed bool, d string) *batchv1alpha1.SafeJob {
	sj := job(name, "lq", completions, 2, d)
	sj.Spec.ManagedBy = ptr.To(kueue.MultiKueueControllerName)
	if indexed {
		sj.Spec.CompletionMode = batchv1alpha1.IndexedCompletion
	}
	return sj
}

// checkRanOnWorker checks a finished dispatched SafeJob: Complete on the
// manager with the worker's status, exactly completions pods on the worker
// and none on the manager, its Workload Finished on both clusters.
func checkRanOnWorker(t *testing.T, manager, worker *kueueEnv, name string, completions int32) {
	t.Helper()
	sj := manager.get(t, name)
	if sj.Status.Succeeded != completions || sj.Status.Failed != 0 {
		t.Errorf("%s on the manager: succeeded %d failed %d, want %d and 0", name, sj.Status.Succeeded, sj.Status.Failed, completions)
	}
	if got := worker.podCreates(t, name); got != int(completions) {
		t.Errorf("%s: %d pods created on the worker, want %d", name, got, completions)
	}
	if got := manager.podCreates(t, name); got != 0 {
		t.Errorf("%s: %d pods created on the manager", name, got)
	}
	wlName := controller.WorkloadName(sj)
	for _, c := range []*kueueEnv{manager, worker} {
		waitUntil(t, time.Minute, name+"'s Workload to be finished on both clusters", func() bool {
			wl := &kueue.Workload{}
			err := c.cl.Get(c.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: wlName}, wl)
			// MultiKueue removes the worker's copy once the manager's is finished.
			return (c == worker && apierrors.IsNotFound(err)) ||
				(err == nil && meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished))
		})
	}
}

// testDispatched: Indexed and NonIndexed SafeJobs submitted to the manager
// run on the worker, exactly once each.
func testDispatched(t *testing.T, manager, worker *kueueEnv) {
	want := map[string]int32{}
	for i, indexed := range []bool{true, false, true, false} {
		name := fmt.Sprintf("mk-%d", i)
		want[name] = int32(2 + i)
		manager.create(t, dispatchedJob(name, want[name], indexed, "1s"))
	}
	for name, completions := range want {
		manager.waitComplete(t, name)
		checkRanOnWorker(t, manager, worker, name, completions)
	}
}

// testKueueRestarted: the manager's Kueue is killed and restarted while
// dispatched SafeJobs run on the worker; nothing is lost or run twice.
func testKueueRestarted(t *testing.T, manager, worker *kueueEnv) {
	names := []string{"mk-restart-0", "mk-restart-1"}
	for i, name := range names {
		manager.create(t, dispatchedJob(name, 4, i == 0, "3s"))
	}
	for _, name := range names {
		waitUntil(t, 2*time.Minute, name+" to run on the worker", func() bool {
			sj := &batchv1alpha1.SafeJob{}
			return worker.cl.Get(worker.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: name}, sj) == nil && sj.Status.Ready > 0
		})
	}
	if err := manager.c.RestartKueue(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		manager.waitComplete(t, name)
		checkRanOnWorker(t, manager, worker, name, 4)
	}
}

// testCancelled: deleting a dispatched SafeJob on the manager while it runs
// on the worker removes the worker's copy and its pods.
func testCancelled(t *testing.T, manager, worker *kueueEnv) {
	sj := dispatchedJob("mk-cancel", 2, false, "1s")
	sj.Spec.Template.Annotations["kwok.safejob.dev/hold"] = "true"
	manager.create(t, sj)
	waitUntil(t, 2*time.Minute, "mk-cancel to run on the worker", func() bool {
		got := &batchv1alpha1.SafeJob{}
		return worker.cl.Get(worker.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: sj.Name}, got) == nil && got.Status.Ready == 2
	})
	if err := manager.cl.Delete(manager.ctx, manager.get(t, sj.Name)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "the worker's copy, its pods and Workload to be gone", func() bool {
		err := worker.cl.Get(worker.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: sj.Name}, &batchv1alpha1.SafeJob{})
		var pods corev1.PodList
		if err := worker.cl.List(worker.ctx, &pods, client.InNamespace(nsSafeJob),
			client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: sj.Name}); err != nil {
			return false
		}
		var wls kueue.WorkloadList
		if err := worker.cl.List(worker.ctx, &wls, client.InNamespace(nsSafeJob)); err != nil {
			return false
		}
		for _, wl := range wls.Items {
			if strings.HasPrefix(wl.Name, "safejob-"+sj.Name+"-") {
				return false
			}
		}
		return apierrors.IsNotFound(err) && len(pods.Items) == 0
	})
	if got := manager.podCreates(t, sj.Name); got != 0 {
		t.Errorf("%d pods created on the manager", got)
	}
}

// testScheduledDispatched: a scheduled SafeJob on the manager dispatches
// each run. A run names its parent in annotations (the worker has no
// parent, and its garbage collector would delete a copy owned by one); each
// runs on the worker exactly once, the parent records the outcome copied
// back; deleting the parent removes its runs on the manager (the operator
// deletes them) and nothing is left on the worker.
func testScheduledDispatched(t *testing.T, manager, worker *kueueEnv) {
	parent := dispatchedJob("mk-nightly", 2, true, "1s")
	parent.Spec.Schedule = ptr.To("@every 10s")
	parent.Spec.ConcurrencyPolicy = batchv1alpha1.ForbidConcurrent
	parent.Spec.BackoffLimit = nil
	manager.create(t, parent)
	var ledger batchv1alpha1.Ledger
	waitUntil(t, 2*time.Minute, "two runs to succeed", func() bool {
		ledger = manager.get(t, parent.Name).Status.Ledger
		st, err := runs.Replay(&ledger)
		return err == nil && st.Runs >= 2
	})
	for _, e := range ledger.Entries {
		switch e.Type {
		case batchv1alpha1.EntryScheduled:
			continue
		case batchv1alpha1.EntrySucceeded:
		default:
			t.Errorf("run %s: %s (%s), want Succeeded", e.Run, e.Type, e.Reason)
			continue
		}
		run := manager.get(t, e.Run)
		if len(run.OwnerReferences) != 0 || batchv1alpha1.RunParent(run) == nil {
			t.Errorf("run %s: ownerReferences %v, annotations %v", e.Run, run.OwnerReferences, run.Annotations)
		}
		checkRanOnWorker(t, manager, worker, e.Run, 2)
	}
	tearDownParent(t, manager.env, manager.get(t, parent.Name))
	waitUntil(t, time.Minute, "no copy of a run left on the worker", func() bool {
		var list batchv1alpha1.SafeJobList
		return worker.cl.List(worker.ctx, &list, client.InNamespace(nsSafeJob),
			client.MatchingLabels{batchv1alpha1.ParentLabel: parent.Name}) == nil && len(list.Items) == 0
	})
}

// TestMultiKueueWorkerLost: two workers; the one running a dispatched
// SafeJob is stopped mid-run (every process of its cluster). Once
// MultiKueue's workerLostTimeout passes, the manager's Workload is evicted,
// SafeJob gives its quota back without waiting for the lost worker's
// status, and MultiKueue dispatches to the other worker, whose copy starts
// from an empty ledger: the completions the lost worker recorded are run
// again there, and the SafeJob completes with the new worker's count.
func TestMultiKueueWorkerLost(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	manager, workers, proxies := partitionableMultiKueue(t, "worker-a", "worker-b")
	// Pods of 5s, three pairs: each state the cut-off waits for lasts a few
	// seconds, past the ready batch period and MultiKueue's copy lag.
	manager.create(t, dispatchedJob("mk-lost", 6, true, "5s"))
	var lost string
	// Cut off while its pods run: the last status copied to the manager
	// shows completions and running pods, and it will not change any more.
	waitUntil(t, 2*time.Minute, "mk-lost to have completions and running pods on a worker", func() bool {
		for name, w := range workers {
			sj := &batchv1alpha1.SafeJob{}
			if w.cl.Get(w.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: "mk-lost"}, sj) == nil &&
				sj.Status.Succeeded >= 2 && sj.Status.Succeeded < 6 {
				lost = name
				copied := manager.get(t, "mk-lost").Status
				return copied.Succeeded >= 2 && copied.Active > 0
			}
		}
		return false
	})
	recorded := manager.get(t, "mk-lost").Status.Succeeded
	proxies[lost].Close()
	t.Logf("cut %s off after it recorded %d completions", lost, recorded)
	survivor := workers["worker-a"]
	if lost == "worker-a" {
		survivor = workers["worker-b"]
	}
	waitUntil(t, 3*time.Minute, "mk-lost to complete on the other worker", func() bool {
		sj := &batchv1alpha1.SafeJob{}
		return survivor.cl.Get(survivor.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: "mk-lost"}, sj) == nil &&
			meta.IsStatusConditionTrue(sj.Status.Conditions, batchv1alpha1.ConditionComplete)
	})
	manager.waitComplete(t, "mk-lost")
	sj := manager.get(t, "mk-lost")
	if got := survivor.podCreates(t, "mk-lost"); got != 6 || sj.Status.Succeeded != 6 || sj.Status.Failed != 0 {
		t.Errorf("on the other worker: %d pods created; on the manager: succeeded %d failed %d; want 6 pods (the lost "+
			"worker's %d completions run again), 6 and 0", got, sj.Status.Succeeded, sj.Status.Failed, recorded)
	}
	if got := manager.podCreates(t, "mk-lost"); got != 0 {
		t.Errorf("%d pods created on the manager", got)
	}
}

// partitionableMultiKueue starts a manager and the named workers, each with
// its operator, and connects them, MultiKueue reaching each worker through
// a proxy: closing the proxy cuts the worker off, as a network partition
// does, while it runs on. MultiKueue's workerLostTimeout is 20s.
func partitionableMultiKueue(t *testing.T, names ...string) (*kueueEnv, map[string]*kueueEnv, map[string]*cluster.Proxy) {
	t.Helper()
	workers, clusters := map[string]*kueueEnv{}, map[string]*cluster.Cluster{}
	proxies, servers := map[string]*cluster.Proxy{}, map[string]string{}
	for _, name := range names {
		w := &kueueEnv{env: newEnv(t, cluster.Options{Kueue: true}), ctx: context.Background()}
		w.startOperator()
		p, err := cluster.StartProxy(strings.TrimSuffix(strings.TrimPrefix(w.c.Config.Host, "https://"), "/"), 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		workers[name], clusters[name], proxies[name], servers[name] = w, w.c, p, "https://"+p.Addr
	}
	manager := &kueueEnv{env: newEnv(t, cluster.Options{Kueue: true, MultiKueue: true, KueueOrigin: "manager",
		KueueWorkerLostTimeout: 20 * time.Second}), ctx: context.Background()}
	manager.startOperator()
	t.Cleanup(func() { logManagerOnFailure(t, manager) })
	if err := cluster.ConnectMultiKueue(manager.ctx, manager.c, clusters, servers); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MultiKueueQueues(manager.ctx, manager.c, slices.Collect(maps.Values(clusters)), nsSafeJob, "lq", 4); err != nil {
		t.Fatal(err)
	}
	return manager, workers, proxies
}

// logManagerOnFailure logs, when the test failed, the manager's Workloads,
// its operator's log and its Kueue's.
func logManagerOnFailure(t *testing.T, manager *kueueEnv) {
	logWorkerOnFailure(t, "manager", manager)
}

// logWorkerOnFailure logs, when the test failed, the Workloads of the
// cluster called name, its operator's log and its Kueue's.
func logWorkerOnFailure(t *testing.T, name string, e *kueueEnv) {
	if !t.Failed() {
		return
	}
	var wls kueue.WorkloadList
	if err := e.cl.List(e.ctx, &wls, client.InNamespace(nsSafeJob)); err == nil {
		for _, wl := range wls.Items {
			t.Logf("%s's Workload %s: active %v admission %v checks %+v conditions %+v", name, wl.Name, ptr.Deref(wl.Spec.Active, true),
				wl.Status.Admission != nil, wl.Status.AdmissionChecks, wl.Status.Conditions)
		}
	}
	e.logOperators()
	t.Logf("%s's Kueue:\n%s", name, e.c.Process("kueue").Tail(60))
}
