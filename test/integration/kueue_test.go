package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// These tests play Kueue's part by hand (admit, evict), so that every step
// of the Workload protocol is checked on its own; the end-to-end suite runs
// the real Kueue manager.

func queuedSafeJob(name, ns string, completions, parallelism int32) *batchv1alpha1.SafeJob {
	sj := testutil.MakeSafeJob(name, ns).Completions(completions).Parallelism(parallelism).Label(controller.QueueNameLabel, "team-a").Obj()
	sj.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resourceQuantity("1")}
	return sj
}

// waitWorkload waits for the SafeJob's Workload to satisfy cond.
func waitWorkload(t *testing.T, sj *batchv1alpha1.SafeJob, what string, cond func(*kueue.Workload) bool) *kueue.Workload {
	t.Helper()
	wl := &kueue.Workload{}
	waitFor(t, 30*time.Second, "Workload "+what, func() (bool, error) {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: sj.Namespace, Name: controller.WorkloadName(sj)}, wl)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cond(wl), err
	})
	return wl
}

func anyWorkload(*kueue.Workload) bool { return true }

// completeExactly waits for a queued SafeJob to finish and checks that it
// completed with succeeded completions, no failure, and creates pods in
// all (the audit log), the ledger sound throughout.
func completeExactly(t *testing.T, h *harness, sj *batchv1alpha1.SafeJob, succeeded int32, creates int) {
	t.Helper()
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != succeeded || got.Status.Failed != 0 {
		t.Fatalf("succeeded %d failed %d conditions %+v; want %d succeeded", got.Status.Succeeded, got.Status.Failed,
			got.Status.Conditions, succeeded)
	}
	if c := h.finalCheck(t, got); len(c) != creates {
		t.Errorf("%d pods created, want %d", len(c), creates)
	}
}

// runAdmitted creates a queued SafeJob, admits its Workload with the
// flavor and waits until its parallelism of pods is ready; it returns the
// Workload as created.
func runAdmitted(t *testing.T, sj *batchv1alpha1.SafeJob, flavor string) *kueue.Workload {
	t.Helper()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "created", anyWorkload)
	admit(t, client.ObjectKeyFromObject(wl), flavor)
	want := ptr.Deref(sj.Spec.Parallelism, 1)
	waitFor(t, 30*time.Second, fmt.Sprintf("%d running pods", want), func() (bool, error) {
		got := &batchv1alpha1.SafeJob{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got)
		return err == nil && got.Status.Ready == want, err
	})
	return wl
}

// setWorkloadStatus changes a Workload's status as Kueue would, retrying on conflicts.
func setWorkloadStatus(t *testing.T, key client.ObjectKey, change func(*kueue.Workload)) {
	t.Helper()
	waitFor(t, 30*time.Second, "a Workload status write", func() (bool, error) {
		wl := &kueue.Workload{}
		if err := k8s.Get(context.Background(), key, wl); err != nil {
			return false, err
		}
		change(wl)
		err := k8s.Status().Update(context.Background(), wl)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}

func setCond(wl *kueue.Workload, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg})
}

// admit gives the Workload quota in ClusterQueue cq with one flavor for cpu.
func admit(t *testing.T, key client.ObjectKey, flavor string) {
	t.Helper()
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		wl.Status.Admission = &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
			Name: kueue.DefaultPodSetName, Count: ptr.To(wl.Spec.PodSets[0].Count),
			Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{corev1.ResourceCPU: kueue.ResourceFlavorReference(flavor)},
		}}}
		setCond(wl, kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved", "Quota reserved in ClusterQueue cq")
		setCond(wl, kueue.WorkloadAdmitted, metav1.ConditionTrue, "Admitted", "The workload is admitted")
		if meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadEvicted) {
			setCond(wl, kueue.WorkloadEvicted, metav1.ConditionFalse, "QuotaReserved", "Previously: evicted")
		}
	})
}

