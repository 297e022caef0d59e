package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// upgradeFrom is the release an upgrade starts from and a rollback returns
// to. Move it forward to the new release's commit at each release.
const upgradeFrom = "ec04264"

// nsUpgrade holds the SafeJobs that are not scheduled; the schedule and its
// runs are alone in nsSafeJob, where checkRuns counts every pod as a run's.
const nsUpgrade = "upgrade"

// TestUpgradeAndRollback runs SafeJobs of every kind (NonIndexed, Indexed
// with a per-index backoff and a failing pod, a Forbid schedule, one queued
// through Kueue) under the release upgradeFrom, then, mid-flight, under this
// tree's build, back under the release and forward again, each build
// stopped as a rolling update stops it. Each build must carry on the
// ledgers the other wrote: every SafeJob completes exactly, every pod the
// audit log shows created was launched once by a ledger, no pod keeps the
// ledger finalizer, no ledger is ever reported invalid or loses a fact, and
// what this tree's build last wrote carries its ledger format.
func TestUpgradeAndRollback(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	oldBin := releaseManager(t, upgradeFrom)
	// The cluster comes up with this tree's CRD installed: an upgrade
	// applies the new CRD before it starts the new operator.
	e := newEnv(t, cluster.Options{Kueue: true})
	t.Cleanup(func() {
		if t.Failed() {
			e.logOperators()
		}
	})
	ctx := context.Background()
	k := &kueueEnv{env: e, ctx: ctx}
	k.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsUpgrade}})
	ledgers := []*testutil.LedgerWatch{
		testutil.WatchLedgers(t, e.c.Config, cluster.Scheme(), nsSafeJob),
		testutil.WatchLedgers(t, e.c.Config, cluster.Scheme(), nsUpgrade),
	}
	seen := watchUpgrade(t, e)
	// The Indexed SafeJob's index 1 fails its first pod.
	driver := startFateDriver(t, e)
	driver.setScript(nsUpgrade, func(index string, attempt int) fate {
		if index == "1" && attempt == 0 {
			return fate{exit: 1, duration: 2 * time.Second}
		}
		return fate{duration: 5 * time.Second}
	})
	k.flavor("default", nil)
	k.clusterQueue("cq", 2, "default")
	k.create(t, &kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "lq", Namespace: nsUpgrade},
		Spec: kueue.LocalQueueSpec{ClusterQueue: "cq"}})

	finite := upgradeSafeJobs()
	parent := job("every10", "", 1, 1, "2s")
	parent.Labels = nil
	parent.Spec.Schedule = ptr.To("@every 10s")
	parent.Spec.ConcurrencyPolicy = batchv1alpha1.ForbidConcurrent
	parent.Spec.BackoffLimit = nil
	parent.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	parent.Spec.SuccessfulRunsHistoryLimit = ptr.To[int32](100)

	// Each build runs until it has carried on what the one before it
	// left; the last runs everything to its end.
	builds := []build{{"the release", oldBin, false}, {"this build (upgrade)", managerBin, true},
		{"the release (rollback)", oldBin, false}, {"this build (forward)", managerBin, true}}
	starts := make([]time.Time, len(builds))
	var op *cluster.Process
	for i, b := range builds {
		if i > 0 {
			e.checkMidFlight(t, finite, b.what)
		}
		op = e.switchOperator(t, op, b.bin, b.what)
		starts[i] = time.Now()
		if i == 0 {
			for _, sj := range append(finite, parent) {
				k.create(t, sj)
			}
		}
		e.waitProgress(t, finite, b.what)
	}
	forward := starts[len(starts)-1]

	waitUntil(t, 4*time.Minute, "every SafeJob but the schedule to finish", func() bool {
		for _, sj := range finite {
			if !safeJobFinished(e.getSafeJob(t, sj)) {
				return false
			}
		}
		return true
	})
	for _, sj := range finite {
		e.checkExact(t, e.getSafeJob(t, sj), seen.succeededPods())
	}
	e.checkQueuedOnce(t, e.getSafeJob(t, finite[2]))
	e.checkRunsExact(t, parent)
	e.checkWrites(t, builds, starts)
	// The schedule is torn down right after a run finished, well before the
	// next is due: its final ledger then holds every run created.
	var final batchv1alpha1.SafeJob
	waitUntil(t, time.Minute, "a run scheduled by this build to finish", func() bool {
		final = *e.getSafeJob(t, parent)
		return final.Status.LastScheduleTime != nil && final.Status.LastScheduleTime.After(forward) && len(final.Status.ActiveRuns) == 0
	})
	gone := tearDown(e, &final)
	ran, missed := checkRuns(t, e, &final, gone)
	seen.check(t)
	for _, w := range ledgers {
		w.Check(t)
	}
	t.Logf("%d runs of the schedule, each created once; %d times missed while no operator ran", ran, missed)
}

