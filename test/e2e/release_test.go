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
	p := buildPlugin(t, e)
	createBusySafeJobs(t, e, 3, 1)
	createEverySchedule(t, e)
	holdsLedger := func(pod *corev1.Pod) bool {
		return podRunning(pod) && slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
	}
	waitBusyAndRunPods(t, e, "the busy pods and a run's pod running", 3, holdsLedger, holdsLedger, nil)
	e.stopOperators()
	deleteSafeJobNamespace(t, e)
	waitPodsDeleting(t, e)

	checkReleaseRefusesWhileLeaseFresh(t, e, p)
	checkReleaseDryRun(t, e, p)

	out, errOut, code := p.run(t, "", "safejob", "release", "-A")
	if code != 0 || !strings.Contains(out, "Released ") {
		t.Fatalf("release: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("release:\n%s", out)
	waitSafeJobNamespaceGone(t, e)
	checkNothingOfSafeJobLeft(t, e, "release")
	checkNothingToRelease(t, p, "release")
}

// waitPodsDeleting waits until every pod of the deleted namespace nsSafeJob
// is deleting: the namespace controller deletes the pods first, and waits
// for them.
func waitPodsDeleting(t *testing.T, e *env) {
	t.Helper()
	waitUntil(t, time.Minute, "the namespace's pods to be deleting", func() bool {
		var pods corev1.PodList
		if e.cl.List(context.Background(), &pods, client.InNamespace(nsSafeJob)) != nil || len(pods.Items) == 0 {
			return false
		}
		return !slices.ContainsFunc(pods.Items, func(pod corev1.Pod) bool { return pod.DeletionTimestamp == nil })
	})
}

// checkReleaseRefusesWhileLeaseFresh creates the fresh Lease of an operator
// elsewhere, checks that release refuses, naming it, and deletes the Lease.
func checkReleaseRefusesWhileLeaseFresh(t *testing.T, e *env, p *kubectlPlugin) {
	t.Helper()
	ctx := context.Background()
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
}

// checkReleaseDryRun checks, with the operator stopped, that release
// --dry-run lists the pods whose outcomes release gives up and what it
// would release, and that what holds SafeJob's finalizers stays as it is.
func checkReleaseDryRun(t *testing.T, e *env, p *kubectlPlugin) {
	t.Helper()
	holding, runs := podsWithLedgerFinalizer(t, e), runsWithFinalizer(t, e)
	out, errOut, code := p.run(t, "", "safejob", "release", "-A", "--dry-run")
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
