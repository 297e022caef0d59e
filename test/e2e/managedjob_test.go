package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
	"github.com/safejob/safejob/test/cluster"
)

// managedJobSpec is a Job spec that names SafeJob in managedBy, its pods
// running for d on KWOK's nodes.
func managedJobSpec(completions int32, d string) batchv1.JobSpec {
	return batchv1.JobSpec{
		ManagedBy:   ptr.To(batchv1alpha1.ControllerName),
		Completions: ptr.To(completions),
		Parallelism: ptr.To(completions),
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": d}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
		},
	}
}

// TestManagedJobsOnTheCluster runs Jobs managed by SafeJob beside the
// built-in controllers that act on Jobs: kubectl wait and a label
// selector find them as they find a Job; the TTL controller deletes a
// finished one; the CronJob controller runs one from its jobTemplate, sees
// it finish and applies its history limit; and every deletion propagation
// policy does what it does to a Job: background and foreground delete its
// pods with it, orphan leaves them running, none created after.
func TestManagedJobsOnTheCluster(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(e.c.BinDir, "kubectl"), append([]string{"--kubeconfig", e.kubeconfig, "-n", nsBatch}, args...)...).CombinedOutput()
		return string(out), err
	}
	ctx := context.Background()
	t.Run("kubectl wait, selectors and the plugin", func(t *testing.T) { e.checkManagedJobTools(t, kubectl) })
	t.Run("ttlSecondsAfterFinished", func(t *testing.T) {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "short-lived", Namespace: nsBatch}, Spec: managedJobSpec(1, "1s")}
		job.Spec.TTLSecondsAfterFinished = ptr.To[int32](2)
		if err := e.cl.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		e.waitGone(t, job, time.Minute, "the TTL controller to delete the finished Job, and its ledger and pods with it")
	})
	t.Run("CronJob", func(t *testing.T) { e.checkManagedCronJob(t) })
	for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground,
		metav1.DeletePropagationOrphan} {
		t.Run("delete "+string(policy), func(t *testing.T) { e.checkManagedDeletion(t, policy) })
	}
}

// checkManagedJobTools: kubectl wait and a label selector find a managed
// Job and its pods as they find a Job's; the plugin reads its ledger and
// says why it is where it is, and refuses a Job SafeJob does not manage.
func (e *env) checkManagedJobTools(t *testing.T, kubectl func(...string) (string, error)) {
	ctx := context.Background()
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "waited", Namespace: nsBatch}, Spec: managedJobSpec(2, "1s")}
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("wait", "--for=condition=complete", "job/waited", "--timeout=60s"); err != nil {
		t.Fatalf("kubectl wait --for=condition=complete job/waited: %v\n%s", err, out)
	}
	out, err := kubectl("get", "pods", "-l", "batch.kubernetes.io/job-name=waited", "-o", "name")
	if err != nil || strings.Count(out, "pod/") != 2 {
		t.Errorf("kubectl get pods -l batch.kubernetes.io/job-name=waited: %v\n%s", err, out)
	}
	if out, err := kubectl("get", "job", "waited", "-o", "jsonpath={.status.succeeded}/{.status.uncountedTerminatedPods}"); err != nil || out != "2/{}" {
		t.Errorf("the Job's status: %q, %v", out, err)
	}
	e.checkPluginOnManagedJob(t)
}

// checkPluginOnManagedJob: the plugin reads the ledger of the managed Job
// "waited" and says why it is where it is, and refuses a Job SafeJob does
// not manage.
func (e *env) checkPluginOnManagedJob(t *testing.T) {
	ctx := context.Background()
	p := buildPlugin(t, e)
	out, errOut, code := p.run(t, "", "safejob", "ledger", "job/waited", "-n", nsBatch, "-o", "json")
	var v plugin.LedgerView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Totals == nil || v.Totals.Succeeded != 2 || v.Name != "waited" {
		t.Errorf("kubectl safejob ledger job/waited: exit %d, %s\n%s", code, errOut, out)
	}
	if out, _, code := p.run(t, "", "safejob", "why", "job/waited", "-n", nsBatch); code != 0 || !strings.Contains(out, "Finished") {
		t.Errorf("kubectl safejob why job/waited: exit %d\n%s", code, out)
	}
	builtIn := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "built-in", Namespace: nsBatch}, Spec: managedJobSpec(1, "1s")}
	builtIn.Spec.ManagedBy = nil
	if err := e.cl.Create(ctx, builtIn); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := p.run(t, "", "safejob", "why", "job/built-in", "-n", nsBatch); code != 1 || !strings.Contains(errOut, "not managed by SafeJob") {
		t.Errorf("kubectl safejob why job/built-in: exit %d, %s", code, errOut)
	}
}