func makeFlavor(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	rf := &kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ResourceFlavorSpec{
		NodeLabels:  labels,
		Tolerations: []corev1.Toleration{{Key: "spot", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}}
	if err := k8s.Create(context.Background(), rf); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func admittedCondition(t *testing.T, key client.ObjectKey, status metav1.ConditionStatus, msgPart string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("Admitted=%s mentioning %q", status, msgPart), func() (bool, error) {
		sj := &batchv1alpha1.SafeJob{}
		if err := k8s.Get(context.Background(), key, sj); err != nil {
			return false, err
		}
		c := condition(sj, batchv1alpha1.ConditionAdmitted)
		return c != nil && c.Status == status && strings.Contains(c.Message, msgPart), nil
	})
}

// TestKueueAdmission: a queued SafeJob creates its Workload and no pod; it
// says why it waits; once admitted its pods carry the flavor; when it
// finishes, the Workload is Finished and released.
func TestKueueAdmission(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-a", map[string]string{"instance": "on-demand"})
	wpc := &kueue.WorkloadPriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "batch-high-" + h.ns}, Value: 1000}
	if err := k8s.Create(context.Background(), wpc); err != nil {
		t.Fatal(err)
	}
	sj := queuedSafeJob("queued", h.ns, 3, 2)
	sj.Labels[controller.PriorityClassLabel] = wpc.Name
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "created", anyWorkload)
	checkNewWorkload(t, sj, wl)
	key := client.ObjectKeyFromObject(wl)
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Inadmissible", "LocalQueue team-a doesn't exist")
	})
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, "LocalQueue team-a doesn't exist")
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 0 {
		t.Fatalf("pods created before admission: %v", creates)
	}
	admit(t, key, "on-demand-a")
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || !conditionTrue(got, batchv1alpha1.ConditionAdmitted) {
		t.Fatalf("conditions %+v", got.Status.Conditions)
	}
	checkAdmittedPods(t, h, wl.Name)
	checkFinishedWorkload(t, sj)
	h.finalCheck(t, got)
}

func checkNewWorkload(t *testing.T, sj *batchv1alpha1.SafeJob, wl *kueue.Workload) {
	t.Helper()
	if ref := metav1.GetControllerOf(wl); ref == nil || ref.UID != sj.UID || wl.Spec.QueueName != "team-a" ||
		wl.Labels["kueue.x-k8s.io/job-uid"] != string(sj.UID) || wl.Spec.PodSets[0].Count != 2 ||
		ptr.Deref(wl.Spec.Priority, 0) != 1000 || len(wl.Finalizers) != 1 {
		t.Fatalf("Workload %s: owner %v queue %s labels %v count %d priority %v finalizers %v", wl.Name, wl.OwnerReferences,
			wl.Spec.QueueName, wl.Labels, wl.Spec.PodSets[0].Count, wl.Spec.Priority, wl.Finalizers)
	}
}

// checkAdmittedPods checks that every pod carries the admission.
func checkAdmittedPods(t *testing.T, h *harness, workload string) {
	t.Helper()
	for name := range h.kubelet.Succeeded() {
		pod := &corev1.Pod{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeSelector["instance"] != "on-demand" || pod.Labels["kueue.x-k8s.io/podset"] != "main" ||
			pod.Annotations["kueue.x-k8s.io/workload"] != workload || pod.Spec.Tolerations[0].Key != "spot" {
			t.Errorf("pod %s: nodeSelector %v labels %v annotations %v tolerations %v", name, pod.Spec.NodeSelector,
				pod.Labels, pod.Annotations, pod.Spec.Tolerations)
		}
	}
}

// checkFinishedWorkload waits for the Workload to be Finished and released,
// and checks PodsReady and reclaimablePods as they were left.
func checkFinishedWorkload(t *testing.T, sj *batchv1alpha1.SafeJob) {
	t.Helper()
	wl := waitWorkload(t, sj, "Finished and released", func(wl *kueue.Workload) bool {
		c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kueue.WorkloadFinishedReasonSucceeded && len(wl.Finalizers) == 0
	})
	// Both pods were ready at once; with one completion left, one pod's quota was reclaimable.
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPodsReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("PodsReady = %+v, want True", c)
	}
	if rp := wl.Status.ReclaimablePods; len(rp) != 1 || rp[0].Name != kueue.DefaultPodSetName || rp[0].Count < 1 {
		t.Errorf("reclaimablePods = %+v, want main with at least 1", rp)
	}
}

// TestKueueEviction: an admitted SafeJob is preempted mid-way. Its pods are
// stopped and recorded Evicted, the quota is given back only once no pod is
// left, and after re-admission it completes exactly, with no failure counted.
func TestKueueEviction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-b", map[string]string{"instance": "on-demand"})
	sj := queuedSafeJob("preempted", h.ns, 4, 2)
	sj.Spec.BackoffLimit = ptr.To[int32](0)
	key := client.ObjectKeyFromObject(runAdmitted(t, sj, "on-demand-b"))
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadEvicted, metav1.ConditionTrue, kueue.WorkloadEvictedByPreemption, "Preempted to accommodate a higher priority Workload")
		setCond(wl, "Preempted", metav1.ConditionTrue, "InClusterQueue", "Preempted to accommodate a higher priority Workload")
	})
	checkQuotaGivenBack(t, h, sj)
	checkEvicted(t, sj, 2)
	h.kubelet.SetFate(succeed)
	admit(t, key, "on-demand-b")
	completeExactly(t, h, sj, 4, 6) // 2 preempted, 4 completions
}

