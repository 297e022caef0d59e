// Command manager runs the SafeJob controller.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/logging"
	"github.com/safejob/safejob/internal/recorder"
)

// version is the operator's release version, set at build time
// (-ldflags "-X main.version=v0.1.0"); see buildVersion.
var version = "dev"

func main() {
	var s settings
	flag.StringVar(&s.metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&s.leaderElect, "leader-elect", false,
		"Enable leader election for controller manager. Enabling this will ensure there is only one active controller manager.")
	flag.StringVar(&s.leaderElectionNamespace, "leader-election-namespace", "",
		"The namespace of the leader election Lease (default: the namespace the manager runs in).")
	flag.BoolVar(&s.secureMetrics, "metrics-secure", false,
		"If set, the metrics endpoint is served via HTTPS, to callers the API server authenticates and authorizes "+
			"(get on the /metrics non-resource URL, as the metrics-reader ClusterRole grants).")
	flag.IntVar(&s.opts.MaxConcurrentReconciles, "concurrent-reconciles", 32, "The number of SafeJobs reconciled at once.")
	flag.IntVar(&s.opts.Pacing.ConcurrentPodWrites, "concurrent-pod-writes", controller.DefaultConcurrentPodWrites,
		"The pod creates, finalizer releases and deletes in flight at once, across all SafeJobs (0: unbounded).")
	flag.IntVar(&s.opts.Pacing.ConcurrentStatusWrites, "concurrent-status-writes", controller.DefaultConcurrentStatusWrites,
		"The status writes that commit launches in flight at once, across all SafeJobs (0: unbounded).")
	flag.Float64Var(&s.qps, "kube-api-qps", 100, "Queries per second to the API server.")
	flag.IntVar(&s.burst, "kube-api-burst", 200, "Burst of queries to the API server.")
	flag.DurationVar(&s.opts.Pacing.PodBatchPeriod, "pod-batch-period", controller.DefaultPodBatchPeriod,
		"How long a SafeJob's reconcile waits after a pod event, and the least time between two ledger writes of a SafeJob "+
			"that runs several pods at once, so that the events of many pods are decided in one status write (0: at once).")
	flag.DurationVar(&s.opts.Pacing.ReadyBatchPeriod, "ready-batch-period", controller.DefaultReadyBatchPeriod,
		"How long a change of status.ready alone may wait to be written, so that it travels with the next ledger fact (0: at once). "+
			"Longer saves writes for short pods but shows their ready count later.")
	flag.DurationVar(&s.opts.Pacing.ReadyBusyPeriod, "ready-busy-period", controller.DefaultReadyBusyPeriod,
		"How long a change of status.ready alone may wait while SafeJobs queue for a worker, "+
			"renewed while they still queue up to --ready-busy-limit (0 or less than --ready-batch-period: as --ready-batch-period).")
	flag.DurationVar(&s.opts.Pacing.ReadyBusyLimit, "ready-busy-limit", controller.DefaultReadyBusyLimit,
		"The longest a change of status.ready alone may wait while SafeJobs keep queueing for a worker: "+
			"a hold that ends while they still queue is renewed by --ready-busy-period up to this (at or below it: no renewal).")
	flag.DurationVar(&s.failureBackoff, "pod-failure-backoff", jobs.DefaultBackoff.Base,
		"The delay before a failed pod is replaced, doubling with each failure since the last success, "+
			"at most 60 times this (batch/v1: 10s, at most 10m).")
	flag.IntVar(&s.opts.Pacing.LaunchWindow, "launch-window", controller.DefaultLaunchWindow,
		"The pods launched across all SafeJobs that may wait to start at once (created or about to be, not yet running); "+
			"SafeJobs beyond it wait their turn (0: unbounded).")
	flag.IntVar(&s.opts.Pacing.LaunchWindowMin, "launch-window-min", controller.DefaultLaunchWindowMin,
		"The least --launch-window shrinks to: it follows how fast pods start, twice the most pods that started in one second "+
			"of the last 10 seconds times the quickest start of the last minute, between this and --launch-window, "+
			"and all of --launch-window where pods take 10 seconds or more to start on average "+
			"(0, or --launch-window or more: it stays at --launch-window).")
	flag.DurationVar(&s.opts.Pacing.LaunchWindowTimeout, "launch-window-timeout", controller.DefaultLaunchWindowTimeout,
		"The longest a pod that does not start holds its place in --launch-window.")
	flag.DurationVar(&s.opts.Pacing.OutcomeHold, "outcome-hold", controller.DefaultOutcomeHold,
		"While SafeJobs wait for --launch-window, the longest a status write that records nothing but pod successes "+
			"waits, so that pods start first (0: never held).")
	flag.BoolVar(&s.kueuePodsReady, "kueue-pods-ready", true,
		"Keep the PodsReady condition of queued SafeJobs' Kueue Workloads. Kueue's waitForPodsReady needs it "+
			"(a Workload without it is evicted at the timeout); Kueue's own Job integration sets it only when waitForPodsReady "+
			"is on, so with it off, false saves about one Workload status write per SafeJob.")
	flag.DurationVar(&s.opts.ReleaseDrain, "release-drain", controller.DefaultReleaseDrain,
		"How long finalizer releases go on once the manager is told to stop (SIGTERM): those in flight finish and those queued "+
			"are issued, so that no pod is left holding the ledger finalizer (0: they stop at once). "+
			"Keep it below the pod's termination grace period.")
	flag.BoolVar(&s.pacing, "pacing", true,
		"Pace writes for throughput: the batch and ready periods, the launch window, the outcome hold and the bounds on "+
			"writes in flight. false turns all of it off (every decision written at once, nothing bounded); "+
			"exactness does not depend on it.")
	flag.StringVar(&s.pprofAddr, "pprof-bind-address", "0", "The address the pprof endpoint binds to (0 disables it).")
	showVersion := flag.Bool("version", false, "Print the version (safejob-controller <version>) and exit.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println("safejob-controller", buildVersion(version, debug.ReadBuildInfo))
		os.Exit(0)
	}
	ctrl.SetLogger(logging.Lazy(zap.New(zap.UseFlagOptions(&opts))))
	setupLog := ctrl.Log.WithName("setup")

	if err := run(s); err != nil {
		setupLog.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

// settings are the manager's command-line settings; opts holds those of
// the reconciler, completed by options.
type settings struct {
	metricsAddr, probeAddr, pprofAddr string
	leaderElectionNamespace           string
	leaderElect, secureMetrics        bool
	qps                               float64
	burst                             int
	opts                              controller.Options
	failureBackoff                    time.Duration
	kueuePodsReady, pacing            bool
}

// options are the reconciler's Options: as the flags set them, with the
// backoff they derive, and queueing as the API server serves it.
func (s settings) options(withKueue bool) controller.Options {
	opts := s.opts
	opts.Backoff = jobs.Backoff{Base: s.failureBackoff, Max: 60 * s.failureBackoff}
	opts.Kueue, opts.NoPodsReady = withKueue, !s.kueuePodsReady
	if !s.pacing {
		opts.Pacing = controller.Pacing{}
	}
	return opts
}

func run(s settings) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("adding client-go types: %w", err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("adding SafeJob types: %w", err)
	}
	if err := kueue.AddToScheme(scheme); err != nil {
		return fmt.Errorf("adding Kueue types: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(s.qps), s.burst
	controller.WithServerTimeouts(cfg)
	metricsOpts := metricsserver.Options{
		BindAddress:   s.metricsAddr,
		SecureServing: s.secureMetrics,
		TLSOpts:       []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if s.secureMetrics {
		// Only callers the API server authenticates (TokenReview) and
		// authorizes (SubjectAccessReview) read the metrics.
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, withKueue, err := newManager(ctx, cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  s.probeAddr,
		PprofBindAddress:        s.pprofAddr,
		LeaderElection:          s.leaderElect,
		LeaderElectionID:        "safejob.batch.safejob.dev",
		LeaderElectionNamespace: s.leaderElectionNamespace,
		Cache:                   controller.CacheOptions(),
		// Room for the release drain, and for the rest of the shutdown after it.
		GracefulShutdownTimeout: ptr.To(s.opts.ReleaseDrain + 10*time.Second),
	})
	if err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Queueing through Kueue", "enabled", withKueue)
	m := controller.NewMetrics()
	if err := m.Register(metrics.Registry); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	rec, err := recorder.NewForManager(mgr, recorder.Options{Controller: "safejob-controller", Dropped: m.EventsDropped.Inc})
	if err != nil {
		return fmt.Errorf("setting up events: %w", err)
	}
	r := &controller.SafeJobReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  rec,
		Clock:     clock.RealClock{},
		Metrics:   m,
		Options:   s.options(withKueue),
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}
	ctrl.Log.WithName("setup").Info("Starting manager", "version", buildVersion(version, debug.ReadBuildInfo))
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// startupBackoff is how the manager retries reaching the API server at
// start, about two minutes in all: a connection cut, or an API server still
// starting, fails the discovery that creating the manager needs, and
// retrying in the process is quicker than a container restart, whose
// back-off grows to minutes.
var startupBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 8, Cap: 30 * time.Second}

// newManager creates the manager and finds whether Kueue is served,
// retrying both with startupBackoff.
func newManager(ctx context.Context, cfg *rest.Config, opts ctrl.Options) (ctrl.Manager, bool, error) {
	var mgr ctrl.Manager
	var withKueue bool
	err := retryStartup(ctx, startupBackoff, func() error {
		m, err := ctrl.NewManager(cfg, opts)
		if err != nil {
			return fmt.Errorf("creating manager: %w", err)
		}
		k, err := controller.KueueServed(m.GetRESTMapper())
		if err != nil {
			return fmt.Errorf("checking for Kueue: %w", err)
		}
		mgr, withKueue = m, k
		return nil
	})
	return mgr, withKueue, err
}

// retryStartup calls start until it succeeds, ctx ends or the backoff's
// steps run out, and then returns start's last error.
func retryStartup(ctx context.Context, b wait.Backoff, start func() error) error {
	log := ctrl.Log.WithName("setup")
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, b, func(context.Context) (bool, error) {
		if last = start(); last != nil {
			log.Error(last, "Could not start; retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("giving up starting: %w", last)
	}
	return err //nolint:wrapcheck // the context's own error, or nil
}

// buildVersion is the version the manager reports: v as set at build time,
// or, for a build without one ("dev"), the commit the binary was built from
// as the Go toolchain recorded it (go build in a checkout; "-dirty" when
// the tree had changes), else "dev".
func buildVersion(v string, readBuildInfo func() (*debug.BuildInfo, bool)) string {
	if v != "dev" {
		return v
	}
	info, ok := readBuildInfo()
	if !ok {
		return v
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return v
	}
	if modified == "true" {
		revision += "-dirty"
	}
	return revision
}
