package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
)

// TestKubectlPluginUninstall: with ten SafeJobs running, one finished and
// a schedule that has started a run, `kubectl safejob uninstall` refuses
// and lists them; with --stop it stops the schedule, deletes every SafeJob
// and waits until the operator has let go of them all (the operator runs
// outside the cluster: no Deployment to remove, said and gone on). Nothing
// of SafeJob is left after it, the namespace then deletes within a minute,
// and running uninstall and release again finds nothing to do.
func TestKubectlPluginUninstall(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	t.Cleanup(func() {
		if t.Failed() {
			e.logOperators()
		}
	})
	ctx := context.Background()
	p := buildPlugin(t, e)

	done := plainSafeJob("done", 1, 1, "100ms")
	if err := e.cl.Create(ctx, done); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := e.cl.Create(ctx, plainSafeJob(fmt.Sprintf("busy-%d", i), 2, 1, "1h")); err != nil {
			t.Fatal(err)
		}
	}
	every := plainSafeJob("every", 1, 1, "1h")
	every.Spec.Completions, every.Spec.Parallelism, every.Spec.Schedule = nil, nil, ptr.To("@every 2s")
	if err := e.cl.Create(ctx, every); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "done to complete, ten pods of busy running and a run of every started", func() bool {
		got := &batchv1alpha1.SafeJob{}
		if e.cl.Get(ctx, client.ObjectKeyFromObject(done), got) != nil || !complete(got) {
			return false
		}
		var pods corev1.PodList
		if e.cl.List(ctx, &pods, client.InNamespace(nsSafeJob)) != nil {
			return false
		}
		busy, runs := 0, 0
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodRunning && strings.HasPrefix(pod.Name, "busy-") {
				busy++
			}
			if strings.HasPrefix(pod.Name, "every-") {
				runs++
			}
		}
		return busy == 10 && runs > 0
	})

	out, errOut, code := p.run(t, "", "safejob", "uninstall", "--timeout=2m")
	if code == 0 || !strings.Contains(out, "busy-9") || !strings.Contains(out, "every") || !strings.Contains(errOut, "--stop") {
		t.Fatalf("uninstall while SafeJobs run: exit %d\n%s\n%s", code, out, errOut)
	}
	if left := safeJobsLeft(t, e); !slices.Contains(left, "safejob/done") || !slices.Contains(left, "safejob/busy-9") ||
		!slices.Contains(left, "safejob/every") {
		t.Fatalf("a refused uninstall deleted SafeJobs: %v left", left)
	}

	out, errOut, code = p.run(t, "", "safejob", "uninstall", "--stop", "--timeout=2m")
	if code != 0 {
		t.Fatalf("uninstall --stop: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("uninstall --stop:\n%s", out)
	for _, want := range []string{"Suspended schedule safejob/every.", "No operator Deployment in namespace safejob-system",
		"SafeJob is uninstalled."} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall --stop: output lacks %q:\n%s", want, out)
		}
	}
	if left := safeJobsLeft(t, e); len(left) > 0 {
		t.Errorf("SafeJobs left after uninstall: %v", left)
	}
	var pods corev1.PodList
	if err := e.cl.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
			t.Errorf("pod %s/%s holds the ledger finalizer after uninstall", pod.Namespace, pod.Name)
		}
	}

	if err := e.cl.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsSafeJob}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "namespace safejob to be deleted", func() bool {
		err := e.cl.Get(ctx, client.ObjectKey{Name: nsSafeJob}, &corev1.Namespace{})
		return apierrors.IsNotFound(err)
	})

	out, errOut, code = p.run(t, "", "safejob", "uninstall", "--timeout=10s")
	if code != 0 || !strings.Contains(out, "SafeJob is uninstalled.") {
		t.Errorf("uninstall again: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = p.run(t, "", "safejob", "release", "-A")
	if code != 0 || !strings.Contains(out, "nothing to release") {
		t.Errorf("release after uninstall: exit %d\n%s\n%s", code, out, errOut)
	}
}

// safeJobsLeft names the SafeJobs of every namespace.
func safeJobsLeft(t *testing.T, e *env) []string {
	t.Helper()
	var list batchv1alpha1.SafeJobList
	if err := e.cl.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sj := range list.Items {
		names = append(names, sj.Namespace+"/"+sj.Name)
	}
	slices.Sort(names)
	return names
}