// checkQuotaGivenBack waits for the reservation to go, checking that no pod
// of the SafeJob still ran when it went.
func checkQuotaGivenBack(t *testing.T, h *harness, sj *batchv1alpha1.SafeJob) {
	t.Helper()
	wl := waitWorkload(t, sj, "quota given back", func(wl *kueue.Workload) bool {
		if wl.Status.Admission != nil {
			return false
		}
		var pods corev1.PodList
		if err := k8s.List(context.Background(), &pods, client.InNamespace(h.ns)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				t.Errorf("quota given back while pod %s still runs", p.Name)
			}
		}
		return true
	})
	for typ, want := range map[string]string{kueue.WorkloadQuotaReserved: "Pending", kueue.WorkloadAdmitted: "NoReservation",
		kueue.WorkloadRequeued: kueue.WorkloadEvictedByPreemption} {
		if c := meta.FindStatusCondition(wl.Status.Conditions, typ); c == nil || c.Reason != want {
			t.Errorf("Workload condition %s = %+v, want reason %s", typ, c, want)
		}
	}
	if !meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadRequeued) {
		t.Error("a preempted Workload is not Requeued=True")
	}
}

// checkEvicted checks the ledger recorded the preempted pods as Evicted,
// listed (with the preemption as reason) or folded, and counted no failure.
func checkEvicted(t *testing.T, sj *batchv1alpha1.SafeJob, want int) {
	t.Helper()
	got := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatal(err)
	}
	for _, e := range got.Status.Ledger.Entries {
		if e.Type == batchv1alpha1.EntryEvicted && e.Reason != kueue.WorkloadEvictedByPreemption {
			t.Errorf("%s recorded Evicted with reason %q, want %q", e.Pod, e.Reason, kueue.WorkloadEvictedByPreemption)
		}
	}
	evicted := countEntries(got, batchv1alpha1.EntryEvicted)
	if evicted != want || got.Status.Failed != 0 || (got.Status.Active != 0 || openLaunches(t, got) != 0) {
		t.Fatalf("after eviction: %d Evicted entries, failed %d, active %d; want %d, 0, 0", evicted, got.Status.Failed, got.Status.Active, want)
	}
}

