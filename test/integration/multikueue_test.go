package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// The MultiKueue tests play MultiKueue's part by hand on one API server
// (the end-to-end test runs the real one across two clusters): on the
// manager it admits, evicts and finishes the Workload and copies a worker's
// status onto the SafeJob; on the worker it makes the Workload and the copy
// of the SafeJob as MultiKueue does.

// TestMultiKueueManager: a SafeJob managed by kueue.x-k8s.io/multikueue
// gets its Workload from SafeJob and nothing else: no pod and no status
// write, whatever the Workload goes through. After an eviction it gives the
// quota back only once the worker's status shows no pod running; once
// MultiKueue finishes the Workload, its finalizer goes and no Workload
// replaces it.
func TestMultiKueueManager(t *testing.T) {
	t.Parallel()
	h := newHarness(t, succeed, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-mk", nil)
	sj := queuedSafeJob("dispatched", h.ns, 3, 2)
	sj.Spec.ManagedBy = ptr.To(kueue.MultiKueueControllerName)
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	wl := waitWorkload(t, sj, "created for 2 pods", func(wl *kueue.Workload) bool { return wl.Spec.PodSets[0].Count == 2 })
	key := client.ObjectKeyFromObject(wl)
	admit(t, key, "on-demand-mk")
	// The worker runs a pod (status copied by MultiKueue); then the manager evicts.
	copyStatus(t, sj, batchv1alpha1.SafeJobStatus{Active: 1, Ready: 1})
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadEvicted, metav1.ConditionTrue, kueue.WorkloadEvictedByPreemption, "Preempted on the manager")
	})
	copyStatus(t, sj, batchv1alpha1.SafeJobStatus{Active: 1, Ready: 1, Succeeded: 1})
	if got := waitWorkload(t, sj, "read", anyWorkload); got.Status.Admission == nil {
		t.Fatalf("quota given back while the worker still runs a pod")
	}
	copyStatus(t, sj, batchv1alpha1.SafeJobStatus{Succeeded: 1})
	waitWorkload(t, sj, "quota given back once the worker runs none", func(wl *kueue.Workload) bool { return wl.Status.Admission == nil })
	admit(t, key, "on-demand-mk")
	done := batchv1alpha1.SafeJobStatus{Succeeded: 3, Conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionComplete,
		Status: metav1.ConditionTrue, Reason: batchv1alpha1.ReasonCompletionsReached, Message: "done on the worker",
		LastTransitionTime: metav1.Now()}}}
	copyStatus(t, sj, done)
	setWorkloadStatus(t, key, func(wl *kueue.Workload) {
		setCond(wl, kueue.WorkloadFinished, metav1.ConditionTrue, kueue.WorkloadFinishedReasonSucceeded, "From the worker")
	})
	waitWorkload(t, sj, "released once finished", func(got *kueue.Workload) bool {
		return got.UID == wl.UID && !slices.Contains(got.Finalizers, controller.ResourceInUseFinalizer)
	})
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 0 {
		t.Errorf("pods created on the manager: %v", creates)
	}
	if writes := statusWrites(t, h.ns); writes != 4 {
		t.Errorf("%d status writes of SafeJobs in the namespace; want the 4 copies made here, none by SafeJob", writes)
	}
	var list kueue.WorkloadList
	if err := k8s.List(context.Background(), &list, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d Workloads, want the one MultiKueue finished", len(list.Items))
	}
}

