// Package e2e runs the SafeJob operator as a separate process on the local
// cluster (scheduler, controller-manager, KWOK nodes) and checks it from
// evidence it cannot fake: the API server's audit log and the final pod and
// ledger state. Every scenario runs the same workload as batch/v1 Jobs under
// the built-in Job controller and reports both side by side.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

const (
	nsSafeJob = "safejob"
	nsBatch   = "batch"
	// nsManaged holds the fault suite's batch/v1 Jobs managed by SafeJob.
	nsManaged = "managed"
)

var (
	root       string
	managerBin string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The tests' own clients log errors only: without a logger
	// controller-runtime prints a stack trace in place of its first message.
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)))
	var err error
	if root, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "safejob-e2e-")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	managerBin = filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", managerBin, "./cmd")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the operator: %v\n", err)
		return 1
	}
	return m.Run()
}

// workload is the same work for both controllers: jobs jobs of completions
// pods each, parallelism at a time, every pod running for duration.
type workload struct {
	jobs        int
	completions int32
	parallelism int32
	duration    string
}

// env is one scenario's cluster, operators and evidence.
type env struct {
	t          *testing.T
	c          *cluster.Cluster
	cl         client.Client
	dir        string
	kubeconfig string // what operators use (may point at a proxy)
	mu         sync.Mutex
	ops        []*cluster.Process
	started    int
	pods       *podRecorder
	forced     map[string]int // running pods force-deleted, by namespace
}

func newEnv(t *testing.T, opts cluster.Options) *env {
	t.Helper()
	opts.Dir, opts.Root = t.TempDir(), root
	if testing.Verbose() {
		opts.Progress = os.Stderr
	}
	ctx := context.Background()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the local cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, c: c, cl: cl, dir: opts.Dir, kubeconfig: c.Kubeconfig}
	for _, ns := range []string{nsSafeJob, nsBatch, nsManaged} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	e.pods = recordPods(t, c)
	t.Cleanup(e.stopOperators)
	return e
}

// throughProxy makes operators reach the API server through a delaying,
// connection-cutting proxy.
func (e *env) throughProxy(minDelay, maxDelay, cutEvery time.Duration) {
	e.t.Helper()
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig-proxy")
	proxies, err := cluster.ProxiedKubeconfig(e.c.Kubeconfig, e.kubeconfig,
		cluster.ProxyFault{MinDelay: minDelay, MaxDelay: maxDelay, CutEvery: cutEvery})
	for _, p := range proxies {
		e.t.Cleanup(p.Close)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) noteForced(ns string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.forced == nil {
		e.forced = map[string]int{}
	}
	e.forced[ns]++
}

// forcedDeletes returns a reader of the force-delete counts.
func (e *env) forcedDeletes() func(string) int {
	return func(ns string) int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.forced[ns]
	}
}

// startOperator runs one more operator process, without leader election,
// with extra flags if any.
func (e *env) startOperator(flags ...string) {
	e.t.Helper()
	if os.Getenv("SAFEJOB_PACING") == "off" {
		// make test-pacing-off: the fault suite with every pacing decision
		// off must meet the same bar.
		flags = append([]string{"--pacing=false"}, flags...)
	}
	e.startOperatorBin(managerBin, flags...)
}

