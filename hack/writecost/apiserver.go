package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
)

// pids are the processes of the kube-apiserver and etcd that envtest started.
type pids struct{ apiserver, etcd int }

// findPIDs finds the kube-apiserver and etcd that envtest started.
func findPIDs() (pids, error) {
	var ps pids
	var err error
	if ps.apiserver, err = cluster.ChildPID("kube-apiserver"); err != nil {
		return ps, fmt.Errorf("finding kube-apiserver: %w", err)
	}
	if ps.etcd, err = cluster.ChildPID("etcd"); err != nil {
		return ps, fmt.Errorf("finding etcd: %w", err)
	}
	return ps, nil
}

// newClient returns a client that knows the built-in types and SafeJobs.
func newClient(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// startProfile takes a 10-second CPU profile of kube-apiserver into path,
// in the background; the channel is closed once it is written (or has
// failed, which is reported on standard error).
func startProfile(ctx context.Context, cfg *rest.Config, path string) (<-chan struct{}, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("profile client: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "writecost: profile: %v\n", err)
		}
	}()
	return done, nil
}