// TestKueueSuspendAndWorkloadLoss: user suspend deactivates the Workload; a
// deleted Workload stops the pods and is created again only once none runs.
func TestKueueSuspendAndWorkloadLoss(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-c", nil)
	sj := queuedSafeJob("lost", h.ns, 2, 2)
	wl := runAdmitted(t, sj, "on-demand-c")
	if err := k8s.Delete(context.Background(), wl); err != nil {
		t.Fatal(err)
	}
	waitWorkload(t, sj, "created again after the old one went", func(n *kueue.Workload) bool { return n.UID != wl.UID })
	got := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatal(err)
	}
	if (got.Status.Active != 0 || openLaunches(t, got) != 0) || got.Status.Failed != 0 {
		t.Errorf("new Workload while %d pods active (failed %d)", got.Status.Active, got.Status.Failed)
	}
	if err := k8s.Patch(context.Background(), got, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"suspend":true}}`))); err != nil {
		t.Fatal(err)
	}
	waitWorkload(t, sj, "deactivated", func(wl *kueue.Workload) bool { return !ptr.Deref(wl.Spec.Active, true) })
	h.watch.Check(t)
}

// TestKueueNotInstalled: without the Workload API a queued SafeJob waits and
// says why instead of running unqueued.
func TestKueueNotInstalled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{noKueue: true})
	sj := queuedSafeJob("nokueue", h.ns, 1, 1)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, "install Kueue")
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 0 {
		t.Fatalf("pods created without admission: %v", creates)
	}
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// TestQueueLabelFrozenWhileAdmitted: the API server refuses a change of the
// queue label of an admitted SafeJob (config/policy/queue-name.yaml) and
// accepts it while the SafeJob waits.
func TestQueueLabelFrozenWhileAdmitted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-d", nil)
	waiting := queuedSafeJob("waiting", h.ns, 1, 1)
	running := queuedSafeJob("running", h.ns, 1, 1)
	for _, sj := range []*batchv1alpha1.SafeJob{waiting, running} {
		if err := k8s.Create(context.Background(), sj); err != nil {
			t.Fatal(err)
		}
	}
	admit(t, client.ObjectKeyFromObject(waitWorkload(t, running, "created", anyWorkload)), "on-demand-d")
	admittedCondition(t, client.ObjectKeyFromObject(running), metav1.ConditionTrue, "admitted")
	relabel := func(sj *batchv1alpha1.SafeJob, opts ...client.PatchOption) error {
		patch := []byte(`{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"team-b"}}}`)
		return k8s.Patch(context.Background(), sj.DeepCopy(), client.RawPatch("application/merge-patch+json", patch), opts...)
	}
	// The policy is loaded by the API server asynchronously: dry runs until it bites.
	waitFor(t, 30*time.Second, "the queue-name policy to be in force", func() (bool, error) {
		return relabel(running, client.DryRunAll) != nil, nil
	})
	err := relabel(running)
	if err == nil || !strings.Contains(err.Error(), "while the SafeJob is admitted") {
		t.Fatalf("relabelling an admitted SafeJob: %v, want it refused", err)
	}
	if err := relabel(waiting); err != nil {
		t.Fatalf("relabelling a waiting SafeJob: %v", err)
	}
	waitWorkload(t, waiting, "moved to the new queue", func(wl *kueue.Workload) bool { return wl.Spec.QueueName == "team-b" })
}

// TestKueueWorkloadFinishedEarly: Kueue (v0.16.6 to v0.19.2) can finish a Workload as an
// orphan (OwnerNotFound) when its cache has not seen the SafeJob yet. The
// SafeJob stops its pods, counts nothing as failed, and queues again with a
// new Workload.
func TestKueueWorkloadFinishedEarly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-e", nil)
	sj := queuedSafeJob("orphaned", h.ns, 1, 1)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "created", anyWorkload)
	admit(t, client.ObjectKeyFromObject(wl), "on-demand-e")
	waitFor(t, 30*time.Second, "the pod to run", func() (bool, error) {
		got := &batchv1alpha1.SafeJob{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got)
		return err == nil && got.Status.Ready == 1, err
	})
	setWorkloadStatus(t, client.ObjectKeyFromObject(wl), func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadFinished, metav1.ConditionTrue, "OwnerNotFound", "The workload's owner no longer exists")
	})
	waitWorkload(t, sj, "replaced by a new one", func(n *kueue.Workload) bool { return n.UID != wl.UID })
	got := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Failed != 0 || (got.Status.Active != 0 || openLaunches(t, got) != 0) || finishedOrFailed(got) {
		t.Fatalf("after the early finish: failed %d active %d conditions %+v", got.Status.Failed, got.Status.Active, got.Status.Conditions)
	}
	waitForEvent(t, h.ns, "orphaned", "WorkloadFinishedEarly")
}

func finishedOrFailed(sj *batchv1alpha1.SafeJob) bool {
	return conditionTrue(sj, batchv1alpha1.ConditionComplete) || conditionTrue(sj, batchv1alpha1.ConditionFailed)
}

// admitPods gives the Workload quota in ClusterQueue cq for n of its pods,
// as Kueue does when it admits a pod set partially.
func admitPods(t *testing.T, key client.ObjectKey, flavor string, n int32) {
	t.Helper()
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		wl.Status.Admission = &kueue.Admission{ClusterQueue: "cq", PodSetAssignments: []kueue.PodSetAssignment{{
			Name: kueue.DefaultPodSetName, Count: ptr.To(n),
			Flavors: map[corev1.ResourceName]kueue.ResourceFlavorReference{corev1.ResourceCPU: kueue.ResourceFlavorReference(flavor)},
		}}}
		setCond(wl, kueue.WorkloadQuotaReserved, metav1.ConditionTrue, "QuotaReserved", "Quota reserved in ClusterQueue cq")
		setCond(wl, kueue.WorkloadAdmitted, metav1.ConditionTrue, "Admitted", "The workload is admitted")
	})
}

// waitOwnedWorkload waits for a Workload the SafeJob controls that
// satisfies cond, whatever its name.
func waitOwnedWorkload(t *testing.T, sj *batchv1alpha1.SafeJob, what string, cond func(*kueue.Workload) bool) *kueue.Workload {
	t.Helper()
	var found *kueue.Workload
	waitFor(t, 30*time.Second, "Workload "+what, func() (bool, error) {
		var list kueue.WorkloadList
		if err := k8s.List(context.Background(), &list, client.InNamespace(sj.Namespace)); err != nil {
			return false, err
		}
		for i := range list.Items {
			if metav1.IsControlledBy(&list.Items[i], sj) && cond(&list.Items[i]) {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

func getSafeJob(t *testing.T, sj *batchv1alpha1.SafeJob) *batchv1alpha1.SafeJob {
	t.Helper()
	got := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func setParallelism(t *testing.T, sj *batchv1alpha1.SafeJob, n int32) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"parallelism":%d}}`, n)
	if err := k8s.Patch(context.Background(), sj.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

// TestKueueParallelismRaised: parallelism raised from 2 to 5 while
// admitted for 2 pods. The SafeJob never runs more pods than admitted: as
// Kueue's job integrations do with a job that no longer matches its
// Workload, it stops its pods (Evicted, never failures) and, once none is
// left, queues again with a Workload of 5 pods. Kueue admits 2 of them; it
// runs 2 at a time and completes.
func TestKueueParallelismRaised(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-f", nil)
	sj := queuedSafeJob("raised", h.ns, 6, 2)
	old := runAdmitted(t, sj, "on-demand-f")
	setParallelism(t, sj, 5)
	requeued := waitWorkload(t, sj, "replaced by one of 5 pods", func(wl *kueue.Workload) bool {
		if wl.UID == old.UID || wl.Spec.PodSets[0].Count != 5 {
			return false
		}
		checkNoPodRuns(t, h.ns, "the new Workload")
		return true
	})
	if wl := requeued; wl.Status.Admission != nil || meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
		t.Fatalf("the new Workload is admitted before Kueue admitted it: %+v", wl.Status)
	}
	checkResizeStopped(t, getSafeJob(t, sj), 2)
	waitForEvent(t, h.ns, sj.Name, "WorkloadResized")
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 2 {
		t.Fatalf("pods created before the new Workload is admitted: %v", creates)
	}

	h.kubelet.SetFate(succeed)
	admitPods(t, client.ObjectKeyFromObject(requeued), "on-demand-f", 2)
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 6 || got.Status.Failed != 0 {
		t.Fatalf("after re-admission: succeeded %d failed %d conditions %+v", got.Status.Succeeded, got.Status.Failed, got.Status.Conditions)
	}
	if n := h.kubelet.MaxActive(); n > 2 {
		t.Errorf("%d pods were running at once; Kueue admitted 2", n)
	}
	if creates := h.finalCheck(t, got); len(creates) != 8 {
		t.Errorf("%d pods created, want 8 (2 stopped by the raise, 6 completions)", len(creates))
	}
}

