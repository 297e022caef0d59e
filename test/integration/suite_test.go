// Package integration runs the SafeJob controller against a real
// kube-apiserver and etcd (envtest), with a test acting as the kubelet.
package integration

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/recorder"
	"github.com/safejob/safejob/test/testutil"
)

var (
	cfg      *rest.Config
	scheme   = runtime.NewScheme()
	k8s      client.Client
	auditLog string
	// controlPlane is the suite's API server and etcd (for kubeconfigs).
	controlPlane *envtest.Environment
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	opts := []zap.Opts{zap.UseDevMode(true), zap.Level(zapcore.ErrorLevel)}
	if os.Getenv("SAFEJOB_TEST_VERBOSE") != "" {
		opts[1] = zap.Level(zapcore.Level(-2))
	}
	ctrl.SetLogger(zap.New(opts...))
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := kueue.AddToScheme(scheme); err != nil {
		panic(err)
	}
	assets, err := kubebuilderAssets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "safejob-integration-")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policy, logPath, err := testutil.WriteAuditPolicy(dir)
	if err != nil {
		panic(err)
	}
	auditLog = logPath
	kueueCRDs, err := testutil.KueueCRDDir(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, startedCfg, err := testutil.StartControlPlane(func() *envtest.Environment {
		env := &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases"), kueueCRDs},
			ErrorIfCRDPathMissing: true,
			BinaryAssetsDirectory: assets,
		}
		env.ControlPlane.GetAPIServer().Configure().
			Set("audit-policy-file", policy).
			Set("audit-log-path", logPath).
			Set("audit-log-maxsize", testutil.AuditLogMaxSizeMB)
		return env
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, controlPlane = startedCfg, env
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = 1000, 2000
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		panic(err)
	}
	if err := testutil.InstallPolicies(context.Background(), k8s, filepath.Join("..", "..")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// kubebuilderAssets returns KUBEBUILDER_ASSETS, building the pinned binaries
// when it is unset so that a bare `go test ./...` works too.
func kubebuilderAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	out, err := exec.Command(filepath.Join("..", "..", "hack", "k8s-binaries.sh"), "etcd", "kube-apiserver").Output()
	if err != nil {
		return "", fmt.Errorf("building kube-apiserver and etcd: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// managerOptions adjust the controller a test runs.
type managerOptions struct {
	// wrapTransport wraps the controller's connection to the API server.
	wrapTransport func(http.RoundTripper) http.RoundTripper
	// wrapClient wraps the client the reconciler writes with.
	wrapClient func(client.Client, context.CancelFunc) client.Client
	// clock is the controller's clock (default: the real one).
	clock clock.PassiveClock
	// noKueue runs the controller as if the Workload API were not served.
	noKueue bool
	// fence replaces the operator's default fence (ledger.DefaultFence).
	fence ledger.Fence
	// backoff replaces the suite's short delay before a failed pod is
	// replaced (testBackoff).
	backoff jobs.Backoff
	// launchWindow and launchWindowTimeout are the controller's
	// LaunchWindow (0: the operator's default) and LaunchWindowTimeout.
	launchWindow        int
	launchWindowTimeout time.Duration
	// outcomeHold is the controller's OutcomeHold (0: the operator's
	// default).
	outcomeHold time.Duration
	// statusWrites is the controller's ConcurrentStatusWrites.
	statusWrites int
	// metrics, if set, receives the controller's metrics.
	metrics **controller.Metrics
	// config is the API server to run against (default: the suite's).
	config *rest.Config
}

// pacingOff reports whether the suite runs its controllers with all pacing
// off (SAFEJOB_PACING=off, make test-pacing-off): every decision written at
// once, nothing bounded. The safety tests must pass either way; those that
// measure pacing itself are not run so.
func pacingOff() bool { return os.Getenv("SAFEJOB_PACING") == "off" }

// skipWithoutPacing skips a test of pacing itself when pacing is off.
func skipWithoutPacing(t *testing.T) {
	t.Helper()
	if pacingOff() {
		t.Skip("tests pacing, which SAFEJOB_PACING=off turns off")
	}
}

// testBackoff keeps the suite's retries quick; TestFailureBackoff checks
// the delay itself.
var testBackoff = jobs.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}

// startManager runs a SafeJob controller, limited to namespace ns, until the
// returned stop is called or the test ends. stop waits for it to exit.
func startManager(t *testing.T, ns string, opts managerOptions) (stop func()) {
	t.Helper()
	c := rest.CopyConfig(cmp.Or(opts.config, cfg))
	c.WrapTransport = opts.wrapTransport
	controller.WithServerTimeouts(c)
	cacheOpts := controller.CacheOptions()
	cacheOpts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	mgr, err := ctrl.NewManager(c, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("creating manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl := mgr.GetClient()
	if opts.wrapClient != nil {
		cl = opts.wrapClient(cl, cancel)
	}
	m := controller.NewMetrics()
	if err := m.Register(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	r := &controller.SafeJobReconciler{
		Client: cl, APIReader: mgr.GetAPIReader(), Recorder: eventRecorder(t, mgr), Clock: opts.clock, Metrics: m,
		Options: controller.Options{
			Namespaces: []string{ns}, MaxConcurrentReconciles: 4, Kueue: !opts.noKueue,
			Fence: opts.fence, Backoff: opts.backoff,
			Pacing: controller.Pacing{
				ReadyBatchPeriod:       controller.DefaultReadyBatchPeriod,
				ReadyBusyPeriod:        controller.DefaultReadyBusyPeriod,
				ReadyBusyLimit:         controller.DefaultReadyBusyLimit,
				ConcurrentPodWrites:    controller.DefaultConcurrentPodWrites,
				LaunchWindow:           opts.launchWindow,
				LaunchWindowTimeout:    opts.launchWindowTimeout,
				OutcomeHold:            opts.outcomeHold,
				ConcurrentStatusWrites: opts.statusWrites,
			},
		},
	}
	if opts.metrics != nil {
		*opts.metrics = m
	}
	pacing := &r.Options.Pacing
	if pacing.LaunchWindow == 0 {
		pacing.LaunchWindow = controller.DefaultLaunchWindow
	}
	if pacing.OutcomeHold == 0 {
		pacing.OutcomeHold = controller.DefaultOutcomeHold
	}
	if r.Options.Backoff == (jobs.Backoff{}) {
		r.Options.Backoff = testBackoff
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
		// The operator's default; it holds writes by the clock, which a
		// fake clock would stop.
		pacing.PodBatchPeriod = controller.DefaultPodBatchPeriod
	}
	if pacingOff() {
		*pacing = controller.Pacing{}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatalf("setting up controller: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(stopReport):
			// A stop this slow ends in the manager's grace period error; show
			// what it is waiting on.
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Logf("manager still stopping after %s; goroutines:\n%s", stopReport, b.String())
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// stopReport is how long a manager may take to stop before its goroutines
// are logged: well inside its 30s grace period, well beyond a normal stop.
const stopReport = 20 * time.Second

// eventRecorder is the operator's event recorder, as cmd/main.go makes it.
func eventRecorder(t *testing.T, mgr ctrl.Manager) events.EventRecorder {
	t.Helper()
	rec, err := recorder.NewForManager(mgr, recorder.Options{Controller: "safejob-controller"})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sj-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// waitFor polls cond until it is true, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval of the condition, not a wait for an outcome
	}
}

// waitFinished waits until the SafeJob has a Complete or Failed condition
// and returns it.
func waitFinished(t *testing.T, key client.ObjectKey, timeout time.Duration) *batchv1alpha1.SafeJob {
	t.Helper()
	sj := &batchv1alpha1.SafeJob{}
	waitFor(t, timeout, "SafeJob "+key.Name+" to finish", func() (bool, error) {
		if err := k8s.Get(context.Background(), key, sj); err != nil {
			return false, err
		}
		return conditionTrue(sj, batchv1alpha1.ConditionComplete) || conditionTrue(sj, batchv1alpha1.ConditionFailed), nil
	})
	return sj
}

// waitFinishedProgressing waits until the SafeJob finishes for as long as
// it makes progress: it fails only when no completion or failure has been
// recorded for stall, so that a slow machine slows the test down and only a
// stuck SafeJob fails it.
func waitFinishedProgressing(t *testing.T, key client.ObjectKey, stall time.Duration) *batchv1alpha1.SafeJob {
	t.Helper()
	sj := &batchv1alpha1.SafeJob{}
	done, since := int32(-1), time.Now()
	for {
		if err := k8s.Get(context.Background(), key, sj); err != nil {
			t.Fatalf("waiting for SafeJob %s to finish: %v", key.Name, err)
		}
		if conditionTrue(sj, batchv1alpha1.ConditionComplete) || conditionTrue(sj, batchv1alpha1.ConditionFailed) {
			return sj
		}
		if n := sj.Status.Succeeded + sj.Status.Failed; n != done {
			done, since = n, time.Now()
		}
		if time.Since(since) > stall {
			t.Fatalf("SafeJob %s recorded nothing for %s (%d succeeded, %d failed, %d active)",
				key.Name, stall, sj.Status.Succeeded, sj.Status.Failed, sj.Status.Active)
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the status, not a wait for an outcome
	}
}

func conditionTrue(sj *batchv1alpha1.SafeJob, t string) bool {
	for _, c := range sj.Status.Conditions {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func condition(sj *batchv1alpha1.SafeJob, t string) *metav1.Condition {
	for i := range sj.Status.Conditions {
		if sj.Status.Conditions[i].Type == t {
			return &sj.Status.Conditions[i]
		}
	}
	return nil
}

// harness is what most tests use: a namespace, a kubelet and a ledger watch.
type harness struct {
	ns      string
	kubelet *testutil.Kubelet
	watch   *testutil.LedgerWatch
}

func newHarness(t *testing.T, fate func(*corev1.Pod) testutil.Fate, deleteTerminal bool) *harness {
	t.Helper()
	ns := newNamespace(t)
	if fate == nil {
		fate = succeed
	}
	return &harness{
		ns:      ns,
		kubelet: testutil.StartKubelet(t, cfg, scheme, ns, fate, deleteTerminal),
		watch:   testutil.WatchLedgers(t, cfg, scheme, ns),
	}
}

func succeed(*corev1.Pod) testutil.Fate { return testutil.Fate{} }

func hold(*corev1.Pod) testutil.Fate { return testutil.Fate{Hold: true} }

// finalCheck asserts I1-I6 from the audit log, the pods and the ledger history.
func (h *harness) finalCheck(t *testing.T, sj *batchv1alpha1.SafeJob) map[string]int {
	t.Helper()
	creates, err := testutil.PodCreates(auditLog, h.ns)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckPods(t, k8s, sj, creates, h.kubelet.Succeeded())
	h.watch.Check(t)
	return creates
}

// waitForEvent waits for an event with the reason about the named object.
func waitForEvent(t *testing.T, ns, name, reason string) {
	t.Helper()
	waitFor(t, 30*time.Second, "a "+reason+" event for "+name, func() (bool, error) {
		events := &corev1.EventList{}
		if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == reason && e.InvolvedObject.Name == name {
				return true, nil
			}
		}
		return false, nil
	})
}

// openLaunches is the number of launches of the SafeJob's ledger whose
// outcome is not recorded (status.active counts only the pods that exist).
func openLaunches(t *testing.T, sj *batchv1alpha1.SafeJob) int {
	t.Helper()
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatalf("%s: ledger does not replay: %v", sj.Name, err)
	}
	return len(st.Open)
}

// hackTool runs one of the repository's hack/ scripts that build a pinned
// tool, and returns what it prints: the tool's path or directory.
func hackTool(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "..", "hack", script), args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return strings.TrimSpace(string(out))
}

// adminKubeconfig writes a kubeconfig of a cluster admin of the suite's API
// server, for the tools the tests run (kubectl, helm), and returns its path.
func adminKubeconfig(t *testing.T) string {
	t.Helper()
	user, err := controlPlane.AddUser(envtest.User{Name: "admin-" + t.Name(), Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