// startOperatorBin runs one more operator process from the manager binary
// bin (another build than the working tree's), without leader election,
// with extra flags if any, and returns it.
func (e *env) startOperatorBin(bin string, flags ...string) *cluster.Process {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started++
	p, err := cluster.StartProcess(fmt.Sprintf("manager-%d", e.started), filepath.Join(e.dir, fmt.Sprintf("manager-%d.log", e.started)),
		bin, append([]string{"--kubeconfig=" + e.kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0",
			"--kube-api-qps=200", "--kube-api-burst=400"}, flags...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.ops = append(e.ops, p)
	return p
}

// killOperator SIGKILLs the newest running operator and starts another.
func (e *env) killOperator() {
	e.mu.Lock()
	var victim *cluster.Process
	for i := len(e.ops) - 1; i >= 0; i-- {
		if e.ops[i].Exited() == nil {
			victim = e.ops[i]
			break
		}
	}
	e.mu.Unlock()
	if victim != nil {
		victim.Kill()
	}
	e.startOperator()
}

// logOperators prints the last lines of every operator's log and, for the
// first SafeJobs not yet finished, their state, pods and the operators'
// last lines about each: what a stuck SafeJob waits on.
func (e *env) logOperators() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.ops {
		e.t.Logf("last lines of %s:\n%s", p.Name, p.Tail(30))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sjs batchv1alpha1.SafeJobList
	if err := e.cl.List(ctx, &sjs, client.InNamespace(nsSafeJob)); err != nil {
		e.t.Logf("listing SafeJobs: %v", err)
		return
	}
	var stuck []string
	for i := range sjs.Items {
		if !safeJobFinished(&sjs.Items[i]) {
			stuck = append(stuck, sjs.Items[i].Name)
		}
	}
	if len(stuck) == 0 {
		return
	}
	const shown = 5
	e.t.Logf("SafeJobs not Complete: %s", testutil.IncompleteSafeJobs(ctx, e.cl, nsSafeJob, shown))
	slices.Sort(stuck)
	for _, name := range stuck[:min(len(stuck), shown)] {
		for _, p := range e.ops {
			e.t.Logf("last lines of %s about %s:\n%s", p.Name, name, p.Grep(fmt.Sprintf("%q", name), 15))
		}
	}
}

func (e *env) stopOperators() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.ops {
		p.Stop()
	}
}

// submit creates the workload as SafeJobs and as batch/v1 Jobs.
func (e *env) submit(w workload) {
	e.t.Helper()
	ctx := context.Background()
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": w.duration}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	for i := range w.jobs {
		name := fmt.Sprintf("w-%d", i)
		sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsSafeJob},
			Spec: batchv1alpha1.SafeJobSpec{Template: tmpl, Completions: ptr.To(w.completions), Parallelism: ptr.To(w.parallelism),
				BackoffLimit: ptr.To[int32](1000)}}
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsBatch},
			Spec: batchv1.JobSpec{Template: tmpl, Completions: ptr.To(w.completions), Parallelism: ptr.To(w.parallelism),
				BackoffLimit: ptr.To[int32](1000)}}
		managed := job.DeepCopy()
		managed.Namespace, managed.Spec.ManagedBy = nsManaged, ptr.To(batchv1alpha1.ControllerName)
		for _, obj := range []client.Object{sj, job, managed} {
			if err := e.cl.Create(ctx, obj); err != nil {
				e.t.Fatalf("creating %s: %v", name, err)
			}
		}
	}
}

// managedController names the rows of Jobs managed by SafeJob.
const managedController = "Job managed by SafeJob"

// result is one controller's row of a scenario.
type result struct {
	scenario, controller           string
	created, needed, extra         int
	lost, stuck, duplicates, holds int
}

// waitAndMeasure waits until every job of the three kinds has finished, or
// timeout, then measures each from the audit log and the pod recorder.
func (e *env) waitAndMeasure(scenario string, w workload, timeout time.Duration, allowedReruns func(ns string) int) []result {
	e.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	var sjs batchv1alpha1.SafeJobList
	var jobList, managedList batchv1.JobList
	for {
		// Errors are retried: a scenario may have the API server down for a while.
		err := errors.Join(e.cl.List(ctx, &sjs, client.InNamespace(nsSafeJob)), e.cl.List(ctx, &jobList, client.InNamespace(nsBatch)),
			e.cl.List(ctx, &managedList, client.InNamespace(nsManaged)))
		done := err == nil && unfinishedSafeJobs(sjs.Items) == 0 && unfinishedJobs(jobList.Items) == 0 && unfinishedJobs(managedList.Items) == 0
		if err == nil && testing.Verbose() {
			e.t.Logf("%s unfinished: %d SafeJobs, %d Jobs, %d managed Jobs", time.Now().Format("15:04:05"), unfinishedSafeJobs(sjs.Items),
				unfinishedJobs(jobList.Items), unfinishedJobs(managedList.Items))
		}
		if done || time.Now().After(deadline) {
			if err != nil {
				e.t.Fatalf("listing jobs: %v", err)
			}
			break
		}
		time.Sleep(500 * time.Millisecond) // polling interval of the completion check
	}
	return e.measure(scenario, w, sjs.Items, jobList.Items, managedList.Items, allowedReruns)
}

