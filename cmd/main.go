// Command manager runs the SafeJob controller.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
)

func main() {
	var (
		metricsAddr, probeAddr string
		pprofAddr              string
		enableLeaderElection   bool
		secureMetrics          bool
		concurrency            int
		qps                    float64
		burst                  int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. Enabling this will ensure there is only one active controller manager.")
	flag.BoolVar(&secureMetrics, "metrics-secure", false, "If set, the metrics endpoint is served securely via HTTPS.")
	flag.IntVar(&concurrency, "concurrent-reconciles", 8, "The number of SafeJobs reconciled at once.")
	flag.Float64Var(&qps, "kube-api-qps", 100, "Queries per second to the API server.")
	flag.IntVar(&burst, "kube-api-burst", 200, "Burst of queries to the API server.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "The address the pprof endpoint binds to (0 disables it).")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog := ctrl.Log.WithName("setup")

	addrs := addresses{metrics: metricsAddr, probe: probeAddr, pprof: pprofAddr}
	if err := run(addrs, enableLeaderElection, secureMetrics, concurrency, qps, burst); err != nil {
		setupLog.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

// addresses are the listen addresses of the manager's endpoints.
type addresses struct{ metrics, probe, pprof string }

func run(addrs addresses, leaderElect, secureMetrics bool, concurrency int, qps float64, burst int) error {
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
	cfg.QPS, cfg.Burst = float32(qps), burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Metrics: metricsserver.Options{
			BindAddress:   addrs.metrics,
			SecureServing: secureMetrics,
			TLSOpts:       []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		},
		HealthProbeBindAddress: addrs.probe,
		PprofBindAddress:       addrs.pprof,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "safejob.batch.safejob.dev",
		Cache:                  controller.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	withKueue, err := controller.KueueServed(mgr.GetRESTMapper())
	if err != nil {
		return fmt.Errorf("checking for Kueue: %w", err)
	}
	ctrl.Log.WithName("setup").Info("Queueing through Kueue", "enabled", withKueue)
	m := controller.NewMetrics()
	if err := m.Register(metrics.Registry); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	r := &controller.SafeJobReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("safejob-controller"),
		Clock:                   clock.RealClock{},
		Metrics:                 m,
		MaxConcurrentReconciles: concurrency,
		Kueue:                   withKueue,
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
	ctrl.Log.WithName("setup").Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}