// checkResizeStopped checks that a resize stopped the SafeJob's n pods as
// Evicted (WorkloadResized), none counted as a failure, none left active.
func checkResizeStopped(t *testing.T, got *batchv1alpha1.SafeJob, n int) {
	t.Helper()
	if e := countEntries(got, batchv1alpha1.EntryEvicted); e != n || got.Status.Failed != 0 || (got.Status.Active != 0 || openLaunches(t, got) != 0) {
		t.Fatalf("after the raise: %d Evicted entries, failed %d, active %d; want %d, 0, 0", e, got.Status.Failed, got.Status.Active, n)
	}
	for _, e := range got.Status.Ledger.Entries {
		if e.Type == batchv1alpha1.EntryEvicted && e.Reason != "WorkloadResized" {
			t.Errorf("%s recorded Evicted with reason %q, want WorkloadResized", e.Pod, e.Reason)
		}
	}
}

// checkNoPodRuns fails the test if a pod of the namespace is running.
func checkNoPodRuns(t *testing.T, ns, what string) {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			t.Errorf("%s while pod %s still runs", what, p.Name)
		}
	}
}

// TestKueueParallelismRaisedWhileQueued: a raise before admission resizes
// the waiting Workload in place (it keeps its place in the queue).
func TestKueueParallelismRaisedWhileQueued(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-g", nil)
	sj := queuedSafeJob("raised-early", h.ns, 4, 2)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "created", anyWorkload)
	setWorkloadStatus(t, client.ObjectKeyFromObject(wl), func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", "insufficient unused quota for cpu in flavor default, 1 more needed")
	})
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, "insufficient unused quota")
	setParallelism(t, sj, 4)
	resized := waitWorkload(t, sj, "resized to 4 pods", func(n *kueue.Workload) bool { return n.Spec.PodSets[0].Count == 4 })
	if resized.UID != wl.UID {
		t.Fatalf("the waiting Workload was replaced (%s, then %s), not resized", wl.UID, resized.UID)
	}
	sameTemplate(t, wl, resized)
	admit(t, client.ObjectKeyFromObject(resized), "on-demand-g")
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 4 || countEntries(got, batchv1alpha1.EntryEvicted) != 0 {
		t.Fatalf("succeeded %d, evicted %d, conditions %+v", got.Status.Succeeded, countEntries(got, batchv1alpha1.EntryEvicted), got.Status.Conditions)
	}
	h.finalCheck(t, got)
}