// upgradeSafeJobs are the SafeJobs that are not scheduled, their pods
// running a few seconds so that every switch of build lands mid-flight.
func upgradeSafeJobs() []*batchv1alpha1.SafeJob {
	plain := job("plain", "", 6, 2, "8s")
	indexed := job("indexed", "", 4, 2, "")
	indexed.Spec.CompletionMode = batchv1alpha1.IndexedCompletion
	indexed.Spec.BackoffLimit, indexed.Spec.BackoffLimitPerIndex = nil, ptr.To[int32](1)
	indexed.Spec.Template.Annotations = map[string]string{holdAnnotation: ""} // the fate driver's
	queued := job("queued", "lq", 4, 2, "5s")
	for _, sj := range []*batchv1alpha1.SafeJob{plain, indexed, queued} {
		sj.Namespace = nsUpgrade
		if sj != queued {
			sj.Labels = nil
			sj.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		}
	}
	return []*batchv1alpha1.SafeJob{plain, indexed, queued}
}

// releaseManager returns the manager binary of commit, built from this
// repository's history once and cached by its full hash. Without the commit
// (a shallow clone) the test is skipped, but not in CI, which must run it.
func releaseManager(t *testing.T, commit string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		msg := fmt.Sprintf("commit %s of the release to upgrade from is not in this clone (a shallow clone?): %v", commit, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI runs on a full clone, so the upgrade test must run there")
		}
		t.Skip(msg)
	}
	full := strings.TrimSpace(string(out))
	cacheDir := os.Getenv("SAFEJOB_CACHE") // as hack/ scripts find it
	if cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("finding the cache directory: %v", err)
		}
		cacheDir = filepath.Join(base, "safejob")
	}
	bin := filepath.Join(cacheDir, "manager-"+full)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", full)
	untar := exec.Command("tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := archive.Start(); err != nil {
		t.Fatalf("git archive %s: %v", full, err)
	}
	if err := errors.Join(untar.Run(), archive.Wait()); err != nil {
		t.Fatalf("extracting commit %s: %v", full, err)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		t.Fatalf("creating the cache directory: %v", err)
	}
	// Built beside its final name and renamed, so that a test running at
	// the same time never runs a half-written binary.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	build := exec.Command("go", "build", "-buildvcs=false", "-o", tmp, "./cmd")
	build.Dir, build.Stdout, build.Stderr = src, os.Stderr, os.Stderr
	build.Env = append(os.Environ(), "GOWORK=off")
	if err := build.Run(); err != nil {
		t.Fatalf("building the manager of %s: %v", full, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatalf("caching the manager of %s: %v", full, err)
	}
	return bin
}

// switchOperator stops from (SIGTERM, as a rolling update does, and waits
// for its exit) and starts the manager bin in its place.
func (e *env) switchOperator(t *testing.T, from *cluster.Process, bin, what string) *cluster.Process {
	t.Helper()
	if from != nil {
		from.Stop()
		var exit *exec.ExitError
		if err := from.Exited(); errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			t.Errorf("%s did not exit on SIGTERM; it was killed", from.Name)
		} else {
			t.Logf("%s stopped: %v", from.Name, err)
		}
	}
	p := e.startOperatorBin(bin)
	t.Logf("%s started as %s", what, p.Name)
	return p
}

// waitProgress waits until the running operator has appended to the
// ledger of every SafeJob of finite still in flight, and finished or not,
// written by another build before.
func (e *env) waitProgress(t *testing.T, finite []*batchv1alpha1.SafeJob, what string) {
	t.Helper()
	seqs := map[string]int64{}
	for _, sj := range finite {
		if got := e.getSafeJob(t, sj); !safeJobFinished(got) {
			seqs[sj.Name] = got.Status.Ledger.Seq
		}
	}
	waitUntil(t, 2*time.Minute, what+" to append to every ledger in flight", func() bool {
		for _, sj := range finite {
			if before, ok := seqs[sj.Name]; ok && e.getSafeJob(t, sj).Status.Ledger.Seq <= before {
				return false
			}
		}
		return true
	})
}

