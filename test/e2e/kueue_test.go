package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// TestKueue runs SafeJobs through the real Kueue manager
// (testutil.KueueVersion) on the local cluster: quota, preemption, a missing LocalQueue, flavors and a
// queued schedule with its teardown.
func TestKueue(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{Kueue: true})
	e.startOperator()
	k := &kueueEnv{env: e, ctx: context.Background()}
	k.flavor("default", nil)
	k.clusterQueue("cq", 2, "default")
	k.localQueue("lq", "cq")
	t.Run("quota", k.testQuota)
	t.Run("preemption", k.testPreemption)
	t.Run("missing LocalQueue", k.testMissingLocalQueue)
	t.Run("flavors", k.testFlavors)
	t.Run("managed Job admitted again to another flavor", k.testManagedJobReadmitted) // after flavors: its queue
	t.Run("schedule and teardown", k.testScheduleTeardown)
	t.Run("deactivated and resumed", k.testDeactivated)
	t.Run("admission check rejected", k.testCheckRejected)
	t.Run("topology", k.testTopology)
	t.Run("partial admission", k.testPartialAdmission)
	t.Run("managed Jobs", k.testManagedJobs)
	t.Run("pods ready left alone", k.testPodsReadyLeftAlone) // last: it restarts the operator
}

type kueueEnv struct {
	*env
	ctx context.Context
}

func (k *kueueEnv) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k.cl.Create(k.ctx, obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

func (k *kueueEnv) flavor(name string, labels map[string]string) {
	k.create(k.t, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ResourceFlavorSpec{NodeLabels: labels}})
}

// clusterQueue makes a ClusterQueue for every namespace with cpu quota per
// flavor, in order; lower priorities are preempted within it.
func (k *kueueEnv) clusterQueue(name string, cpu int, flavors ...string) {
	var fq []kueue.FlavorQuotas
	for _, f := range flavors {
		fq = append(fq, kueue.FlavorQuotas{Name: kueue.ResourceFlavorReference(f), Resources: []kueue.ResourceQuota{{
			Name: corev1.ResourceCPU, NominalQuota: resource.MustParse(fmt.Sprint(cpu))}}})
	}
	k.create(k.t, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ClusterQueueSpec{
		NamespaceSelector: &metav1.LabelSelector{},
		ResourceGroups:    []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU}, Flavors: fq}},
		Preemption:        &kueue.ClusterQueuePreemption{WithinClusterQueue: kueue.PreemptionPolicyLowerPriority},
	}})
}

func (k *kueueEnv) localQueue(name, cq string) {
	k.create(k.t, &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsSafeJob},
		Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(cq)}})
}

// job builds a queued SafeJob whose pods need one CPU each and run for d.
func job(name, queue string, completions, parallelism int32, d string) *batchv1alpha1.SafeJob {
	return &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsSafeJob, Labels: map[string]string{controller.QueueNameLabel: queue}},
		Spec: batchv1alpha1.SafeJobSpec{
			Completions: ptr.To(completions), Parallelism: ptr.To(parallelism), BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": d}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
					Name: "main", Image: "busybox",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
				}}},
			},
		},
	}
}

func (k *kueueEnv) get(t *testing.T, name string) *batchv1alpha1.SafeJob {
	t.Helper()
	sj := &batchv1alpha1.SafeJob{}
	if err := k.cl.Get(k.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: name}, sj); err != nil {
		t.Fatal(err)
	}
	return sj
}

func admitted(sj *batchv1alpha1.SafeJob) *metav1.Condition {
	return meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionAdmitted)
}

func complete(sj *batchv1alpha1.SafeJob) bool {
	return meta.IsStatusConditionTrue(sj.Status.Conditions, batchv1alpha1.ConditionComplete)
}

func (k *kueueEnv) waitComplete(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		waitUntil(t, 3*time.Minute, name+" to complete", func() bool { return complete(k.get(t, name)) })
	}
}

// podCreates counts, from the audit log, the pods created for a SafeJob.
func (k *kueueEnv) podCreates(t *testing.T, name string) int {
	t.Helper()
	creates, err := testutil.PodCreates(k.c.AuditLog, nsSafeJob)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for pod, c := range creates {
		if strings.HasPrefix(pod, name+"-") {
			n += c
		}
	}
	return n
}