// foreignWorkload is a Workload at name the SafeJob does not control:
// controlled by ownerUID of a SafeJob of the same name (one deleted before),
// or by nothing when ownerUID is "" (created by a user, or orphaned).
func foreignWorkload(t *testing.T, sj *batchv1alpha1.SafeJob, name string, ownerUID types.UID) *kueue.Workload {
	t.Helper()
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sj.Namespace, Finalizers: []string{controller.ResourceInUseFinalizer}},
		Spec: kueue.WorkloadSpec{QueueName: "team-a", PodSets: []kueue.PodSet{{Name: kueue.DefaultPodSetName, Count: 1,
			Template: *sj.Spec.Template.DeepCopy()}}},
	}
	if ownerUID != "" {
		wl.Labels = map[string]string{controller.JobUIDLabel: string(ownerUID)}
		wl.OwnerReferences = []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob",
			Name: sj.Name, UID: ownerUID, Controller: ptr.To(true)}}
	}
	if err := k8s.Create(context.Background(), wl); err != nil {
		t.Fatal(err)
	}
	return wl
}

// checkUntouched fails the test if the SafeJob's controller wrote the
// Workload since the test last did (resourceVersion at), or took its finalizer.
func checkUntouched(t *testing.T, key client.ObjectKey, at string) {
	t.Helper()
	wl := &kueue.Workload{}
	if err := k8s.Get(context.Background(), key, wl); err != nil {
		t.Fatalf("Workload %s: %v", key.Name, err)
	}
	if wl.ResourceVersion != at || wl.DeletionTimestamp != nil || !slices.Contains(wl.Finalizers, controller.ResourceInUseFinalizer) {
		t.Errorf("Workload %s was touched: resourceVersion %s (was %s), deletion %v, finalizers %v", key.Name,
			wl.ResourceVersion, at, wl.DeletionTimestamp, wl.Finalizers)
	}
}

func resourceVersion(t *testing.T, key client.ObjectKey) string {
	t.Helper()
	wl := &kueue.Workload{}
	if err := k8s.Get(context.Background(), key, wl); err != nil {
		t.Fatal(err)
	}
	return wl.ResourceVersion
}

// TestKueueForeignWorkloadNames: Workloads the SafeJob does not control
// hold the names of its Workload, the first one admitted. The SafeJob never
// runs under that admission and never touches them. While every name is
// held it says so (Admitted=False, WorkloadNameTaken); once one is free it
// queues under it, and completes once its own Workload is admitted.
func TestKueueForeignWorkloadNames(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	makeFlavor(t, "on-demand-h", nil)
	sj := queuedSafeJob("taken", h.ns, 2, 1)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	names := controller.WorkloadNames(sj)
	earlier := foreignWorkload(t, sj, names[0], "uid-of-an-earlier-safejob")
	admit(t, client.ObjectKeyFromObject(earlier), "on-demand-h")
	earlierAt := resourceVersion(t, client.ObjectKeyFromObject(earlier))
	users := foreignWorkload(t, sj, names[1], "")
	startManager(t, h.ns, managerOptions{})

	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, names[1])
	if c := condition(getSafeJob(t, sj), batchv1alpha1.ConditionAdmitted); c.Reason != "WorkloadNameTaken" {
		t.Errorf("Admitted = %+v, want reason WorkloadNameTaken", c)
	}
	// The user frees the second name.
	usersAt := resourceVersion(t, client.ObjectKeyFromObject(users))
	checkUntouched(t, client.ObjectKeyFromObject(users), usersAt)
	if err := k8s.Patch(context.Background(), users, dropFinalizers); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), users); err != nil {
		t.Fatal(err)
	}
	own := waitOwnedWorkload(t, sj, "created under the second name", anyWorkload)
	if own.Name != names[1] {
		t.Fatalf("the SafeJob's Workload is %s, want %s", own.Name, names[1])
	}
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, "LocalQueue team-a")
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 0 {
		t.Fatalf("pods created under a Workload the SafeJob does not control: %v", creates)
	}
	admit(t, client.ObjectKeyFromObject(own), "on-demand-h")
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 2 {
		t.Fatalf("succeeded %d conditions %+v", got.Status.Succeeded, got.Status.Conditions)
	}
	waitOwnedWorkload(t, sj, "Finished and released", func(wl *kueue.Workload) bool {
		return meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) && len(wl.Finalizers) == 0
	})
	checkUntouched(t, client.ObjectKeyFromObject(earlier), earlierAt)
	h.finalCheck(t, got)
}

