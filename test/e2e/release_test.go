package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
	"github.com/safejob/safejob/test/cluster"
)

// TestKubectlPluginRelease: the operator is stopped while SafeJobs run
// and a schedule has started a run, and their namespace is deleted: the
// pods' finalizers hold it (the namespace controller deletes the pods
// first and waits for them), and the run's would next. `kubectl safejob release`
// refuses while a fresh operator Lease is there; --dry-run lists the pods
// whose outcomes it gives up and changes nothing; then release frees
// everything, the namespace deletes within a minute, and a second release
// finds nothing left.
func TestKubectlPluginRelease(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	ctx := context.Background()
	p := buildPlugin(t, e)
	for _, name := range []string{"busy-0", "busy-1", "busy-2"} {
		if err := e.cl.Create(ctx, plainSafeJob(name, 1, 1, "1h")); err != nil {
			t.Fatal(err)
		}
	}
	every := plainSafeJob("every", 1, 1, "1h")
	every.Spec.Completions, every.Spec.Parallelism, every.Spec.Schedule = nil, nil, ptr.To("@every 2s")
	if err := e.cl.Create(ctx, every); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "the busy pods and a run's pod running", func() bool {
		var pods corev1.PodList
		if e.cl.List(ctx, &pods, client.InNamespace(nsSafeJob)) != nil {
			return false
		}
		busy, runs := 0, 0
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodRunning && slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
				if strings.HasPrefix(pod.Name, "busy-") {
					busy++
				} else if strings.HasPrefix(pod.Name, "every-") {
					runs++
				}
			}
		}
		return busy == 3 && runs > 0
	})
	e.stopOperators()
	if err := e.cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsSafeJob}}); err != nil {
		t.Fatal(err)
	}
	// The namespace controller deletes the pods first, and waits for them.
	waitUntil(t, time.Minute, "the namespace's pods to be deleting", func() bool {
		var pods corev1.PodList
		if e.cl.List(ctx, &pods, client.InNamespace(nsSafeJob)) != nil || len(pods.Items) == 0 {
			return false
		}
		return !slices.ContainsFunc(pods.Items, func(pod corev1.Pod) bool { return pod.DeletionTimestamp == nil })
	})

	// An operator elsewhere whose Lease is fresh: release refuses.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: nsBatch, Name: plugin.LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("elsewhere"), LeaseDurationSeconds: ptr.To[int32](3600),
			RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if err := e.cl.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := p.run(t, "", "safejob", "release", "-A")
	if code == 0 || !strings.Contains(errOut, "looks alive") || !strings.Contains(errOut, "batch/"+plugin.LeaseName) {
		t.Fatalf("release with a fresh Lease: exit %d\n%s\n%s", code, out, errOut)
	}
	if err := e.cl.Delete(ctx, lease); err != nil {
		t.Fatal(err)
	}

	// The operator is stopped: what holds SafeJob's finalizers stays as it is.
	holding, runs := podsWithLedgerFinalizer(t, e), runsWithFinalizer(t, e)
	out, errOut, code = p.run(t, "", "safejob", "release", "-A", "--dry-run")
	// The pods were running when the operator stopped: whether KWOK has
	// ended them since, their outcomes are not recorded.
	want := fmt.Sprintf("Would release the finalizers of %d pods, %d SafeJob", len(holding), runs)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("Outcome not recorded: releasing these %d pods", len(holding))) ||
		!strings.Contains(out, "busy-2-0-0") || !strings.Contains(out, want) || !strings.Contains(out, "Dry run: nothing changed.") {
		t.Fatalf("release --dry-run (%d pods, %d runs hold finalizers): exit %d\n%s\n%s", len(holding), runs, code, out, errOut)
	}
	t.Logf("release --dry-run:\n%s", out)
	if after := podsWithLedgerFinalizer(t, e); !slices.Equal(after, holding) || runsWithFinalizer(t, e) != runs {
		t.Fatalf("a dry run released pods or runs: %v hold the ledger finalizer, before it %v", after, holding)
	}

	out, errOut, code = p.run(t, "", "safejob", "release", "-A")
	if code != 0 || !strings.Contains(out, "Released ") {
		t.Fatalf("release: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("release:\n%s", out)
	waitUntil(t, time.Minute, "namespace safejob to be deleted", func() bool {
		return apierrors.IsNotFound(e.cl.Get(ctx, client.ObjectKey{Name: nsSafeJob}, &corev1.Namespace{}))
	})
	if left := safeJobsLeft(t, e); len(left) > 0 {
		t.Errorf("SafeJobs left: %v", left)
	}
	out, errOut, code = p.run(t, "", "safejob", "release", "-A")
	if code != 0 || !strings.Contains(out, "nothing to release") {
		t.Errorf("release again: exit %d\n%s\n%s", code, out, errOut)
	}
}

// runsWithFinalizer counts the SafeJobs of every namespace that hold the
// run finalizer.
func runsWithFinalizer(t *testing.T, e *env) int {
	t.Helper()
	var list batchv1alpha1.SafeJobList
	if err := e.cl.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sj := range list.Items {
		if slices.Contains(sj.Finalizers, batchv1alpha1.RunFinalizer) {
			n++
		}
	}
	return n
}

// podsWithLedgerFinalizer names the pods of every namespace that hold the
// ledger finalizer.
func podsWithLedgerFinalizer(t *testing.T, e *env) []string {
	t.Helper()
	var pods corev1.PodList
	if err := e.cl.List(context.Background(), &pods); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range pods.Items {
		if slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
			names = append(names, pod.Namespace+"/"+pod.Name)
		}
	}
	return names
}