// testQuota: 2 CPU of quota, three SafeJobs of 1 CPU: two run, the third
// waits saying why, and runs when quota frees.
func (k *kueueEnv) testQuota(t *testing.T) {
	names := []string{"quota-1", "quota-2", "quota-3"}
	for _, n := range names {
		k.create(t, job(n, "lq", 2, 1, "3s"))
	}
	var waitingMsg string
	waitUntil(t, time.Minute, "two admitted and one waiting", func() bool {
		in, out := 0, ""
		for _, n := range names {
			c := admitted(k.get(t, n))
			switch {
			case c == nil:
			case c.Status == metav1.ConditionTrue:
				in++
			case c.Message != "":
				out = c.Message
			}
		}
		if in > 2 {
			t.Fatalf("%d SafeJobs admitted with quota for 2", in)
		}
		waitingMsg = out
		return in == 2 && out != ""
	})
	t.Logf("the third SafeJob waits: %q", waitingMsg)
	if !strings.Contains(waitingMsg, "quota") {
		t.Errorf("waiting message %q does not say it is quota", waitingMsg)
	}
	k.waitComplete(t, names...)
	for _, n := range names {
		if got := k.podCreates(t, n); got != 2 {
			t.Errorf("%s: %d pods created for 2 completions", n, got)
		}
	}
}

// testManagedJobs: batch/v1 Jobs that name SafeJob in managedBy and a
// LocalQueue are queued by Kueue's own Job integration: 2 CPU of quota,
// two Jobs of 2 CPU each, so one runs while the other waits suspended,
// then the other. Each has one Workload (Kueue's, of the Job), none of
// its ledger, and each runs exactly its two pods.
func (k *kueueEnv) testManagedJobs(t *testing.T) {
	names := []string{"managed-q1", "managed-q2"}
	for _, n := range names {
		sj := job(n, "lq", 2, 2, "3s")
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: nsSafeJob, Labels: sj.Labels}, Spec: batchv1.JobSpec{
			ManagedBy: ptr.To(batchv1alpha1.ControllerName), Completions: sj.Spec.Completions, Parallelism: sj.Spec.Parallelism,
			BackoffLimit: ptr.To[int32](0), Template: sj.Spec.Template}}
		k.create(t, j)
	}
	managedJobs := func() map[string]*batchv1.Job {
		out := map[string]*batchv1.Job{}
		for _, n := range names {
			j := &batchv1.Job{}
			if err := k.cl.Get(k.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: n}, j); err != nil {
				t.Fatal(err)
			}
			out[n] = j
		}
		return out
	}
	k.waitOneAtATime(t, managedJobs)
	k.checkManagedWorkloads(t, names, managedJobs())
}

// waitOneAtATime waits until every managed Job has finished, failing if
// two ever ran at once or none ever waited for another.
func (k *kueueEnv) waitOneAtATime(t *testing.T, managedJobs func() map[string]*batchv1.Job) {
	sawOneWait := false
	waitUntil(t, 3*time.Minute, "both managed Jobs to complete, one after the other", func() bool {
		done, running, waiting := 0, 0, 0
		byName := managedJobs()
		for _, j := range byName {
			switch {
			case unfinishedJobs([]batchv1.Job{*j}) == 0:
				done++
			case ptr.Deref(j.Spec.Suspend, false):
				waiting++
			case j.Status.Active > 0:
				running++
			}
		}
		if running > 1 {
			t.Fatalf("%d managed Jobs run at once with quota for one", running)
		}
		sawOneWait = sawOneWait || running == 1 && waiting == 1
		return done == len(byName)
	})
	if !sawOneWait {
		t.Error("never saw one managed Job run while the other waited for quota")
	}
}

// checkManagedWorkloads: each managed Job has one Workload, of the Job,
// none of its ledger, and ran exactly its two pods to Complete.
func (k *kueueEnv) checkManagedWorkloads(t *testing.T, names []string, byName map[string]*batchv1.Job) {
	var wls kueue.WorkloadList
	if err := k.cl.List(k.ctx, &wls, client.InNamespace(nsSafeJob)); err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, wl := range wls.Items {
		if ref := metav1.GetControllerOf(&wl); ref != nil && slices.Contains(names, ref.Name) {
			owners[ref.Kind+"/"+ref.Name]++
		}
	}
	for n, j := range byName {
		if owners["Job/"+n] != 1 || owners["SafeJob/"+n] != 0 {
			t.Errorf("%s: Workloads by owner %v, want one of the Job and none of its ledger", n, owners)
		}
		if j.Status.Succeeded != 2 || jobCondition(j, batchv1.JobComplete) == nil {
			t.Errorf("%s: status %+v", n, j.Status)
		}
		if got := k.podCreates(t, n); got != 2 {
			var events corev1.EventList
			_ = k.cl.List(k.ctx, &events, client.InNamespace(nsSafeJob))
			var said []string
			for _, ev := range events.Items {
				if ev.InvolvedObject.Name == n || strings.HasPrefix(ev.InvolvedObject.Name, n+"-") ||
					strings.HasPrefix(ev.InvolvedObject.Name, "job-"+n+"-") {
					said = append(said, ev.InvolvedObject.Kind+"/"+ev.InvolvedObject.Name+" "+ev.Reason+": "+ev.Message)
				}
			}
			t.Errorf("%s: %d pods created for 2 completions; events:\n%s", n, got, strings.Join(said, "\n"))
		}
	}
}

