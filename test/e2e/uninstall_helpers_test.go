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
)

// What TestKubectlPluginRelease and TestKubectlPluginUninstall share: the
// busy SafeJobs and the schedule whose pods hold SafeJob's finalizers, and
// the checks that nothing of SafeJob is left once they let go.

// createBusySafeJobs creates n SafeJobs busy-0 to busy-<n-1> in nsSafeJob,
// each of completions pods, one at a time, running an hour.
func createBusySafeJobs(t *testing.T, e *env, n int, completions int32) {
	t.Helper()
	for i := range n {
		if err := e.cl.Create(context.Background(), plainSafeJob(fmt.Sprintf("busy-%d", i), completions, 1, "1h")); err != nil {
			t.Fatal(err)
		}
	}
}

// createEverySchedule creates the schedule every in nsSafeJob, starting a
// run of one pod running an hour every two seconds.
func createEverySchedule(t *testing.T, e *env) {
	t.Helper()
	every := plainSafeJob("every", 1, 1, "1h")
	every.Spec.Completions, every.Spec.Parallelism, every.Spec.Schedule = nil, nil, ptr.To("@every 2s")
	if err := e.cl.Create(context.Background(), every); err != nil {
		t.Fatal(err)
	}
}

// waitBusyAndRunPods waits up to two minutes until busy pods of the busy
// SafeJobs (named busy-*) are ones busyOK accepts and at least one pod of a
// run of every (named every-*) is one runOK accepts, and ready, when not
// nil, holds too.
func waitBusyAndRunPods(t *testing.T, e *env, what string, busy int, busyOK, runOK func(*corev1.Pod) bool, ready func() bool) {
	t.Helper()
	waitUntil(t, 2*time.Minute, what, func() bool {
		if ready != nil && !ready() {
			return false
		}
		var pods corev1.PodList
		if e.cl.List(context.Background(), &pods, client.InNamespace(nsSafeJob)) != nil {
			return false
		}
		nBusy, nRuns := 0, 0
		for k := range pods.Items {
			pod := &pods.Items[k]
			switch {
			case strings.HasPrefix(pod.Name, "busy-") && busyOK(pod):
				nBusy++
			case strings.HasPrefix(pod.Name, "every-") && runOK(pod):
				nRuns++
			}
		}
		return nBusy == busy && nRuns > 0
	})
}

// podRunning says whether pod runs.
func podRunning(pod *corev1.Pod) bool { return pod.Status.Phase == corev1.PodRunning }

// deleteSafeJobNamespace deletes namespace nsSafeJob.
func deleteSafeJobNamespace(t *testing.T, e *env) {
	t.Helper()
	if err := e.cl.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsSafeJob}}); err != nil {
		t.Fatal(err)
	}
}

// waitSafeJobNamespaceGone waits up to a minute until namespace nsSafeJob
// is deleted: nothing of SafeJob's holds it any more.
func waitSafeJobNamespaceGone(t *testing.T, e *env) {
	t.Helper()
	waitUntil(t, time.Minute, "namespace safejob to be deleted", func() bool {
		return apierrors.IsNotFound(e.cl.Get(context.Background(), client.ObjectKey{Name: nsSafeJob}, &corev1.Namespace{}))
	})
}

// checkNothingOfSafeJobLeft fails the test when a SafeJob is left in any
// namespace, or a pod holds the ledger finalizer, after what.
func checkNothingOfSafeJobLeft(t *testing.T, e *env, what string) {
	t.Helper()
	if left := safeJobsLeft(t, e); len(left) > 0 {
		t.Errorf("SafeJobs left after %s: %v", what, left)
	}
	for _, pod := range podsWithLedgerFinalizer(t, e) {
		t.Errorf("pod %s holds the ledger finalizer after %s", pod, what)
	}
}

// checkNothingToRelease fails the test unless `kubectl safejob release -A`
// succeeds and finds nothing to release, after what.
func checkNothingToRelease(t *testing.T, p *kubectlPlugin, what string) {
	t.Helper()
	out, errOut, code := p.run(t, "", "safejob", "release", "-A")
	if code != 0 || !strings.Contains(out, "nothing to release") {
		t.Errorf("release after %s: exit %d\n%s\n%s", what, code, out, errOut)
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