// measure builds both controllers' rows from the audit log, the pod
// recorder and the final objects.
func (e *env) measure(scenario string, w workload, sjs []batchv1alpha1.SafeJob, batchJobs, managedJobs []batchv1.Job,
	allowedReruns func(ns string) int) []result {
	creates, err := testutil.PodCreatesByNamespace(e.c.AuditLog)
	if err != nil {
		e.t.Fatal(err)
	}
	needed := w.jobs * int(w.completions)
	sjRow := result{scenario: scenario, controller: "SafeJob", needed: needed, stuck: unfinishedSafeJobs(sjs)}
	jobRow := result{scenario: scenario, controller: "batch/v1 Job", needed: needed, stuck: unfinishedJobs(batchJobs)}
	managedRow := result{scenario: scenario, controller: managedController, needed: needed, stuck: unfinishedJobs(managedJobs)}
	counted := map[string]int{}
	for _, sj := range sjs {
		counted[nsSafeJob+"/"+sj.Name] = int(sj.Status.Succeeded)
	}
	for _, j := range batchJobs {
		counted[nsBatch+"/"+j.Name] = int(j.Status.Succeeded)
	}
	// A managed Job's pods are its ledger's, of the Job's name: counted
	// from the Job's own status, as its users read it.
	for _, j := range managedJobs {
		counted[nsManaged+"/"+j.Name] = int(j.Status.Succeeded)
	}
	for ns, row := range map[string]*result{nsSafeJob: &sjRow, nsBatch: &jobRow, nsManaged: &managedRow} {
		for _, n := range creates[ns] {
			row.created += n
			row.duplicates += n - 1
		}
		// The audit log is the primary evidence; a create whose client was
		// killed mid-request can be missing from it, but not from the watch.
		row.created = max(row.created, e.pods.podsSeen(ns))
		row.extra = max(0, row.created-row.needed-allowedReruns(ns))
		for owner, succeeded := range e.pods.succeededByOwner(ns) {
			row.lost += max(0, succeeded-counted[ns+"/"+owner])
		}
	}
	sjRow.holds = e.podsHoldingFinalizer(nsSafeJob)
	managedRow.holds = e.podsHoldingFinalizer(nsManaged)
	e.logUnfinishedManaged(managedJobs)
	e.checkLedgers(sjs)
	var ledgers batchv1alpha1.SafeJobList
	if err := e.cl.List(context.Background(), &ledgers, client.InNamespace(nsManaged)); err != nil {
		e.t.Fatal(err)
	}
	e.checkLedgers(ledgers.Items)
	return []result{sjRow, jobRow, managedRow}
}

// logUnfinishedManaged logs each managed Job that has not finished, with
// its ledger's status: which of the two is behind.
func (e *env) logUnfinishedManaged(managedJobs []batchv1.Job) {
	for k := range managedJobs {
		job := &managedJobs[k]
		if unfinishedJobs([]batchv1.Job{*job}) == 0 {
			continue
		}
		ledger := &batchv1alpha1.SafeJob{}
		err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(job), ledger)
		e.t.Logf("managed Job %s not finished: status %+v; its ledger (%v): conditions %+v, active %d, ready %d, terminating %v, succeeded %d",
			job.Name, job.Status, err, ledger.Status.Conditions, ledger.Status.Active, ledger.Status.Ready, ptr.Deref(ledger.Status.Terminating, -1),
			ledger.Status.Succeeded)
	}
}

func unfinishedSafeJobs(items []batchv1alpha1.SafeJob) int {
	n := 0
	for i := range items {
		if !safeJobFinished(&items[i]) {
			n++
		}
	}
	return n
}

// safeJobFinished reports whether sj is Complete or Failed.
func safeJobFinished(sj *batchv1alpha1.SafeJob) bool {
	for _, c := range sj.Status.Conditions {
		if (c.Type == batchv1alpha1.ConditionComplete || c.Type == batchv1alpha1.ConditionFailed) && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

func unfinishedJobs(items []batchv1.Job) int {
	n := 0
	for _, j := range items {
		done := false
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				done = true
			}
		}
		if !done {
			n++
		}
	}
	return n
}