// checkMidFlight fails the test when no SafeJob but the schedule is still
// running as the build switches: the switch would prove nothing about them.
func (e *env) checkMidFlight(t *testing.T, finite []*batchv1alpha1.SafeJob, what string) {
	t.Helper()
	var running []string
	for _, sj := range finite {
		if got := e.getSafeJob(t, sj); !safeJobFinished(got) {
			running = append(running, fmt.Sprintf("%s %d/%d (%d active)", got.Name, got.Status.Succeeded,
				ptr.Deref(got.Spec.Completions, 1), got.Status.Active))
		}
	}
	if len(running) == 0 {
		t.Errorf("every SafeJob had finished before switching to %s", what)
	}
	t.Logf("%s switching to %s with %s in flight", time.Now().Format("15:04:05.0"), what, strings.Join(running, ", "))
}

func (e *env) getSafeJob(t *testing.T, sj *batchv1alpha1.SafeJob) *batchv1alpha1.SafeJob {
	t.Helper()
	got := &batchv1alpha1.SafeJob{}
	if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatalf("getting SafeJob %s: %v", sj.Name, err)
	}
	return got
}

// checkExact holds a finished SafeJob to its completions and its pods to
// its ledger: Complete with exactly its completions, one pod created per
// outcome recorded, each once, for a launch of the ledger, none holding the
// ledger finalizer (CheckPods).
func (e *env) checkExact(t *testing.T, sj *batchv1alpha1.SafeJob, succeeded map[string]bool) {
	t.Helper()
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatalf("%s: final ledger: %v", sj.Name, err)
	}
	if !complete(sj) || sj.Status.Succeeded != ptr.Deref(sj.Spec.Completions, 1) {
		t.Errorf("%s: succeeded %d of %d, conditions %+v", sj.Name, sj.Status.Succeeded, ptr.Deref(sj.Spec.Completions, 1), sj.Status.Conditions)
	}
	creates, err := testutil.PodCreates(e.c.AuditLog, sj.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for pod, c := range creates {
		if strings.HasPrefix(pod, sj.Name+"-") {
			n += c
		}
	}
	if want := int(sj.Status.Succeeded+sj.Status.Failed) + int(st.Evicted); n != want {
		t.Errorf("%s: %d pods created, want %d (succeeded %d, failed %d, evicted %d)", sj.Name, n, want,
			sj.Status.Succeeded, sj.Status.Failed, st.Evicted)
	}
	testutil.CheckPods(t, e.cl, sj, creates, succeeded)
	t.Logf("%s: %d/%d complete, %d failed, %d pods created, ledger seq %d", sj.Name, sj.Status.Succeeded,
		ptr.Deref(sj.Spec.Completions, 1), sj.Status.Failed, n, sj.Status.Ledger.Seq)
}

// checkQueuedOnce checks that both builds kept the one Workload of a queued
// SafeJob and that Kueue saw it finish.
func (e *env) checkQueuedOnce(t *testing.T, sj *batchv1alpha1.SafeJob) {
	t.Helper()
	name := sj.Name
	var wls kueue.WorkloadList
	if err := e.cl.List(context.Background(), &wls, client.InNamespace(nsUpgrade)); err != nil {
		t.Fatalf("listing Workloads: %v", err)
	}
	var owned []string
	for _, wl := range wls.Items {
		if ref := metav1.GetControllerOf(&wl); ref != nil && ref.Name == name {
			owned = append(owned, wl.Name)
			if !meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadFinished) {
				t.Errorf("%s: Workload %s not Finished: %+v", name, wl.Name, wl.Status.Conditions)
			}
		}
	}
	if len(owned) != 1 || owned[0] != controller.WorkloadName(sj) {
		t.Errorf("%s: Workloads %v, want its one", name, owned)
	}
}

// checkRunsExact holds every run of the schedule whose outcome its ledger
// records to its one completion, whichever build ran it.
func (e *env) checkRunsExact(t *testing.T, parent *batchv1alpha1.SafeJob) {
	t.Helper()
	st, err := runs.Replay(&e.getSafeJob(t, parent).Status.Ledger)
	if err != nil {
		t.Fatalf("%s: ledger: %v", parent.Name, err)
	}
	if len(st.Closed) == 0 {
		t.Errorf("%s: no run finished", parent.Name)
	}
	for name := range st.Closed {
		run := e.getSafeJob(t, &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: parent.Namespace}})
		if !complete(run) || run.Status.Succeeded != 1 || run.Status.Failed != 0 {
			t.Errorf("run %s: succeeded %d, failed %d, conditions %+v", run.Name, run.Status.Succeeded, run.Status.Failed, run.Status.Conditions)
		}
	}
}

// build is one build of the operator the test runs.
type build struct {
	what    string
	bin     string
	patches bool // writes status as merge patches, not whole updates
}