// TestMultiKueueWorker: a worker's copy of a dispatched SafeJob adopts the
// Workload MultiKueue made for it (even when the copy comes first), runs
// under it, finishes it, never changes its spec and never makes another;
// a Workload of that name that another object controls is never touched.
// The copy of a run lets its run finalizer go when MultiKueue deletes it.
func TestMultiKueueWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, succeed, false)
	startManager(t, h.ns, managerOptions{})
	makeFlavor(t, "on-demand-mkw", nil)
	// The copy first, its Workload after: it waits, then adopts it. It is
	// the copy of a run of a schedule: the run finalizer and the parent's
	// annotations come with it, and no parent of that UID is here. Kueue
	// from v0.18 names the Workload in an annotation (copyOf).
	sj := copyOf("remote", h.ns, "safejob-remote-0a1b2", true)
	sj.Finalizers = []string{batchv1alpha1.RunFinalizer}
	sj.Annotations[batchv1alpha1.ParentLabel] = "nightly"
	sj.Annotations[batchv1alpha1.ParentUIDAnnotation] = "the-managers-parent-uid"
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	admittedCondition(t, client.ObjectKeyFromObject(sj), metav1.ConditionFalse, "which MultiKueue creates")
	wl := prebuiltWorkload(t, sj, "safejob-remote-0a1b2")
	key := client.ObjectKeyFromObject(wl)
	waitFor(t, 30*time.Second, "the Workload adopted", func() (bool, error) {
		got := &kueue.Workload{}
		err := k8s.Get(context.Background(), key, got)
		return err == nil && metav1.IsControlledBy(got, getSafeJob(t, sj)), err
	})
	admit(t, key, "on-demand-mkw")
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 4 {
		t.Fatalf("succeeded %d, conditions %+v", got.Status.Succeeded, got.Status.Conditions)
	}
	var finished *kueue.Workload
	waitFor(t, 30*time.Second, "the Workload Finished and released", func() (bool, error) {
		finished = &kueue.Workload{}
		err := k8s.Get(context.Background(), key, finished)
		return err == nil && meta.IsStatusConditionTrue(finished.Status.Conditions, kueue.WorkloadFinished) &&
			!slices.Contains(finished.Finalizers, controller.ResourceInUseFinalizer), err
	})
	if finished.Generation != wl.Generation {
		t.Errorf("Workload generation %d, was %d: its spec changed", finished.Generation, wl.Generation)
	}
	if creates := h.finalCheck(t, got); len(creates) != 4 {
		t.Errorf("%d pods created, want 4", len(creates))
	}
	// MultiKueue removes the copy (background propagation): it goes.
	if err := k8s.Delete(context.Background(), sj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the copy gone", func() (bool, error) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sj), &batchv1alpha1.SafeJob{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// TestMultiKueueWorkerStranger: a worker's copy whose Workload another
// object controls never touches it, never makes one, and runs no pod.
func TestMultiKueueWorkerStranger(t *testing.T) {
	t.Parallel()
	h := newHarness(t, succeed, false)
	startManager(t, h.ns, managerOptions{})
	owner := queuedSafeJob("owner", h.ns, 1, 1)
	owner.Spec.ManagedBy = ptr.To("example.com/elsewhere")
	if err := k8s.Create(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	foreign := prebuiltWorkload(t, owner, "safejob-foreign-3c4d5")
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(foreign), foreign); err != nil {
		t.Fatal(err)
	}
	// Kueue before v0.18 names the Workload in a label (copyOf).
	stranger := copyOf("stranger", h.ns, foreign.Name, false)
	if err := k8s.Create(context.Background(), stranger); err != nil {
		t.Fatal(err)
	}
	admittedCondition(t, client.ObjectKeyFromObject(stranger), metav1.ConditionFalse, "controlled by another object")
	after := &kueue.Workload{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(foreign), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("a Workload another object controls was written: %+v", after.ObjectMeta)
	}
	var list kueue.WorkloadList
	if err := k8s.List(context.Background(), &list, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d Workloads, want the one made here: a copy never makes one", len(list.Items))
	}
	if creates, _ := testutil.PodCreates(auditLog, h.ns); len(creates) != 0 {
		t.Errorf("pods created under a Workload another object controls: %v", creates)
	}
}

// copyOf is a worker cluster's copy of a SafeJob as MultiKueue makes it:
// the origin label and the name of its Workload, in an annotation as Kueue
// writes it from v0.18 or in a label as earlier releases do.
func copyOf(name, ns, workload string, annotated bool) *batchv1alpha1.SafeJob {
	sj := queuedSafeJob(name, ns, 4, 2)
	sj.Labels[kueue.MultiKueueOriginLabel] = "manager"
	sj.Annotations = map[string]string{}
	if annotated {
		sj.Annotations[jobs.PrebuiltWorkloadKey] = workload
	} else {
		sj.Labels[jobs.PrebuiltWorkloadKey] = workload
	}
	return sj
}

// prebuiltWorkload creates a Workload as MultiKueue creates one on a worker:
// the manager's name, labels and spec, no owner; owner, when it is not a
// copy, becomes its controller.
func prebuiltWorkload(t *testing.T, owner *batchv1alpha1.SafeJob, name string) *kueue.Workload {
	t.Helper()
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: owner.Namespace, Labels: map[string]string{
			kueue.MultiKueueOriginLabel: "manager", controller.JobUIDLabel: "the-managers-uid"}},
		Spec: kueue.WorkloadSpec{QueueName: "team-a", Active: ptr.To(true), PodSets: []kueue.PodSet{{
			Name: kueue.DefaultPodSetName, Count: 2, Template: owner.Spec.Template}}},
	}
	if jobs.PrebuiltWorkloadName(owner) == "" {
		live := getSafeJob(t, owner)
		wl.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(live, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}
	}
	if err := k8s.Create(context.Background(), wl); err != nil {
		t.Fatal(err)
	}
	return wl
}