// TestKueueWorkloadsReleasedByUID: a deleted SafeJob's Workload loses its
// finalizer; a Workload controlled by an earlier SafeJob of the same name
// does not.
func TestKueueWorkloadsReleasedByUID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	makeFlavor(t, "on-demand-i", nil)
	sj := queuedSafeJob("released", h.ns, 1, 1)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	earlier := foreignWorkload(t, sj, "left-by-an-earlier-safejob", "uid-of-an-earlier-safejob")
	earlierAt := resourceVersion(t, client.ObjectKeyFromObject(earlier))
	startManager(t, h.ns, managerOptions{})
	own := waitWorkload(t, sj, "created", anyWorkload)
	admit(t, client.ObjectKeyFromObject(own), "on-demand-i")
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionTrue, "admitted")
	if err := k8s.Delete(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the deleted SafeJob's Workload released", func() (bool, error) {
		wl := &kueue.Workload{}
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(own), wl)
		return apierrors.IsNotFound(err) || (err == nil && len(wl.Finalizers) == 0), client.IgnoreNotFound(err)
	})
	checkUntouched(t, client.ObjectKeyFromObject(earlier), earlierAt)
}

// TestKueuePartialAdmission: kueue.x-k8s.io/job-min-parallelism becomes the
// Workload's minCount; admitted for 2 of 4 pods, the SafeJob runs 2 at a
// time, reports PodsReady once those 2 are ready, reclaims nothing while
// more completions are left than pods admitted, and completes with one pod
// per completion. The API server refuses a value Kueue would refuse.
func TestKueuePartialAdmission(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-p", nil)
	withMin := func(name, v string) *batchv1alpha1.SafeJob {
		sj := queuedSafeJob(name, h.ns, 6, 4)
		sj.Annotations = map[string]string{controller.MinParallelismAnnotation: v}
		return sj
	}
	waitFor(t, 30*time.Second, "the min-parallelism policy to be in force", func() (bool, error) {
		return k8s.Create(context.Background(), withMin("probe", "4"), client.DryRunAll) != nil, nil
	})
	for v, want := range map[string]string{"4": "from 1 to 3", "0": "from 1 to 3", "two": `"two" must be a whole number`} {
		err := k8s.Create(context.Background(), withMin("bad", v))
		if err == nil || !strings.Contains(err.Error(), "metadata.annotations[kueue.x-k8s.io/job-min-parallelism]") ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("min-parallelism %q: %v, want it refused naming the annotation and %q", v, err, want)
		}
	}
	sj := withMin("partial", "2")
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "created with minCount 2", func(wl *kueue.Workload) bool {
		return wl.Spec.PodSets[0].Count == 4 && ptr.Deref(wl.Spec.PodSets[0].MinCount, 0) == 2
	})
	admitPods(t, client.ObjectKeyFromObject(wl), "on-demand-p", 2)
	waitWorkload(t, sj, "PodsReady with the 2 admitted pods ready", func(wl *kueue.Workload) bool {
		return meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadPodsReady)
	})
	waitFor(t, 30*time.Second, "two ready pods", func() (bool, error) {
		got := getSafeJob(t, sj)
		return got.Status.Ready == 2 && got.Status.Active == 2, nil
	})
	if wl := waitWorkload(t, sj, "read", anyWorkload); len(wl.Status.ReclaimablePods) != 0 {
		t.Errorf("reclaimable pods %+v with 6 completions left and 2 pods admitted", wl.Status.ReclaimablePods)
	}
	h.kubelet.SetFate(succeed)
	completeExactly(t, h, sj, 6, 6)
	if n := h.kubelet.MaxActive(); n > 2 {
		t.Errorf("%d pods were running at once; Kueue admitted 2", n)
	}
}

