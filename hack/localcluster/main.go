// Command localcluster runs SafeJob on a local cluster built from real parts
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager and KWOK
// nodes), all on 127.0.0.1.
//
//	localcluster run   start the cluster and the operator, apply config/samples and show their progress
//	localcluster up    start the cluster only
//
// Ctrl-C stops everything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/term"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
)

func main() {
	exitWhenDone := flag.Bool("exit-when-complete", false, "run: exit once every sample has finished")
	nodes := flag.Int("nodes", 4, "number of simulated nodes")
	manager := flag.String("manager", "bin/manager", "run: the operator binary")
	multiKueue := flag.Bool("multikueue", false, "run: a manager and a worker cluster with Kueue's MultiKueue between them; "+
		"the sample of config/samples/multikueue is dispatched to the worker")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: localcluster [flags] run|up\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || (flag.Arg(0) != "run" && flag.Arg(0) != "up") {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *multiKueue && flag.Arg(0) == "run" {
		err = runMultiKueue(ctx, *nodes, *manager, *exitWhenDone)
	} else {
		err = run(ctx, flag.Arg(0), *nodes, *manager, *exitWhenDone)
	}
	switch {
	case ctx.Err() != nil:
		// Stopped on request (Ctrl-C): whatever the teardown met on its way
		// is no failure, and `make run` ends without an error.
		fmt.Println("==> Stopped")
	case err != nil && !errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode string, nodes int, manager string, exitWhenDone bool) error {
	root, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("finding the repository root: %w", err)
	}
	dir, err := os.MkdirTemp("", "safejob-cluster-")
	if err != nil {
		return fmt.Errorf("creating working directory: %w", err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Root: root, Nodes: nodes, Progress: os.Stdout})
	if err != nil {
		return fmt.Errorf("starting the local cluster: %w", err)
	}
	defer func() {
		fmt.Println("==> Stopping the cluster")
		c.Stop()
		_ = os.RemoveAll(dir)
	}()
	kubectl := filepath.Join(c.BinDir, "kubectl")
	if mode == "up" {
		fmt.Printf("\nThe cluster is up. In another shell:\n  export KUBECONFIG=%s\n  %s get nodes\nCtrl-C stops it.\n", c.Kubeconfig, kubectl)
		<-ctx.Done()
		return nil
	}
	op, err := startOperator(manager, dir, c.Kubeconfig)
	if err != nil {
		return err
	}
	defer op.Stop()
	cl, err := client.New(c.Config, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	names, err := applySamples(ctx, cl, filepath.Join(root, "config", "samples"))
	if err != nil {
		return err
	}
	fmt.Printf("==> Applied samples %s; watching them (Ctrl-C stops everything)\n\n", strings.Join(names, ", "))
	if err := watchProgress(ctx, cl, op, names); err != nil {
		return err
	}
	fmt.Printf("\nEvery sample finished. Look around in another shell:\n  export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Printf("  %s get sj,pods\n  %s get sj safejob-sample -o yaml   # the ledger is in status\n", kubectl, kubectl)
	if exitWhenDone {
		return nil
	}
	fmt.Println("Ctrl-C stops everything.")
	<-ctx.Done()
	return nil
}

// startOperator runs the operator (bin/manager, built by `make run`) against the cluster.
func startOperator(bin, dir, kubeconfig string) (*cluster.Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("operator binary missing (run `make build`): %w", err)
	}
	fmt.Println("==> Starting the SafeJob operator (log: " + filepath.Join(dir, "manager.log") + ")")
	p, err := cluster.StartProcess("manager", filepath.Join(dir, "manager.log"), bin,
		"--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the operator: %w", err)
	}
	return p, nil
}

// applySamples creates every SafeJob of config/samples in namespace default.
func applySamples(ctx context.Context, cl client.Client, dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "batch_*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing samples: %w", err)
	}
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading sample: %w", err)
		}
		sj := &batchv1alpha1.SafeJob{}
		if err := yaml.UnmarshalStrict(raw, sj); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		sj.Namespace = "default"
		if err := cl.Create(ctx, sj); err != nil {
			return nil, fmt.Errorf("creating %s: %w", sj.Name, err)
		}
		names = append(names, sj.Name)
	}
	return names, nil
}

// watchProgress shows the SafeJobs, runs of schedules included, until every
// sample has finished (a scheduled one: once a run of it has succeeded).
func watchProgress(ctx context.Context, cl client.Client, op *cluster.Process, samples []string) error {
	live := term.IsTerminal(int(os.Stdout.Fd()))
	last := ""
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := op.Exited(); err != nil {
			return fmt.Errorf("the operator stopped: %w; last lines of its log:\n%s", err, op.Tail(20))
		}
		var list batchv1alpha1.SafeJobList
		if err := cl.List(ctx, &list, client.InNamespace("default")); err != nil {
			return fmt.Errorf("listing SafeJobs: %w", err)
		}
		view, finished := render(list.Items, samples)
		if view != last {
			if live && last != "" {
				fmt.Printf("\033[%dA", strings.Count(last, "\n"))
			}
			fmt.Print(view)
			last = view
		}
		if finished == len(samples) {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx) //nolint:wrapcheck // cancellation is reported as is
		case <-tick.C:
		}
	}
}

func render(items []batchv1alpha1.SafeJob, samples []string) (string, int) {
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(w, "SAFEJOB\tCOMPLETIONS\tACTIVE\tREADY\tFAILED\tLEDGER SEQ\tSTATE\t")
	finished := 0
	for _, sj := range items {
		state := "Running"
		for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed, batchv1alpha1.ConditionSuspended} {
			for _, c := range sj.Status.Conditions {
				if c.Type == t && c.Status == metav1.ConditionTrue {
					state = t
				}
			}
		}
		done := state == batchv1alpha1.ConditionComplete || state == batchv1alpha1.ConditionFailed
		if sj.Spec.Schedule != nil {
			state = "Scheduled " + *sj.Spec.Schedule
			if t := sj.Status.LastSuccessfulTime; t != nil {
				state += ", last run OK at " + t.Format(time.TimeOnly)
			}
			done = sj.Status.LastSuccessfulTime != nil
		}
		if done && slices.Contains(samples, sj.Name) {
			finished++
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", sj.Name, sj.Status.Completions, sj.Status.Active,
			sj.Status.Ready, sj.Status.Failed, sj.Status.Ledger.Seq, state)
	}
	_ = w.Flush()
	return b.String(), finished
}
