package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/safejob/safejob/test/cluster"
)

// startController returns the process of the mode's controller (none for
// the limit), starting the operator for SafeJob modes, and how to stop it.
func startController(ctx context.Context, o options, c *cluster.Cluster, dir string, m mode) (*cluster.Process, func(), error) {
	switch m.Controller {
	case ctrlBuiltin:
		return c.Process(kcmProcess), func() {}, nil
	case ctrlSafeJob:
		p, err := startOperator(ctx, o, c, dir, m)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Stop, nil
	}
	return nil, func() {}, nil
}

// operatorCounters reads the operator's counts (reconcile passes, status
// writes by kind), for a mode that runs the operator, and returns a
// function that gives those made since (none for another mode). The counts
// are diagnostics: a read that fails is reported and counts as none, and
// leaves the run's figures alone.
func operatorCounters(ctx context.Context, m mode) (since func() operatorCounts) {
	if m.Controller != ctrlSafeJob {
		return func() operatorCounts { return operatorCounts{} }
	}
	read := func() (operatorCounts, bool) {
		var c operatorCounts
		// Its metrics server may start a moment after its caches have synced.
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			c, err = scrapeOperator(ctx)
			return err == nil, nil
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: reading the operator's counts from %s: %v\n", operatorMetrics, err)
		}
		return c, err == nil
	}
	before, ok := read()
	return func() operatorCounts {
		if after, ok2 := read(); ok && ok2 {
			return after.since(before)
		}
		return operatorCounts{}
	}
}

func startOperator(ctx context.Context, o options, c *cluster.Cluster, dir string, m mode) (*cluster.Process, error) {
	args := []string{"--kubeconfig=" + c.Kubeconfig, "--metrics-bind-address=" + operatorMetricsAddr,
		"--health-probe-bind-address=0", "--zap-log-level=error"}
	if m.QPS > 0 {
		args = append(args, fmt.Sprintf("--kube-api-qps=%d", m.QPS), fmt.Sprintf("--kube-api-burst=%d", 2*m.QPS))
	}
	if o.profileDir != "" {
		args = append(args, "--pprof-bind-address="+operatorPprofAddr)
	}
	args = append(args, o.operatorArgs...)
	p, err := cluster.StartProcess("manager", filepath.Join(dir, "manager.log"), o.manager, args...)
	if err != nil {
		return nil, fmt.Errorf("starting the operator: %w", err)
	}
	// The operator's caches sync in well under a second on an empty cluster.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	if err := p.Exited(); err != nil {
		return nil, fmt.Errorf("operator exited: %w\n%s", err, p.Tail(20))
	}
	return p, nil
}