// jobCondition returns the Job's condition of type c if it is True.
func jobCondition(j *batchv1.Job, c batchv1.JobConditionType) *batchv1.JobCondition {
	for k := range j.Status.Conditions {
		if j.Status.Conditions[k].Type == c && j.Status.Conditions[k].Status == corev1.ConditionTrue {
			return &j.Status.Conditions[k]
		}
	}
	return nil
}

// testPreemption: a high-priority SafeJob preempts a low one mid-way; the
// low one stops, records Evicted, resumes later and completes exactly.
func (k *kueueEnv) testPreemption(t *testing.T) {
	for name, v := range map[string]int32{"low": 100, "high": 1000} {
		k.create(t, &kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v})
	}
	low := job("low", "lq", 6, 2, "4s")
	low.Labels[controller.PriorityClassLabel] = "low"
	k.create(t, low)
	// Mid-way, with a pair left after the one running: the preemption
	// lands before low can finish, however slow the machine.
	waitUntil(t, 2*time.Minute, "low to be mid-way", func() bool {
		sj := k.get(t, "low")
		return sj.Status.Succeeded >= 1 && sj.Status.Succeeded < 4 && sj.Status.Ready == 2
	})
	high := job("high", "lq", 2, 2, "2s")
	high.Labels[controller.PriorityClassLabel] = "high"
	k.create(t, high)
	waitUntil(t, time.Minute, "low to be evicted", func() bool {
		c := admitted(k.get(t, "low"))
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kueue.WorkloadEvictedByPreemption
	})
	k.waitComplete(t, "high", "low")
	sj := k.get(t, "low")
	evicted := 0
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	evicted = int(st.Evicted)
	if sj.Status.Succeeded != 6 || sj.Status.Failed != 0 || evicted == 0 {
		t.Fatalf("low: succeeded %d failed %d evicted %d; want 6, 0 and some evictions", sj.Status.Succeeded, sj.Status.Failed, evicted)
	}
	if got := k.podCreates(t, "low"); got != 6+evicted {
		t.Errorf("low: %d pods created, want %d (6 completions + %d preempted)", got, 6+evicted, evicted)
	}
	t.Logf("low: preempted pods %d, re-admitted, 6/6 complete, 0 failures counted", evicted)
}

// testMissingLocalQueue: the SafeJob waits naming the queue; creating the
// LocalQueue admits it.
func (k *kueueEnv) testMissingLocalQueue(t *testing.T) {
	k.create(t, job("orphan-queue", "late-lq", 1, 1, "1s"))
	waitUntil(t, time.Minute, "a message naming the missing LocalQueue", func() bool {
		c := admitted(k.get(t, "orphan-queue"))
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "late-lq")
	})
	t.Logf("waiting: %q", admitted(k.get(t, "orphan-queue")).Message)
	k.localQueue("late-lq", "cq")
	k.waitComplete(t, "orphan-queue")
}

