package e2e

import (
	"cmp"
	"context"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// upgradeFrom is the commit of the release an upgrade starts from and a
// rollback returns to (v0.1.0), in full: its built manager is cached under
// this name, and found there without the commit's history. Move it forward
// to the new release's commit at each release.
const upgradeFrom = "ec0426441d8d555be387f98dc88a48728b30d651"

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
// what this tree's build last wrote carries its ledger format. The audit
// log shows which build wrote each status (whole updates or merge
// patches), so a switch that did not happen cannot pass.
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
	seen := watchSafeJobs(t, e)
	// The Indexed SafeJob's index 1 fails its first pod.
	startFateDriver(t, e).setScript(nsUpgrade, func(index string, attempt int) fate {
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
	parent.Labels, parent.Spec.BackoffLimit, parent.Spec.Template.Spec.Containers[0].Resources = nil, nil, corev1.ResourceRequirements{}
	parent.Spec.Schedule = ptr.To("@every 10s")
	parent.Spec.ConcurrencyPolicy = batchv1alpha1.ForbidConcurrent
	parent.Spec.SuccessfulRunsHistoryLimit = ptr.To[int32](100)

	// Each build runs until it has appended to every ledger in flight, each
	// written last by the build before it (but under the first); the last
	// build runs them to their end.
	builds := []build{{"the release", oldBin, false}, {"this build (upgrade)", managerBin, true},
		{"the release (rollback)", oldBin, false}, {"this build (forward)", managerBin, true}}
	starts := e.runBuilds(t, k, builds, finite, parent)
	forward := starts[len(starts)-1]

	waitUntil(t, 4*time.Minute, "every SafeJob but the schedule to finish", func() bool {
		for _, sj := range finite {
			if !safeJobFinished(e.getSafeJob(t, sj)) {
				return false
			}
		}
		return true
	})
	final := e.suspendAfterRun(t, parent, forward)
	succeeded := succeededPods(t, e, nsUpgrade)
	for _, sj := range finite {
		e.checkExact(t, e.getSafeJob(t, sj), succeeded)
	}
	e.checkQueuedOnce(t, e.getSafeJob(t, finite[2]))
	e.checkRunsExact(t, final)
	e.checkWrites(t, builds, starts)
	gone := tearDown(e, final)
	ran, missed := checkRuns(t, e, final, gone)
	seen.check(t)
	for _, w := range ledgers {
		w.Check(t)
	}
	t.Logf("%d runs of the schedule, each created once; %d scheduled times missed, each counted", ran, missed)
}

// runBuilds runs the operator's builds one after the other, each stopped
// as a rolling update stops it once it has appended to every ledger in
// flight (each written last by the build before it). The first build
// creates the SafeJobs finite and the schedule parent; every build after it
// must find some of finite still in flight. It returns when each build
// started; the last is left running.
func (e *env) runBuilds(t *testing.T, k *kueueEnv, builds []build, finite []*batchv1alpha1.SafeJob,
	parent *batchv1alpha1.SafeJob) []time.Time {
	t.Helper()
	var starts []time.Time
	var op *cluster.Process
	for i, b := range builds {
		var flying []*batchv1alpha1.SafeJob
		if op != nil {
			stopOperator(t, op)
			if flying = e.inFlight(t, finite, b.what); len(flying) == 0 {
				t.Errorf("every SafeJob but the schedule had finished before %s started", b.what)
			}
		}
		op = e.startOperatorBin(b.bin)
		starts = append(starts, time.Now())
		t.Logf("%s started as %s", b.what, op.Name)
		if i == 0 {
			for _, sj := range append(finite, parent) {
				k.create(t, sj)
			}
			flying = e.inFlight(t, finite, b.what)
		}
		e.waitLedgersAppended(t, b.what, flying)
	}
	return starts
}

// waitLedgersAppended waits until the build what has appended to the
// ledger of every SafeJob of flying, as each was read before it started.
func (e *env) waitLedgersAppended(t *testing.T, what string, flying []*batchv1alpha1.SafeJob) {
	t.Helper()
	waitUntil(t, 2*time.Minute, what+" to append to every ledger in flight", func() bool {
		for _, sj := range flying {
			if e.getSafeJob(t, sj).Status.Ledger.Seq <= sj.Status.Ledger.Seq {
				return false
			}
		}
		return true
	})
}

// suspendAfterRun suspends the schedule parent once the build started at
// forward has scheduled a run, so that its final ledger holds every run it
// created, and returns it once it says it is suspended and no run is active.
func (e *env) suspendAfterRun(t *testing.T, parent *batchv1alpha1.SafeJob, forward time.Time) *batchv1alpha1.SafeJob {
	t.Helper()
	waitUntil(t, 2*time.Minute, "this build to schedule a run", func() bool {
		p := e.getSafeJob(t, parent)
		return p.Status.LastScheduleTime != nil && p.Status.LastScheduleTime.After(forward)
	})
	if err := e.cl.Patch(context.Background(), parent, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))); err != nil {
		t.Fatalf("suspending %s: %v", parent.Name, err)
	}
	var final batchv1alpha1.SafeJob
	waitUntil(t, 2*time.Minute, "the suspended schedule's runs to finish", func() bool {
		final = *e.getSafeJob(t, parent)
		c := meta.FindStatusCondition(final.Status.Conditions, batchv1alpha1.ConditionScheduling)
		return c != nil && c.Reason == batchv1alpha1.ReasonScheduleSuspended && len(final.Status.ActiveRuns) == 0
	})
	return &final
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
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("finding the cache directory: %v", err)
	}
	cacheDir := cmp.Or(os.Getenv("SAFEJOB_CACHE"), filepath.Join(base, "safejob")) // as hack/ scripts find it
	if bin := filepath.Join(cacheDir, "manager-"+commit); fileExists(bin) {
		return bin // built before, from this full commit
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		msg := fmt.Sprintf("commit %s of the release to upgrade from is not in this clone (a shallow clone?): %v", commit, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI runs on a full clone, so the upgrade test must run there")
		}
		t.Skip(msg)
	}
	full := strings.TrimSpace(string(out))
	bin := filepath.Join(cacheDir, "manager-"+full)
	if fileExists(bin) {
		return bin
	}
	src := t.TempDir()
	extract := exec.Command("bash", "-o", "pipefail", "-c", `git -C "$0" archive "$1" | tar -x -C "$2"`, root, full, src)
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("extracting commit %s: %v: %s", full, err, out)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		t.Fatalf("creating the cache directory: %v", err)
	}
	// Built beside its final name and renamed, so that a test running at
	// the same time never runs a half-written binary.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	gobuild := exec.Command("go", "build", "-buildvcs=false", "-o", tmp, "./cmd")
	gobuild.Dir, gobuild.Stdout, gobuild.Stderr = src, os.Stderr, os.Stderr
	gobuild.Env = append(os.Environ(), "GOWORK=off")
	if err := gobuild.Run(); err != nil {
		t.Fatalf("building the manager of %s: %v", full, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatalf("caching the manager of %s: %v", full, err)
	}
	return bin
}

