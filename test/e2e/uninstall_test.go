package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
	createBusySafeJobs(t, e, 10, 2)
	createEverySchedule(t, e)
	doneComplete := func() bool {
		got := &batchv1alpha1.SafeJob{}
		return e.cl.Get(ctx, client.ObjectKeyFromObject(done), got) == nil && complete(got)
	}
	waitBusyAndRunPods(t, e, "done to complete, ten pods of busy running and a run of every started", 10,
		podRunning, func(*corev1.Pod) bool { return true }, doneComplete)

	checkUninstallRefusesWhileRunning(t, e, p)
	checkUninstallStop(t, p)
	checkNothingOfSafeJobLeft(t, e, "uninstall")

	deleteSafeJobNamespace(t, e)
	waitSafeJobNamespaceGone(t, e)

	out, errOut, code := p.run(t, "", "safejob", "uninstall", "--timeout=10s")
	if code != 0 || !strings.Contains(out, "SafeJob is uninstalled.") {
		t.Errorf("uninstall again: exit %d\n%s\n%s", code, out, errOut)
	}
	checkNothingToRelease(t, p, "uninstall")
}

// checkUninstallRefusesWhileRunning checks that uninstall without --stop
// refuses while SafeJobs run, listing them and pointing at --stop, and
// deletes none of them.
func checkUninstallRefusesWhileRunning(t *testing.T, e *env, p *kubectlPlugin) {
	t.Helper()
	out, errOut, code := p.run(t, "", "safejob", "uninstall", "--timeout=2m")
	if code == 0 || !strings.Contains(out, "busy-9") || !strings.Contains(out, "every") || !strings.Contains(errOut, "--stop") {
		t.Fatalf("uninstall while SafeJobs run: exit %d\n%s\n%s", code, out, errOut)
	}
	if left := safeJobsLeft(t, e); !slices.Contains(left, "safejob/done") || !slices.Contains(left, "safejob/busy-9") ||
		!slices.Contains(left, "safejob/every") {
		t.Fatalf("a refused uninstall deleted SafeJobs: %v left", left)
	}
}

// checkUninstallStop checks that uninstall --stop succeeds, saying that it
// suspended the schedule, found no operator Deployment and uninstalled.
func checkUninstallStop(t *testing.T, p *kubectlPlugin) {
	t.Helper()
	out, errOut, code := p.run(t, "", "safejob", "uninstall", "--stop", "--timeout=2m")
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
}