// testFlavors: two flavors with different node labels; pods land with the
// admitted flavor's nodeSelector on nodes that carry it.
func (k *kueueEnv) testFlavors(t *testing.T) {
	for _, pool := range []string{"a", "b"} {
		k.create(t, cluster.NewNode("pool-"+pool, map[string]string{"pool": pool}))
		k.flavor("pool-"+pool, map[string]string{"pool": pool})
	}
	// pool-a has room for one pod, pool-b for four: three pods go to pool-b,
	// then one pod fits pool-a.
	k.create(t, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq-pools"}, Spec: kueue.ClusterQueueSpec{
		NamespaceSelector: &metav1.LabelSelector{},
		ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU}, Flavors: []kueue.FlavorQuotas{
			{Name: "pool-a", Resources: []kueue.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse("1")}}},
			{Name: "pool-b", Resources: []kueue.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse("4")}}},
		}}},
	}})
	k.localQueue("pools", "cq-pools")
	k.create(t, job("wide", "pools", 3, 3, "5s"))
	waitUntil(t, time.Minute, "wide to be admitted", func() bool {
		c := admitted(k.get(t, "wide"))
		return c != nil && c.Status == metav1.ConditionTrue
	})
	k.create(t, job("narrow", "pools", 1, 1, "1s"))
	k.waitComplete(t, "wide", "narrow")
	for name, pool := range map[string]string{"wide": "b", "narrow": "a"} {
		var pods corev1.PodList
		if err := k.cl.List(k.ctx, &pods, client.InNamespace(nsSafeJob),
			client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: name}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			t.Fatalf("%s: no pods left to inspect", name)
		}
		for _, p := range pods.Items {
			node := &corev1.Node{}
			if err := k.cl.Get(k.ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
				t.Fatalf("%s: pod %s on node %q: %v", name, p.Name, p.Spec.NodeName, err)
			}
			if p.Spec.NodeSelector["pool"] != pool || node.Labels["pool"] != pool {
				t.Errorf("%s: pod %s nodeSelector %v on node %s (pool %q); want pool %s", name, p.Name,
					p.Spec.NodeSelector, node.Name, node.Labels["pool"], pool)
			}
		}
	}
}

// testScheduleTeardown: a queued `@every 5s` schedule with Forbid: each run
// has its own Workload and a queued run blocks the next; deleting the
// parent stops the schedule first, then runs and Workloads go, and the
// ClusterQueue can then be deleted.
func (k *kueueEnv) testScheduleTeardown(t *testing.T) {
	k.clusterQueue("cq-sched", 1, "default")
	k.localQueue("lq-sched", "cq-sched")
	// A blocker holds the only CPU for a while, so the first run queues.
	k.create(t, job("blocker", "lq-sched", 1, 1, "12s"))
	waitUntil(t, time.Minute, "the blocker to run", func() bool { return k.get(t, "blocker").Status.Ready == 1 })
	parent := job("nightly", "lq-sched", 1, 1, "2s")
	parent.Spec.Schedule = ptr.To("@every 5s")
	parent.Spec.ConcurrencyPolicy = batchv1alpha1.ForbidConcurrent
	parent.Spec.BackoffLimit = nil
	k.create(t, parent)
	waitUntil(t, time.Minute, "a queued run to block the next", func() bool {
		p := k.get(t, "nightly")
		c := meta.FindStatusCondition(p.Status.Conditions, batchv1alpha1.ConditionScheduling)
		if c == nil || c.Reason != batchv1alpha1.ReasonWaitingForRun || len(p.Status.ActiveRuns) != 1 {
			return false
		}
		run := k.get(t, p.Status.ActiveRuns[0].Name)
		a := admitted(run)
		return a != nil && a.Status == metav1.ConditionFalse
	})
	waitUntil(t, 2*time.Minute, "three runs to succeed", func() bool {
		p := k.get(t, "nightly")
		st, err := runs.Replay(&p.Status.Ledger)
		return err == nil && st.Runs >= 3
	})
	k.checkOneWorkloadPerRun(t, "nightly-")
	gone := tearDownParent(t, k.env, k.get(t, "nightly"))
	k.waitWorkloadsGone(t, "lq-sched", "safejob-blocker-")
	k.checkNoCreateAfter(t, "nightly-", gone)
	k.waitComplete(t, "blocker")
	cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq-sched"}}
	if err := k.cl.Delete(k.ctx, cq); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the ClusterQueue to be deleted", func() bool {
		return apierrors.IsNotFound(k.cl.Get(k.ctx, client.ObjectKeyFromObject(cq), cq))
	})
}

// checkOneWorkloadPerRun checks that every run has had exactly one Workload.
func (k *kueueEnv) checkOneWorkloadPerRun(t *testing.T, prefix string) {
	t.Helper()
	var wls kueue.WorkloadList
	if err := k.cl.List(k.ctx, &wls, client.InNamespace(nsSafeJob)); err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, wl := range wls.Items {
		if ref := metav1.GetControllerOf(&wl); ref != nil && strings.HasPrefix(ref.Name, prefix) {
			owners[ref.Name]++
		}
	}
	for run, n := range owners {
		if n != 1 {
			t.Errorf("run %s has %d Workloads", run, n)
		}
	}
	if len(owners) == 0 {
		t.Fatal("no Workload of a run found")
	}
}