// checkWrites checks from the audit log that each build wrote SafeJob
// statuses its own way (so the build meant ran), and that every SafeJob
// this build wrote after it last started carries its ledger format.
func (e *env) checkWrites(t *testing.T, builds []build, starts []time.Time) {
	t.Helper()
	writes, err := testutil.Writes(e.c.AuditLog, "safejobs", "status")
	if err != nil {
		t.Fatal(err)
	}
	byBuild := make([]map[string]int, len(builds)) // verb -> writes
	last := map[string]bool{}                      // written by the last build, by namespace/name
	for _, w := range writes {
		i := len(starts) - 1
		for i >= 0 && w.Received.Before(starts[i]) {
			i--
		}
		if i < 0 || w.Code != 200 {
			continue
		}
		if byBuild[i] == nil {
			byBuild[i] = map[string]int{}
		}
		byBuild[i][w.Verb]++
		if i == len(builds)-1 {
			last[w.Namespace+"/"+w.Name] = true
		}
	}
	for i, b := range builds {
		own, other := "update", "patch"
		if b.patches {
			own, other = other, own
		}
		if byBuild[i][own] == 0 || byBuild[i][other] != 0 {
			t.Errorf("%s wrote SafeJob statuses %v; want by %s only", b.what, byBuild[i], own)
		}
		t.Logf("%s wrote SafeJob statuses %v", b.what, byBuild[i])
	}
	for _, ns := range []string{nsSafeJob, nsUpgrade} {
		var sjs batchv1alpha1.SafeJobList
		if err := e.cl.List(context.Background(), &sjs, client.InNamespace(ns)); err != nil {
			t.Fatalf("listing SafeJobs: %v", err)
		}
		for _, sj := range sjs.Items {
			if c := meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status == metav1.ConditionFalse {
				t.Errorf("%s/%s: LedgerValid False at the end, %s: %s", ns, sj.Name, c.Reason, c.Message)
			}
			if last[ns+"/"+sj.Name] && sj.Status.Ledger.Format != batchv1alpha1.LedgerFormat {
				t.Errorf("%s/%s: status.ledger.format %d after this build wrote it, want %d", ns, sj.Name,
					sj.Status.Ledger.Format, batchv1alpha1.LedgerFormat)
			}
		}
	}
}

// upgradeWatch sees every version of every SafeJob and every pod, and
// remembers what no version may show: a ledger reported invalid, a status
// write refused, a Forbid schedule with two runs active.
type upgradeWatch struct {
	mu        sync.Mutex
	problems  []string
	succeeded map[string]bool // pods of nsUpgrade that succeeded, by name
}

func watchUpgrade(t *testing.T, e *env) *upgradeWatch {
	t.Helper()
	w := &upgradeWatch{succeeded: map[string]bool{}}
	watchPods(t, e.c, func(_ context.Context, pod *corev1.Pod) {
		if pod.Namespace == nsUpgrade && pod.Status.Phase == corev1.PodSucceeded {
			w.mu.Lock()
			w.succeeded[pod.Name] = true
			w.mu.Unlock()
		}
	})
	informers, err := cache.New(e.c.Config, cache.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf, err := informers.GetInformer(ctx, &batchv1alpha1.SafeJob{})
	if err != nil {
		t.Fatal(err)
	}
	see := func(obj any) {
		if sj, ok := obj.(*batchv1alpha1.SafeJob); ok {
			w.see(sj)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) }}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("SafeJob watch did not sync")
	}
	return w
}

func (w *upgradeWatch) see(sj *batchv1alpha1.SafeJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	bad := []*metav1.Condition{}
	if c := meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status == metav1.ConditionFalse {
		bad = append(bad, c)
	}
	if c := meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionStatusWriteFailure); c != nil && c.Status == metav1.ConditionTrue {
		bad = append(bad, c)
	}
	for _, c := range bad {
		w.problems = append(w.problems, fmt.Sprintf("%s/%s at resourceVersion %s: %s %s, %s: %s", sj.Namespace, sj.Name,
			sj.ResourceVersion, c.Type, c.Status, c.Reason, c.Message))
	}
	if sj.Spec.ConcurrencyPolicy == batchv1alpha1.ForbidConcurrent && len(sj.Status.ActiveRuns) > 1 {
		w.problems = append(w.problems, fmt.Sprintf("%s: %d runs active under Forbid", sj.Name, len(sj.Status.ActiveRuns)))
	}
}

func (w *upgradeWatch) succeededPods() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for name := range w.succeeded {
		out[name] = true
	}
	return out
}

// check fails the test with every problem a version of a SafeJob showed.
func (w *upgradeWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.problems {
		t.Error(p)
	}
}