// copyStatus writes a worker's status onto the SafeJob, as MultiKueue does.
func copyStatus(t *testing.T, sj *batchv1alpha1.SafeJob, status batchv1alpha1.SafeJobStatus) {
	t.Helper()
	got := getSafeJob(t, sj)
	got.Status = status
	if err := k8s.Status().Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
}

// statusWrites counts the SafeJob status writes the API server took in ns.
func statusWrites(t *testing.T, ns string) int {
	t.Helper()
	reqs, err := testutil.Writes(auditLog, "safejobs", "status")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range reqs {
		if r.Namespace == ns && r.Code < 300 {
			n++
		}
	}
	return n
}

// TestMultiKueueScheduled: a scheduled SafeJob managed by
// kueue.x-k8s.io/multikueue runs here as a schedule whose runs MultiKueue
// dispatches. Each run names its parent in annotations, not an owner
// reference (a worker's garbage collector would delete a copy whose owner
// it does not have), gets its Workload and no pod; the parent records the
// outcome MultiKueue copies back and releases the run; and once the parent
// is deleted, the operator deletes its runs (no garbage collector runs in
// this suite: only the operator can).
func TestMultiKueueScheduled(t *testing.T) {
	t.Parallel()
	s, ns := newScheduleHarness(t)
	startManager(t, ns, managerOptions{clock: s.clock})
	makeFlavor(t, "on-demand-mks", nil)
	parent := queuedSafeJob("nightly", ns, 2, 2)
	parent.Spec.Schedule = ptr.To("* * * * *")
	parent.Spec.ManagedBy = ptr.To(batchv1alpha1.MultiKueueManagedBy)
	s.create(t, parent)
	live := s.getParent(t)

	s.at(t, s.minute(0))
	first := s.waitRun(t, s.runName(0))
	if len(first.OwnerReferences) != 0 || first.Annotations[batchv1alpha1.ParentUIDAnnotation] != string(live.UID) ||
		first.Annotations[batchv1alpha1.ParentLabel] != parent.Name || !first.Dispatched() ||
		!slices.Contains(first.Finalizers, batchv1alpha1.RunFinalizer) {
		t.Fatalf("dispatched run: ownerReferences %v, annotations %v, managedBy %v, finalizers %v",
			first.OwnerReferences, first.Annotations, first.Spec.ManagedBy, first.Finalizers)
	}
	wl := waitWorkload(t, first, "created for the run", func(wl *kueue.Workload) bool {
		return metav1.IsControlledBy(wl, first) && wl.Spec.PodSets[0].Count == 2
	})
	admit(t, client.ObjectKeyFromObject(wl), "on-demand-mks")
	copyStatus(t, first, batchv1alpha1.SafeJobStatus{Succeeded: 2, Conditions: []metav1.Condition{{
		Type: batchv1alpha1.ConditionComplete, Status: metav1.ConditionTrue, Reason: batchv1alpha1.ReasonCompletionsReached,
		Message: "done on the worker", LastTransitionTime: metav1.Now()}}})
	s.waitLedger(t, batchv1alpha1.EntrySucceeded, first.Name)
	s.pastFence(t, 0)
	waitFor(t, 30*time.Second, "the run finalizer released", func() (bool, error) {
		run := s.run(t, first.Name)
		return run != nil && len(run.Finalizers) == 0, nil
	})

	// A second run is running on a worker when the parent is deleted.
	s.at(t, s.minute(1))
	second := s.waitRun(t, s.runName(1))
	waitWorkload(t, second, "created for the second run", anyWorkload)
	copyStatus(t, second, batchv1alpha1.SafeJobStatus{Active: 2})
	if err := k8s.Delete(context.Background(), live, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	s.waitGone(t, first.Name)
	s.waitGone(t, second.Name)
	if creates, _ := testutil.PodCreates(auditLog, ns); len(creates) != 0 {
		t.Errorf("pods created on the manager: %v", creates)
	}
	s.checkOnce(t, first.Name, second.Name)
}