// waitWorkloadsGone waits until the only Workloads of the queue left are
// those whose name starts with keep.
func (k *kueueEnv) waitWorkloadsGone(t *testing.T, queue, keep string) {
	t.Helper()
	waitUntil(t, 2*time.Minute, "the runs' Workloads to be gone", func() bool {
		var wls kueue.WorkloadList
		if err := k.cl.List(k.ctx, &wls, client.InNamespace(nsSafeJob)); err != nil {
			return false
		}
		for _, wl := range wls.Items {
			if string(wl.Spec.QueueName) == queue && !strings.HasPrefix(wl.Name, keep) {
				return false
			}
		}
		return true
	})
}

// checkNoCreateAfter fails on any SafeJob create with the name prefix that
// the API server received after t0.
func (k *kueueEnv) checkNoCreateAfter(t *testing.T, prefix string, t0 time.Time) {
	t.Helper()
	creates, err := testutil.Creates(k.c.AuditLog, "safejobs")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range creates {
		if strings.HasPrefix(c.Name, prefix) && c.Received.After(t0) {
			t.Errorf("run %s created after its parent was gone", c.Name)
		}
	}
}

// tearDownParent deletes a scheduled SafeJob and waits until it and its
// runs are gone; it returns when the parent was gone.
func tearDownParent(t *testing.T, e *env, parent *batchv1alpha1.SafeJob) time.Time {
	t.Helper()
	ctx := context.Background()
	if err := e.cl.Delete(ctx, parent); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the parent to be gone", func() bool {
		return apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(parent), &batchv1alpha1.SafeJob{}))
	})
	gone := time.Now()
	waitUntil(t, 2*time.Minute, "the runs to be gone", func() bool {
		var runs batchv1alpha1.SafeJobList
		if err := e.cl.List(ctx, &runs, client.InNamespace(parent.Namespace),
			client.MatchingLabels{batchv1alpha1.ParentLabel: parent.Name}); err != nil {
			return false
		}
		return len(runs.Items) == 0
	})
	return gone
}

// workload returns the Workload of a SafeJob.
func (k *kueueEnv) workload(t *testing.T, name string) *kueue.Workload {
	t.Helper()
	wl := &kueue.Workload{}
	if err := k.cl.Get(k.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: controller.WorkloadName(k.get(t, name))}, wl); err != nil {
		t.Fatal(err)
	}
	return wl
}

// setActive sets a Workload's spec.active, as kubectl kueue stop/resume
// workload do.
func (k *kueueEnv) setActive(t *testing.T, name string, active bool) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wl := k.workload(t, name)
		wl.Spec.Active = ptr.To(active)
		return k.cl.Update(k.ctx, wl)
	}); err != nil {
		t.Fatal(err)
	}
}

// waitDeactivatedStopped waits until the SafeJob says Kueue deactivated its
// Workload (reason prefix) and runs no pod, and Kueue holds no quota for
// it; the Workload must still be inactive at its generation then.
func (k *kueueEnv) waitDeactivatedStopped(t *testing.T, name, reason string) *kueue.Workload {
	t.Helper()
	waitUntil(t, time.Minute, name+" to stop, deactivated, its quota given back", func() bool {
		sj := k.get(t, name)
		c := admitted(sj)
		st, err := jobs.Replay(&sj.Status.Ledger)
		wl := &kueue.Workload{}
		if k.cl.Get(k.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: controller.WorkloadName(sj)}, wl) != nil {
			return false
		}
		return c != nil && c.Status == metav1.ConditionFalse && strings.HasPrefix(c.Reason, reason) && err == nil &&
			len(st.Open) == 0 && wl.Status.Admission == nil
	})
	wl := k.workload(t, name)
	if ptr.Deref(wl.Spec.Active, true) {
		t.Fatalf("%s: Workload %s active again", name, wl.Name)
	}
	return wl
}

