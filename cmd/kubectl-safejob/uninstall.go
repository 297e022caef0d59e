package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/internal/plugin"
)

// workloadsServed asks the API server, not a discovery cache, whether it
// serves Kueue's Workloads.
func (o *options) workloadsServed() (bool, error) {
	cfg, err := o.kubeFlags.ToRESTConfig()
	if err != nil {
		return false, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	discoveryClient, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("creating a discovery client: %w", err)
	}
	return plugin.WorkloadsServed(discoveryClient) //nolint:wrapcheck // it says what it asked
}

// clusterClient returns a client and whether Workloads are served.
func (o *options) clusterClient() (client.Client, string, bool, error) {
	cl, ns, err := o.client()
	if err != nil {
		return nil, "", false, err
	}
	workloads, err := o.workloadsServed()
	if err != nil {
		return nil, "", false, err
	}
	return cl, ns, workloads, nil
}

func (o *options) releaseCmd() *cobra.Command {
	var allNamespaces bool
	opts := plugin.ReleaseOptions{}
	cmd := &cobra.Command{
		Use:               "release [NAME]",
		ValidArgsFunction: o.completeNames,
		Short: "Recover a cluster whose operator is gone: remove SafeJob's finalizers from pods, runs and Workloads " +
			"(of SafeJob NAME and its runs, or all), saying first which pods' outcomes are not recorded",
		Long: `Only a running operator removes the finalizers SafeJob puts on the pods it
launches (batch.safejob.dev/ledger), on the runs of schedules
(batch.safejob.dev/run) and on the Kueue Workloads it makes
(kueue.x-k8s.io/resource-in-use). Once the operator is gone, those objects,
and a namespace that holds them, can never be deleted. release removes
those finalizers, each from the object it read and never from one created
since under the same name.

It first lists the pods whose outcome is not recorded in their SafeJob's
ledger: releasing them gives that outcome up. It refuses while the
operator's leader election Lease is fresh, since a running operator
releases them itself once it has recorded each outcome; --force releases
anyway. To remove SafeJob from a cluster whose operator runs, use
kubectl safejob uninstall instead.`,
		Example: `  # See what would be released in every namespace, and which outcomes it gives up
  kubectl safejob release -A --dry-run

  # Release what SafeJob etl and its runs hold in namespace batch
  kubectl safejob release etl -n batch

  # Release everything, although an operator's Lease looks fresh
  kubectl safejob release -A --force`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, ns, workloads, err := o.clusterClient()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				opts.Name = args[0]
				if allNamespaces {
					return fmt.Errorf("a NAME is of one namespace: leave out --all-namespaces")
				}
			}
			if !allNamespaces {
				opts.Namespace = ns
			}
			opts.Workloads, opts.Now = workloads, time.Now()
			return plugin.Release(cmd.Context(), cl, o.streams.Out, opts) //nolint:wrapcheck // it names what failed
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Release in every namespace")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "Say what would be released and change nothing")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "Release even though an operator looks alive (its outcomes not recorded yet are lost)")
	cmd.Flags().StringVar(&opts.OperatorNamespace, "operator-namespace", plugin.DefaultOperatorNamespace,
		"Where to read the operator's Lease when Leases cannot be listed in every namespace")
	return cmd
}

func (o *options) uninstallCmd() *cobra.Command {
	opts := plugin.UninstallOptions{}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove SafeJob safely: delete every SafeJob, wait until the operator has let go of them, then remove the operator",
		Long: `uninstall removes SafeJob from a cluster whose operator runs, in the order
that leaves nothing stuck: it deletes every SafeJob (runs before their
schedules), waits until no SafeJob is left and no pod or Workload holds a
SafeJob finalizer, then deletes the operator's Deployments in
--operator-namespace and, with --delete-crd, the SafeJob CRD and the
admission policies SafeJob ships.

It refuses while SafeJobs run (a schedule runs unless suspended) and lists
them; --stop suspends the schedules first and then deletes every SafeJob,
running or not. If the wait times out it says what is left: if the
operator is gone by then, kubectl safejob release frees it.`,
		Example: `  # Remove SafeJob once every SafeJob has finished
  kubectl safejob uninstall

  # Stop the schedules and the running SafeJobs, then remove SafeJob and its CRD
  kubectl safejob uninstall --stop --delete-crd

  # The operator runs in namespace ops
  kubectl safejob uninstall --operator-namespace ops --timeout 10m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, _, workloads, err := o.clusterClient()
			if err != nil {
				return err
			}
			opts.Workloads, opts.Now = workloads, time.Now()
			return plugin.Uninstall(cmd.Context(), cl, o.streams.Out, opts) //nolint:wrapcheck // it names what failed
		},
	}
	cmd.Flags().BoolVar(&opts.Stop, "stop", false, "Suspend the schedules and delete the SafeJobs that run too")
	cmd.Flags().BoolVar(&opts.DeleteCRD, "delete-crd", false, "Also delete the SafeJob CRD and SafeJob's admission policies")
	cmd.Flags().StringVar(&opts.OperatorNamespace, "operator-namespace", plugin.DefaultOperatorNamespace, "The namespace the operator runs in")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 5*time.Minute, "How long to wait for the operator to let go of the SafeJobs deleted")
	return cmd
}