// fileExists reports whether path names a file that can be read.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// stopOperator stops an operator as a rolling update does: SIGTERM, and
// SIGKILL after the grace period the manager's Deployment gives it, which
// fails the test.
func stopOperator(t *testing.T, p *cluster.Process) {
	t.Helper()
	const grace = 30 * time.Second // terminationGracePeriodSeconds in config/manager
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(grace):
		p.Kill()
		t.Errorf("%s did not exit within %s of SIGTERM and was killed", p.Name, grace)
	}
}

// inFlight returns the SafeJobs of finite not finished, as they are now.
func (e *env) inFlight(t *testing.T, finite []*batchv1alpha1.SafeJob, what string) []*batchv1alpha1.SafeJob {
	t.Helper()
	var out []*batchv1alpha1.SafeJob
	var say []string
	for _, sj := range finite {
		if got := e.getSafeJob(t, sj); !safeJobFinished(got) {
			out = append(out, got)
			say = append(say, fmt.Sprintf("%s %d/%d", got.Name, got.Status.Succeeded, ptr.Deref(got.Spec.Completions, 1)))
		}
	}
	t.Logf("in flight as %s starts: %s", what, strings.Join(say, ", "))
	return out
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
	st, err := runs.Replay(&parent.Status.Ledger)
	if err != nil {
		t.Fatalf("%s: ledger: %v", parent.Name, err)
	}
	if len(st.Closed) == 0 {
		t.Errorf("%s: no run finished: %+v", parent.Name, parent.Status)
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
	counts, last := writesByBuild(writes, len(builds), starts)
	checkWriteWays(t, builds, counts)
	e.checkFinalLedgers(t, last)
}

// writeCounts are how many SafeJob statuses a build wrote by whole updates
// and by merge patches.
type writeCounts struct{ update, patch int }

// writesByBuild counts the successful status writes of each of n builds,
// build i being the one started at starts[i] and running until the next
// started, and names (namespace/name) the SafeJobs the last build patched.
func writesByBuild(writes []testutil.Request, n int, starts []time.Time) ([]writeCounts, map[string]bool) {
	counts := make([]writeCounts, n)
	last := map[string]bool{} // written by the last build, by namespace/name
	for _, w := range writes {
		i := len(starts) - 1
		for i >= 0 && w.Received.Before(starts[i]) {
			i--
		}
		switch {
		case i < 0 || w.Code != 200:
		case w.Verb == "update":
			counts[i].update++
		case w.Verb == "patch":
			counts[i].patch++
			last[w.Namespace+"/"+w.Name] = last[w.Namespace+"/"+w.Name] || i == n-1
		}
	}
	return counts, last
}

// checkWriteWays checks that each build wrote SafeJob statuses, and only
// its own way: by merge patches when it patches, else by whole updates.
func checkWriteWays(t *testing.T, builds []build, counts []writeCounts) {
	t.Helper()
	for i, b := range builds {
		own, other := counts[i].update, counts[i].patch
		if b.patches {
			own, other = other, own
		}
		if own == 0 || other != 0 {
			t.Errorf("%s wrote SafeJob statuses by %d updates and %d patches; want by its own way only", b.what, counts[i].update, counts[i].patch)
		}
		t.Logf("%s wrote SafeJob statuses by %d updates and %d patches", b.what, counts[i].update, counts[i].patch)
	}
}

// checkFinalLedgers checks that no SafeJob's ledger is reported invalid at
// the end, and that every SafeJob the last build wrote (last, by
// namespace/name) carries this tree's ledger format.
func (e *env) checkFinalLedgers(t *testing.T, last map[string]bool) {
	t.Helper()
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

// succeededPods lists the pods of ns that succeeded, by name.
func succeededPods(t *testing.T, e *env, ns string) map[string]bool {
	t.Helper()
	var pods corev1.PodList
	if err := e.cl.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatalf("listing pods: %v", err)
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			out[p.Name] = true
		}
	}
	return out
}