// testDeactivated: an admin stops a running SafeJob's Workload (kubectl
// kueue stop workload): its pods stop, recorded Evicted, no failure, and
// the quota goes back; SafeJob leaves the Workload inactive. Resumed by the
// admin, it completes, one pod per completion besides those stopped.
func (k *kueueEnv) testDeactivated(t *testing.T) {
	// Stopped with a pair left after the one running: the stop lands before
	// the SafeJob can finish, however slow the machine.
	k.create(t, job("stopped", "lq", 6, 2, "3s"))
	waitUntil(t, time.Minute, "stopped to run two pods", func() bool {
		sj := k.get(t, "stopped")
		return sj.Status.Ready == 2 && sj.Status.Succeeded < 4
	})
	k.setActive(t, "stopped", false)
	stopped := k.waitDeactivatedStopped(t, "stopped", kueue.WorkloadDeactivated)
	c := admitted(k.get(t, "stopped"))
	t.Logf("deactivated: %s: %s", c.Reason, c.Message)
	if !strings.Contains(c.Message, "activated again") {
		t.Errorf("Admitted message %q does not say how to resume", c.Message)
	}
	sj := k.get(t, "stopped")
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if st.Evicted == 0 || sj.Status.Failed != 0 {
		t.Errorf("after the stop: %d evicted, %d failed; want some evicted, none failed", st.Evicted, sj.Status.Failed)
	}
	if wl := k.workload(t, "stopped"); wl.Generation != stopped.Generation || ptr.Deref(wl.Spec.Active, true) {
		t.Fatalf("Workload changed after the stop: generation %d (was %d), active %v", wl.Generation, stopped.Generation,
			ptr.Deref(wl.Spec.Active, true))
	}
	k.setActive(t, "stopped", true)
	k.waitComplete(t, "stopped")
	sj = k.get(t, "stopped")
	if st, err = jobs.Replay(&sj.Status.Ledger); err != nil {
		t.Fatal(err)
	}
	if got, want := k.podCreates(t, "stopped"), 6+int(st.Evicted); got != want || sj.Status.Succeeded != 6 || sj.Status.Failed != 0 {
		t.Errorf("stopped: %d pods created (want %d: 6 completions, %d stopped), succeeded %d, failed %d", got, want, st.Evicted,
			sj.Status.Succeeded, sj.Status.Failed)
	}
}

// testCheckRejected: SafeJobs queued in a ClusterQueue with an admission
// check that rejects them. Kueue deactivates their Workloads; each SafeJob
// stops, says so, and leaves its Workload inactive: no pod runs and no
// quota is held.
func (k *kueueEnv) testCheckRejected(t *testing.T) {
	const controllerName = "example.com/manual-check"
	ac := &kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: "manual"}, Spec: kueue.AdmissionCheckSpec{ControllerName: controllerName}}
	k.create(t, ac)
	// The check's controller reports it active, as every check controller does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.cl.Get(k.ctx, client.ObjectKeyFromObject(ac), ac); err != nil {
			return err
		}
		meta.SetStatusCondition(&ac.Status.Conditions, metav1.Condition{Type: kueue.AdmissionCheckActive, Status: metav1.ConditionTrue,
			Reason: "Active", Message: "checked by hand"})
		return k.cl.Status().Update(k.ctx, ac)
	}); err != nil {
		t.Fatal(err)
	}
	k.create(t, &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq-checked"}, Spec: kueue.ClusterQueueSpec{
		NamespaceSelector: &metav1.LabelSelector{},
		ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU}, Flavors: []kueue.FlavorQuotas{
			{Name: "default", Resources: []kueue.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse("3")}}}}}},
		AdmissionChecksStrategy: &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: "manual"}}},
	}})
	k.localQueue("lq-checked", "cq-checked")
	names := []string{"rejected-1", "rejected-2", "rejected-3"}
	for _, n := range names {
		k.create(t, job(n, "lq-checked", 1, 1, "1s"))
	}
	for _, n := range names {
		waitUntil(t, time.Minute, n+" to reserve quota and wait for its check", func() bool {
			wl := &kueue.Workload{}
			err := k.cl.Get(k.ctx, client.ObjectKey{Namespace: nsSafeJob, Name: controller.WorkloadName(k.get(t, n))}, wl)
			return err == nil && wl.Status.Admission != nil && len(wl.Status.AdmissionChecks) == 1
		})
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			wl := k.workload(t, n)
			wl.Status.AdmissionChecks[0].State = kueue.CheckStateRejected
			wl.Status.AdmissionChecks[0].Message = "rejected by the test"
			return k.cl.Status().Update(k.ctx, wl)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		before := k.waitDeactivatedStopped(t, n, "DeactivatedDueToAdmissionCheck")
		c := admitted(k.get(t, n))
		t.Logf("%s: %s: %s", n, c.Reason, c.Message)
		if after := k.workload(t, n); after.Generation != before.Generation {
			t.Errorf("%s: Workload generation %d, was %d", n, after.Generation, before.Generation)
		}
		if got := k.podCreates(t, n); got != 0 {
			t.Errorf("%s: %d pods created under a rejected check", n, got)
		}
	}
}

