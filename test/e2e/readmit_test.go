package e2e

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// testManagedJobReadmitted: a Job managed by SafeJob runs on flavor pool-a
// (testFlavors' ClusterQueue: pool-a has room for one pod, pool-b for
// four); an admin stops its Workload, Kueue suspends the Job and gives its
// quota back; a SafeJob takes pool-a meanwhile; resumed, Kueue admits the
// Job to pool-b, writing pool-b's node selector into its template as it
// resumes it. The pods created from then on run on pool-b, as a batch/v1
// Job's would, and the Job completes with one success per completion.
func (k *kueueEnv) testManagedJobReadmitted(t *testing.T) {
	const name = "managed-moved"
	// Pods of 10s: the first still runs when the admin stops it (had it
	// finished, the second would be the one to run after the stop).
	sj := job(name, "pools", 2, 1, "10s")
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsSafeJob, Labels: sj.Labels}, Spec: batchv1.JobSpec{
		ManagedBy: ptr.To(batchv1alpha1.ControllerName), Completions: sj.Spec.Completions, Parallelism: sj.Spec.Parallelism,
		BackoffLimit: ptr.To[int32](0), Template: sj.Spec.Template}}
	k.create(t, j)
	key := client.ObjectKeyFromObject(j)
	waitUntil(t, 2*time.Minute, name+" to run a pod on pool-a", func() bool {
		return k.cl.Get(k.ctx, key, j) == nil && ptr.Deref(j.Status.Ready, 0) == 1 && j.Spec.Template.Spec.NodeSelector["pool"] == "a"
	})
	k.setJobWorkloadActive(t, name, false)
	waitUntil(t, 2*time.Minute, name+" to be suspended with no active pod", func() bool {
		return k.cl.Get(k.ctx, key, j) == nil && ptr.Deref(j.Spec.Suspend, false) && j.Status.Active == 0 &&
			jobCondition(j, batchv1.JobSuspended) != nil
	})
	// pool-a taken while the Job is stopped: its next admission is to pool-b.
	k.create(t, job("pool-a-taken", "pools", 1, 1, "20s"))
	waitUntil(t, time.Minute, "pool-a-taken to run", func() bool { return k.get(t, "pool-a-taken").Status.Ready == 1 })
	resumed := time.Now()
	k.setJobWorkloadActive(t, name, true)
	waitUntil(t, 2*time.Minute, name+" to complete on pool-b", func() bool {
		return k.cl.Get(k.ctx, key, j) == nil && jobCondition(j, batchv1.JobComplete) != nil
	})
	if j.Status.Succeeded != 2 || j.Status.Failed != 0 {
		t.Errorf("%s: succeeded %d failed %d, want 2 and 0", name, j.Status.Succeeded, j.Status.Failed)
	}
	k.checkPodsOnPool(t, name, resumed, "b")
	k.waitComplete(t, "pool-a-taken")
}

// checkPodsOnPool checks that every pod of Job name created after since
// carries pool's node selector and runs on a node of pool, and that there
// is one.
func (k *kueueEnv) checkPodsOnPool(t *testing.T, name string, since time.Time, pool string) {
	t.Helper()
	var pods corev1.PodList
	if err := k.cl.List(k.ctx, &pods, client.InNamespace(nsSafeJob), client.MatchingLabels{batchv1.JobNameLabel: name}); err != nil {
		t.Fatal(err)
	}
	after := 0
	for _, p := range pods.Items {
		if p.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			continue
		}
		after++
		node := &corev1.Node{}
		if err := k.cl.Get(k.ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
			t.Fatalf("%s: pod %s on node %q: %v", name, p.Name, p.Spec.NodeName, err)
		}
		if p.Spec.NodeSelector["pool"] != pool || node.Labels["pool"] != pool {
			t.Errorf("%s: pod %s created after the re-admission has nodeSelector %v, on node %s (pool %q); want pool %s",
				name, p.Name, p.Spec.NodeSelector, node.Name, node.Labels["pool"], pool)
		}
	}
	if after == 0 {
		t.Errorf("%s: no pod created after the re-admission (pods %d)", name, len(pods.Items))
	}
}

// setJobWorkloadActive sets spec.active of the Workload Kueue made for Job
// name, as kubectl kueue stop/resume workload do.
func (k *kueueEnv) setJobWorkloadActive(t *testing.T, name string, active bool) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var wls kueue.WorkloadList
		if err := k.cl.List(k.ctx, &wls, client.InNamespace(nsSafeJob)); err != nil {
			return err
		}
		for i := range wls.Items {
			if ref := metav1.GetControllerOf(&wls.Items[i]); ref != nil && ref.Kind == "Job" && ref.Name == name {
				wls.Items[i].Spec.Active = ptr.To(active)
				return k.cl.Update(k.ctx, &wls.Items[i])
			}
		}
		t.Fatalf("no Workload of Job %s", name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