// TestKueueDeactivationIsKueues: a Workload deactivated by Kueue (here as
// for a rejected admission check) stops the SafeJob as an eviction does:
// pods recorded Evicted, no failure, quota given back, and the Admitted
// condition says why and how to resume. SafeJob never activates it again,
// not even across a suspend and resume by the user; once it is activated
// and admitted again, the SafeJob completes with one pod per completion
// besides the evicted ones. Its own suspend still deactivates and, on
// resume, activates the Workload.
func TestKueueDeactivationIsKueues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-x", nil)
	sj := queuedSafeJob("deactivated", h.ns, 4, 2)
	key := client.ObjectKeyFromObject(runAdmitted(t, sj, "on-demand-x"))
	setWorkloadActive(t, key, false)
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadEvicted, metav1.ConditionTrue, "DeactivatedDueToAdmissionCheck",
			"The workload is deactivated due to Admission check(s): multikueue, were rejected")
	})
	deactivatedAt := waitWorkload(t, sj, "quota given back", func(wl *kueue.Workload) bool { return wl.Status.Admission == nil })
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, "stays stopped until Workload")
	got := getSafeJob(t, sj)
	if c := condition(got, batchv1alpha1.ConditionAdmitted); c.Reason != "DeactivatedDueToAdmissionCheck" {
		t.Errorf("Admitted reason %q, want Kueue's DeactivatedDueToAdmissionCheck", c.Reason)
	}
	if e := countEntries(got, batchv1alpha1.EntryEvicted); e != 2 || got.Status.Failed != 0 || openLaunches(t, got) != 0 {
		t.Fatalf("after deactivation: %d Evicted entries, failed %d, %d launches open; want 2, 0, 0", e, got.Status.Failed, openLaunches(t, got))
	}
	// The user suspends, then resumes and moves it to another queue: the
	// Workload follows the queue, and the Workload Kueue deactivated stays so.
	patchSuspend(t, sj, true)
	waitFor(t, 30*time.Second, "suspend observed", func() (bool, error) {
		return conditionTrue(getSafeJob(t, sj), batchv1alpha1.ConditionSuspended), nil
	})
	if wl := waitWorkload(t, sj, "read", anyWorkload); wl.Generation != deactivatedAt.Generation {
		t.Errorf("Workload generation %d after suspend, was %d: SafeJob changed a Workload Kueue deactivated", wl.Generation, deactivatedAt.Generation)
	}
	patch := []byte(`{"spec":{"suspend":false},"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"team-b"}}}`)
	if err := k8s.Patch(context.Background(), sj.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "moved to the new queue", func(wl *kueue.Workload) bool { return wl.Spec.QueueName == "team-b" })
	if _, marked := wl.Annotations[jobs.SuspendedAnnotation]; ptr.Deref(wl.Spec.Active, true) || marked {
		t.Fatalf("Workload active %v, marked %v after resume: SafeJob activated a Workload Kueue deactivated",
			ptr.Deref(wl.Spec.Active, true), marked)
	}
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 2 {
		t.Fatalf("pods created while deactivated: %v", creates)
	}
	// Activated again (kubectl kueue resume workload) and admitted: it completes.
	setWorkloadActive(t, key, true)
	h.kubelet.SetFate(succeed)
	admit(t, key, "on-demand-x")
	completeExactly(t, h, sj, 4, 6) // 2 evicted, 4 completions
}

// TestKueueSuspendRoundTrip: the SafeJob's own suspend deactivates its
// Workload, marked as SafeJob's doing, and its resume activates it again.
// Both spec updates keep the Workload's pod template, which the operator's
// cache leaves out.
func TestKueueSuspendRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	sj := queuedSafeJob("roundtrip", h.ns, 1, 1)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	created := waitWorkload(t, sj, "created", anyWorkload)
	patchSuspend(t, sj, true)
	deactivated := waitWorkload(t, sj, "deactivated for suspend", func(wl *kueue.Workload) bool {
		return !ptr.Deref(wl.Spec.Active, true) && wl.Annotations[jobs.SuspendedAnnotation] == "true"
	})
	sameTemplate(t, created, deactivated)
	patchSuspend(t, sj, false)
	activated := waitWorkload(t, sj, "activated on resume, unmarked", func(wl *kueue.Workload) bool {
		_, marked := wl.Annotations[jobs.SuspendedAnnotation]
		return ptr.Deref(wl.Spec.Active, true) && !marked
	})
	sameTemplate(t, created, activated)
}

// sameTemplate fails the test unless the Workload's pod sets kept the
// template they were created with.
func sameTemplate(t *testing.T, before, after *kueue.Workload) {
	t.Helper()
	if len(after.Spec.PodSets) != len(before.Spec.PodSets) {
		t.Fatalf("Workload %s: %d pod sets, was %d", after.Name, len(after.Spec.PodSets), len(before.Spec.PodSets))
	}
	for i := range before.Spec.PodSets {
		if diff := cmp.Diff(before.Spec.PodSets[i].Template, after.Spec.PodSets[i].Template); diff != "" {
			t.Errorf("Workload %s, pod set %s: template changed (-before,+after):\n%s", after.Name, after.Spec.PodSets[i].Name, diff)
		}
	}
}

// setWorkloadActive sets spec.active, as Kueue or kubectl kueue stop/resume do.
func setWorkloadActive(t *testing.T, key client.ObjectKey, active bool) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wl := &kueue.Workload{}
		if err := k8s.Get(context.Background(), key, wl); err != nil {
			return err
		}
		wl.Spec.Active = ptr.To(active)
		return k8s.Update(context.Background(), wl)
	}); err != nil {
		t.Fatal(err)
	}
}

// patchSuspend sets the SafeJob's spec.suspend.
func patchSuspend(t *testing.T, sj *batchv1alpha1.SafeJob, suspend bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"suspend":%v}}`, suspend)
	if err := k8s.Patch(context.Background(), sj.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}