// podsHoldingFinalizer counts pods that still carry the ledger finalizer (I5)
// once their release, which follows the SafeJobs' final writes, had time.
func (e *env) podsHoldingFinalizer(ns string) int {
	pods, holding, err := testutil.WaitForRelease(e.cl, ns)
	if err != nil && len(holding) == 0 {
		e.t.Fatal(err)
	}
	for _, p := range pods {
		if slices.Contains(holding, p.Name) {
			e.t.Logf("pod %s/%s holds the ledger finalizer after %s: phase %s, deleting %v, labels %v", ns, p.Name,
				testutil.ReleaseTimeout, p.Status.Phase, p.DeletionTimestamp, p.Labels)
		}
	}
	return len(holding)
}

// checkLedgers asserts that every final ledger replays and matches its counters.
func (e *env) checkLedgers(items []batchv1alpha1.SafeJob) {
	for _, sj := range items {
		st, err := jobs.Replay(&sj.Status.Ledger)
		if err != nil {
			e.t.Errorf("%s: ledger does not replay: %v", sj.Name, err)
			continue
		}
		if int(sj.Status.Succeeded) != st.Succeeded.Len() {
			e.t.Errorf("%s: status.succeeded %d, ledger %d", sj.Name, sj.Status.Succeeded, st.Succeeded.Len())
		}
	}
}

// podRecorder watches every pod and remembers which reached Succeeded, by
// namespace and owner: completions the cluster really produced.
type podRecorder struct {
	mu        sync.Mutex
	succeeded map[string]map[string]string // ns -> pod UID -> owner name
	seen      map[string]map[string]bool   // ns -> UIDs of every pod seen
}

func recordPods(t *testing.T, c *cluster.Cluster) *podRecorder {
	t.Helper()
	r := &podRecorder{succeeded: map[string]map[string]string{}, seen: map[string]map[string]bool{}}
	watchPods(t, c, func(_ context.Context, pod *corev1.Pod) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen[pod.Namespace] == nil {
			r.seen[pod.Namespace] = map[string]bool{}
		}
		r.seen[pod.Namespace][string(pod.UID)] = true
		if ref := metav1.GetControllerOf(pod); ref != nil && pod.Status.Phase == corev1.PodSucceeded {
			if r.succeeded[pod.Namespace] == nil {
				r.succeeded[pod.Namespace] = map[string]string{}
			}
			r.succeeded[pod.Namespace][string(pod.UID)] = ref.Name
		}
	})
	return r
}

// watchPods calls see with every state of every pod of the cluster (the
// last state of a deleted one too) until the test ends; it returns once the
// pods that exist have been seen.
func watchPods(t *testing.T, c *cluster.Cluster, see func(context.Context, *corev1.Pod)) {
	t.Helper()
	watchObjects(t, c, &corev1.Pod{}, func(ctx context.Context, obj client.Object) { see(ctx, obj.(*corev1.Pod)) })
}

// watchObjects does as watchPods for every object of the kind of example.
func watchObjects(t *testing.T, c *cluster.Cluster, example client.Object, see func(context.Context, client.Object)) {
	t.Helper()
	informers, err := cache.New(c.Config, cache.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf, err := informers.GetInformer(ctx, example)
	if err != nil {
		t.Fatal(err)
	}
	handle := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if o, ok := obj.(client.Object); ok {
			see(ctx, o)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }, DeleteFunc: handle,
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatalf("%T watch did not sync", example)
	}
}

func (r *podRecorder) podsSeen(ns string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen[ns])
}

func (r *podRecorder) succeededByOwner(ns string) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, owner := range r.succeeded[ns] {
		out[owner]++
	}
	return out
}

// report prints the side-by-side table of a set of scenario rows.
func report(t *testing.T, rows []result) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n| scenario | controller | pods created | pods needed | extra pods | lost completions | stuck jobs |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d |\n", r.scenario, r.controller, r.created, r.needed, r.extra, r.lost, r.stuck)
	}
	return b.String()
}