// waitGone waits until the Job, its ledger and its pods are all gone.
func (e *env) waitGone(t *testing.T, job *batchv1.Job, timeout time.Duration, what string) {
	t.Helper()
	ctx := context.Background()
	waitUntil(t, timeout, what, func() bool {
		var pods corev1.PodList
		return apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})) &&
			apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(job), &batchv1alpha1.SafeJob{})) &&
			e.cl.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1alpha1.JobNameLabel: job.Name}) == nil &&
			len(pods.Items) == 0
	})
}

// checkManagedCronJob runs a CronJob whose jobTemplate names SafeJob: the
// CronJob controller creates the Job, SafeJob runs it, the CronJob
// controller sees it succeed (lastSuccessfulTime, its active list empties)
// and, with a history limit of 0, deletes it, and its ledger goes with it.
func (e *env) checkManagedCronJob(t *testing.T) {
	ctx := context.Background()
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "minutely", Namespace: nsBatch},
		Spec: batchv1.CronJobSpec{Schedule: "* * * * *", ConcurrencyPolicy: batchv1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To[int32](0),
			JobTemplate:                batchv1.JobTemplateSpec{Spec: managedJobSpec(1, "1s")}},
	}
	if err := e.cl.Create(ctx, cj); err != nil {
		t.Fatal(err)
	}
	// Tear the schedule down before its Jobs.
	defer func() {
		if err := e.cl.Delete(ctx, cj); err != nil {
			t.Errorf("deleting the CronJob: %v", err)
		}
	}()
	var ran string
	waitUntil(t, 90*time.Second, "the CronJob's first Job to be run by SafeJob", func() bool {
		var jobs batchv1.JobList
		if e.cl.List(ctx, &jobs, client.InNamespace(nsBatch)) != nil {
			return false
		}
		for _, j := range jobs.Items {
			if ref := metav1.GetControllerOf(&j); ref != nil && ref.Kind == "CronJob" && ref.Name == cj.Name {
				ran = j.Name
				return e.cl.Get(ctx, client.ObjectKeyFromObject(&j), &batchv1alpha1.SafeJob{}) == nil
			}
		}
		return false
	})
	waitUntil(t, time.Minute, "the CronJob controller to see its Job succeed and delete it (history limit 0)", func() bool {
		got := &batchv1.CronJob{}
		return e.cl.Get(ctx, client.ObjectKeyFromObject(cj), got) == nil && got.Status.LastSuccessfulTime != nil &&
			len(got.Status.Active) == 0 &&
			apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(cj), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: ran}}))
	})
	e.waitGone(t, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: ran, Namespace: nsBatch}}, time.Minute, "the CronJob's Job's ledger and pods to go")
}

// checkManagedDeletion deletes a running managed Job with policy: its
// ledger goes; its pods go with it, or with orphan stay running without
// an owner or the ledger finalizer; no pod is created after.
func (e *env) checkManagedDeletion(t *testing.T, policy metav1.DeletionPropagation) {
	ctx := context.Background()
	name := "deleted-" + strings.ToLower(string(policy))
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsBatch}, Spec: managedJobSpec(2, "1h")}
	if err := e.cl.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	pods := func() []corev1.Pod {
		var list corev1.PodList
		if err := e.cl.List(ctx, &list, client.InNamespace(nsBatch), client.MatchingLabels{batchv1alpha1.JobNameLabel: name}); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	waitUntil(t, time.Minute, "both pods of "+name+" to run", func() bool {
		running := 0
		for _, p := range pods() {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 2
	})
	if err := e.cl.Delete(ctx, job, client.PropagationPolicy(policy)); err != nil {
		t.Fatal(err)
	}
	if policy != metav1.DeletePropagationOrphan {
		e.waitGone(t, job, time.Minute, "the Job, its ledger and its pods to go")
		return
	}
	e.checkOrphaned(t, job, pods)
}

// checkOrphaned: a Job deleted with the orphan policy leaves its pods
// running, without an owner or the ledger finalizer, and none is created
// after; its ledger goes.
func (e *env) checkOrphaned(t *testing.T, job *batchv1.Job, pods func() []corev1.Pod) {
	ctx := context.Background()
	waitUntil(t, time.Minute, "the Job and its ledger to go, and the pods to be released", func() bool {
		if !apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})) ||
			!apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKeyFromObject(job), &batchv1alpha1.SafeJob{})) {
			return false
		}
		for _, p := range pods() {
			if len(p.OwnerReferences) > 0 || len(p.Finalizers) > 0 {
				return false
			}
		}
		return true
	})
	left := pods()
	for _, p := range left {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Errorf("orphaned pod %s: %s, deleting %v; want it running, as a Job's orphaned pods", p.Name, p.Status.Phase, p.DeletionTimestamp)
		}
	}
	if len(left) != 2 {
		t.Errorf("%d pods after the orphaning delete, want the 2 that ran (none created after)", len(left))
	}
	for _, p := range left {
		if err := e.cl.Delete(ctx, &p); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleaning up pod %s: %v", p.Name, err)
		}
	}
}