// safeJobWatch sees every version of every SafeJob and remembers what none
// may show: a ledger reported invalid, a status write refused, a Forbid
// schedule with two runs active.
type safeJobWatch struct {
	mu       sync.Mutex
	problems []string
}

func watchSafeJobs(t *testing.T, e *env) *safeJobWatch {
	t.Helper()
	w := &safeJobWatch{}
	watchObjects(t, e.c, &batchv1alpha1.SafeJob{}, func(_ context.Context, obj client.Object) { w.see(obj.(*batchv1alpha1.SafeJob)) })
	return w
}

func (w *safeJobWatch) see(sj *batchv1alpha1.SafeJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, bad := range []metav1.Condition{{Type: batchv1alpha1.ConditionLedgerValid, Status: metav1.ConditionFalse},
		{Type: batchv1alpha1.ConditionStatusWriteFailure, Status: metav1.ConditionTrue}} {
		if c := meta.FindStatusCondition(sj.Status.Conditions, bad.Type); c != nil && c.Status == bad.Status {
			w.problems = append(w.problems, fmt.Sprintf("%s/%s at resourceVersion %s: %s %s, %s: %s", sj.Namespace, sj.Name,
				sj.ResourceVersion, c.Type, c.Status, c.Reason, c.Message))
		}
	}
	if sj.Spec.ConcurrencyPolicy == batchv1alpha1.ForbidConcurrent && len(sj.Status.ActiveRuns) > 1 {
		w.problems = append(w.problems, fmt.Sprintf("%s: %d runs active under Forbid", sj.Name, len(sj.Status.ActiveRuns)))
	}
}

// check fails the test with every problem a version of a SafeJob showed.
func (w *safeJobWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.problems {
		t.Error(p)
	}
}
