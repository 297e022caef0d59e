package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
)

// runMultiKueue starts a worker and a manager cluster, each with Kueue and
// the operator, connects them through MultiKueue as docs/multikueue.md
// tells an admin, and dispatches the sample of config/samples/multikueue
// from the manager, showing it until it is Complete.
func runMultiKueue(ctx context.Context, nodes int, manager string, exitWhenDone bool) error {
	root, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("finding the repository root: %w", err)
	}
	dir, err := os.MkdirTemp("", "safejob-multikueue-")
	if err != nil {
		return fmt.Errorf("creating working directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	clusters, ops := map[string]*cluster.Cluster{}, map[string]*cluster.Process{}
	defer func() {
		for _, op := range ops {
			op.Stop()
		}
		fmt.Println("==> Stopping the clusters")
		for _, c := range clusters {
			c.Stop()
		}
	}()
	for _, name := range []string{"worker", "manager"} {
		fmt.Printf("==> The %s cluster\n", name)
		opts := cluster.Options{Dir: filepath.Join(dir, name), Root: root, Nodes: nodes, Progress: os.Stdout, Kueue: true,
			MultiKueue: name == "manager", KueueOrigin: "manager"}
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return fmt.Errorf("creating working directory: %w", err)
		}
		c, err := cluster.Start(ctx, opts)
		if err != nil {
			return fmt.Errorf("starting the %s cluster: %w", name, err)
		}
		clusters[name] = c
		if ops[name], err = startOperator(manager, opts.Dir, c.Kubeconfig); err != nil {
			return err
		}
	}
	fmt.Println("==> Connecting the manager's MultiKueue to the worker (config/multikueue/worker, a token, a kubeconfig Secret)")
	if err := cluster.ConnectMultiKueue(ctx, clusters["manager"], clusters["worker"], "worker"); err != nil {
		return err
	}
	if err := cluster.MultiKueueQueues(ctx, clusters["manager"], clusters["worker"], "default", "lq", 4); err != nil {
		return err
	}
	cl, err := client.New(clusters["manager"].Config, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "config", "samples", "multikueue", "safejob.yaml"))
	if err != nil {
		return fmt.Errorf("reading the sample: %w", err)
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := yaml.UnmarshalStrict(raw, sj); err != nil {
		return fmt.Errorf("reading the sample: %w", err)
	}
	sj.Namespace = "default"
	if err := cl.Create(ctx, sj); err != nil {
		return fmt.Errorf("creating %s: %w", sj.Name, err)
	}
	fmt.Printf("==> Submitted %s to the manager; its pods run on the worker, its status is copied back (Ctrl-C stops everything)\n\n", sj.Name)
	if err := watchProgress(ctx, cl, ops["manager"], []string{sj.Name}); err != nil {
		return err
	}
	kubectl := filepath.Join(clusters["manager"].BinDir, "kubectl")
	fmt.Printf("\n%s finished on the worker. Look around in another shell:\n", sj.Name)
	fmt.Printf("  %s --kubeconfig=%s get sj,workloads      # the manager: no pod\n", kubectl, clusters["manager"].Kubeconfig)
	fmt.Printf("  %s --kubeconfig=%s get sj,workloads,pods # the worker\n", kubectl, clusters["worker"].Kubeconfig)
	if exitWhenDone {
		return nil
	}
	fmt.Println("Ctrl-C stops everything.")
	<-ctx.Done()
	return nil
}