// testTopology: topology-aware scheduling. Four nodes in two blocks form a
// Topology; an Indexed SafeJob requires one block
// (kueue.x-k8s.io/podset-required-topology on its template): its Workload
// asks for it, its pods start behind Kueue's topology gate, and Kueue's
// ungater places every pod in one block, where the SafeJob completes.
func (k *kueueEnv) testTopology(t *testing.T) {
	const blockLabel = "example.com/block"
	for i, block := range []string{"b1", "b1", "b2", "b2"} {
		k.create(t, cluster.NewNode(fmt.Sprintf("tas-%d", i), map[string]string{"tas": "true", blockLabel: block}))
	}
	k.create(t, &kueue.Topology{ObjectMeta: metav1.ObjectMeta{Name: "blocks"}, Spec: kueue.TopologySpec{
		Levels: []kueue.TopologyLevel{{NodeLabel: blockLabel}, {NodeLabel: corev1.LabelHostname}}}})
	k.create(t, &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "tas"}, Spec: kueue.ResourceFlavorSpec{
		NodeLabels: map[string]string{"tas": "true"}, TopologyName: ptr.To(kueue.TopologyReference("blocks"))}})
	k.clusterQueue("cq-tas", 8, "tas")
	k.localQueue("lq-tas", "cq-tas")
	sj := job("placed", "lq-tas", 4, 4, "2s")
	sj.Spec.CompletionMode = batchv1alpha1.IndexedCompletion
	sj.Spec.Template.Annotations[kueue.PodSetRequiredTopologyAnnotation] = blockLabel
	k.create(t, sj)
	k.waitComplete(t, "placed")
	wl := k.workload(t, "placed")
	if req := wl.Spec.PodSets[0].TopologyRequest; req == nil || ptr.Deref(req.Required, "") != blockLabel {
		t.Errorf("Workload topology request %+v, want required %s", req, blockLabel)
	}
	if psa := wl.Status.Admission; psa == nil || psa.PodSetAssignments[0].TopologyAssignment == nil {
		t.Fatalf("Workload admitted without a topology assignment: %+v", wl.Status.Admission)
	}
	k.checkOneDomain(t, "placed", blockLabel)
	if got := k.podCreates(t, "placed"); got != 4 {
		t.Errorf("%d pods created, want 4", got)
	}
}

// checkOneDomain checks that Kueue's ungater placed every pod of the SafeJob
// (gate lifted, a node selector of its topology) on nodes of one value of
// the topology label.
func (k *kueueEnv) checkOneDomain(t *testing.T, name, label string) {
	t.Helper()
	var pods corev1.PodList
	if err := k.cl.List(k.ctx, &pods, client.InNamespace(nsSafeJob), client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: name}); err != nil {
		t.Fatal(err)
	}
	domains := map[string]bool{}
	for _, p := range pods.Items {
		node := &corev1.Node{}
		if err := k.cl.Get(k.ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
			t.Fatalf("pod %s on node %q: %v", p.Name, p.Spec.NodeName, err)
		}
		domains[node.Labels[label]] = true
		if len(p.Spec.SchedulingGates) != 0 || p.Spec.NodeSelector[corev1.LabelHostname] == "" && p.Spec.NodeSelector[label] == "" {
			t.Errorf("pod %s: gates %v, nodeSelector %v; want Kueue's placement", p.Name, p.Spec.SchedulingGates, p.Spec.NodeSelector)
		}
	}
	if len(pods.Items) == 0 || len(domains) != 1 || domains[""] {
		t.Errorf("%d pods in %s %v; want every pod in one", len(pods.Items), label, domains)
	}
}

