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

const managerName, workerName = "manager", "worker"

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
	for _, name := range []string{workerName, managerName} {
		if clusters[name], ops[name], err = startMember(ctx, name, filepath.Join(dir, name), root, nodes, manager); err != nil {
			return err
		}
	}
	fmt.Println("==> Connecting the manager's MultiKueue to the worker (config/multikueue/worker, a token, a kubeconfig Secret)")
	workers := map[string]*cluster.Cluster{workerName: clusters[workerName]}
	if err := cluster.ConnectMultiKueue(ctx, clusters[managerName], workers, nil); err != nil {
		return fmt.Errorf("connecting MultiKueue: %w", err)
	}
	if err := cluster.MultiKueueQueues(ctx, clusters[managerName], []*cluster.Cluster{clusters[workerName]}, "default", "lq", 4); err != nil {
		return fmt.Errorf("creating the queues: %w", err)
	}
	cl, err := client.New(clusters[managerName].Config, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	name, err := submitSample(ctx, cl, filepath.Join(root, "config", "samples", "multikueue", "safejob.yaml"))
	if err != nil {
		return err
	}
	if err := watchProgress(ctx, cl, ops[managerName], []string{name}); err != nil {
		return err
	}
	kubectl := filepath.Join(clusters[managerName].BinDir, "kubectl")
	fmt.Printf("\n%s finished on the worker. Look around in another shell:\n", name)
	fmt.Printf("  %s --kubeconfig=%s get sj,workloads      # the manager: no pod\n", kubectl, clusters[managerName].Kubeconfig)
	fmt.Printf("  %s --kubeconfig=%s get sj,workloads,pods # the worker\n", kubectl, clusters[workerName].Kubeconfig)
	if exitWhenDone {
		return nil
	}
	fmt.Println("Ctrl-C stops everything.")
	<-ctx.Done()
	return nil
}

// startMember starts one cluster of the pair, with Kueue (the manager's a
// MultiKueue manager) and the operator.
func startMember(ctx context.Context, name, dir, root string, nodes int, manager string) (*cluster.Cluster, *cluster.Process, error) {
	fmt.Printf("==> The %s cluster\n", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating working directory: %w", err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Root: root, Nodes: nodes, Progress: os.Stdout, Kueue: true,
		MultiKueue: name == managerName, KueueOrigin: managerName})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the %s cluster: %w", name, err)
	}
	op, err := startOperator(manager, dir, c.Kubeconfig)
	if err != nil {
		c.Stop()
		return nil, nil, err
	}
	return c, op, nil
}

// submitSample creates the sample SafeJob of path in namespace default.
func submitSample(ctx context.Context, cl client.Client, path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the sample: %w", err)
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := yaml.UnmarshalStrict(raw, sj); err != nil {
		return "", fmt.Errorf("reading the sample: %w", err)
	}
	sj.Namespace = "default"
	if err := cl.Create(ctx, sj); err != nil {
		return "", fmt.Errorf("creating %s: %w", sj.Name, err)
	}
	fmt.Printf("==> Submitted %s to the manager; its pods run on the worker, its status is copied back (Ctrl-C stops everything)\n\n", sj.Name)
	return sj.Name, nil
}