// testPartialAdmission: a SafeJob of parallelism 4 that accepts 2
// (kueue.x-k8s.io/job-min-parallelism) in a ClusterQueue of 2 CPUs: Kueue
// admits 2 pods, and the SafeJob completes with 2 at a time, one pod per
// completion.
func (k *kueueEnv) testPartialAdmission(t *testing.T) {
	k.clusterQueue("cq-partial", 2, "default")
	k.localQueue("lq-partial", "cq-partial")
	sj := job("partial", "lq-partial", 4, 4, "2s")
	sj.Annotations = map[string]string{controller.MinParallelismAnnotation: "2"}
	k.create(t, sj)
	k.waitComplete(t, "partial")
	wl := k.workload(t, "partial")
	if wl.Status.Admission == nil || ptr.Deref(wl.Status.Admission.PodSetAssignments[0].Count, 0) != 2 {
		t.Errorf("admission %+v, want 2 of the 4 pods", wl.Status.Admission)
	}
	if got, sj := k.podCreates(t, "partial"), k.get(t, "partial"); got != 4 || sj.Status.Succeeded != 4 || sj.Status.Failed != 0 {
		t.Errorf("%d pods created, succeeded %d, failed %d; want 4, 4, 0", got, sj.Status.Succeeded, sj.Status.Failed)
	}
}

// TestKueueRequeuingLimit: Kueue with waitForPodsReady (a 5s timeout, one
// requeue). A SafeJob whose pods never become ready is evicted twice, then
// deactivated by Kueue (DeactivatedDueToRequeuingLimitExceeded): it stops,
// counts nothing as failed, says why, and leaves the Workload inactive.
func TestKueueRequeuingLimit(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{Kueue: true, KueuePodsReadyTimeout: 5 * time.Second})
	e.startOperator()
	k := &kueueEnv{env: e, ctx: context.Background()}
	k.flavor("default", nil)
	k.clusterQueue("cq", 2, "default")
	k.localQueue("lq", "cq")
	sj := job("never-ready", "lq", 2, 2, "1s")
	sj.Spec.Template.Annotations["kwok.safejob.dev/start-delay"] = "10m"
	k.create(t, sj)
	stopped := k.waitDeactivatedStopped(t, "never-ready", "DeactivatedDueToRequeuingLimitExceeded")
	got := k.get(t, "never-ready")
	t.Logf("never-ready: %s: %s", admitted(got).Reason, admitted(got).Message)
	st, err := jobs.Replay(&got.Status.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Failed != 0 || st.Evicted != 4 {
		t.Errorf("failed %d, evicted %d; want 0 failed and the 2 pods of each of the 2 admissions evicted", got.Status.Failed, st.Evicted)
	}
	if n := k.podCreates(t, "never-ready"); n != 4 {
		t.Errorf("%d pods created, want 4 (2 per admission)", n)
	}
	// Nothing brings it back but an activation: SafeJob leaves it as it is.
	if wl := k.workload(t, "never-ready"); wl.Generation != stopped.Generation || ptr.Deref(wl.Spec.Active, true) {
		t.Errorf("Workload generation %d (was %d), active %v", wl.Generation, stopped.Generation, ptr.Deref(wl.Spec.Active, true))
	}
}

// testPodsReadyLeftAlone: this Kueue does not wait for pods ready. The
// operator as shipped keeps its Workloads' PodsReady condition all the same;
// restarted with --kueue-pods-ready=false it leaves the condition out, and
// its SafeJobs still run through Kueue to Finished, one pod per completion.
func (k *kueueEnv) testPodsReadyLeftAlone(t *testing.T) {
	podsReady := func(name string) *metav1.Condition {
		return meta.FindStatusCondition(k.workload(t, name).Status.Conditions, kueue.WorkloadPodsReady)
	}
	k.create(t, job("ready-kept", "lq", 2, 2, "3s"))
	k.waitComplete(t, "ready-kept")
	if c := podsReady("ready-kept"); c == nil {
		t.Errorf("ready-kept: Workload without %s under the operator's default", kueue.WorkloadPodsReady)
	}

	k.stopOperators()
	k.startOperator("--kueue-pods-ready=false")
	k.create(t, job("ready-left", "lq", 2, 2, "3s"))
	k.waitComplete(t, "ready-left")
	if c := podsReady("ready-left"); c != nil {
		t.Errorf("ready-left: Workload has %s (%s, %s) with --kueue-pods-ready=false", c.Type, c.Status, c.Reason)
	}
	waitUntil(t, time.Minute, "ready-left's Workload to be Finished", func() bool {
		return meta.IsStatusConditionTrue(k.workload(t, "ready-left").Status.Conditions, kueue.WorkloadFinished)
	})
	if got, sj := k.podCreates(t, "ready-left"), k.get(t, "ready-left"); got != 2 || sj.Status.Succeeded != 2 || sj.Status.Failed != 0 {
		t.Errorf("ready-left: %d pods created, succeeded %d, failed %d; want 2, 2, 0", got, sj.Status.Succeeded, sj.Status.Failed)
	}
}
