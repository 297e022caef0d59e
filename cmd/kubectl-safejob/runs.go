package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
)

// runsCmd is runs: the runs a scheduled SafeJob's ledger records.
func (o *options) runsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "runs PARENT",
		ValidArgsFunction: o.completeNames,
		Short:             "List the runs of a scheduled SafeJob: scheduled time, result, duration and the times missed before each",
		Long: `runs lists the runs a scheduled SafeJob (spec.schedule) has recorded in its
ledger, oldest first: each run's name, whether the schedule or a person
started it (run-now), its scheduled time, its result as the ledger records
it (Running, Succeeded, Failed, Lost, Evicted), its duration and how many
scheduled times were missed just before it. Runs folded into the
checkpoint are counted on the first line.`,
		Example: `  # The runs of schedule nightly
  kubectl safejob runs nightly

  # The names of its runs that failed
  kubectl safejob runs nightly -o jsonpath='{range .runs[?(@.result=="Failed")]}{.name}{"\n"}{end}'

  # Only name and result
  kubectl safejob runs nightly -o custom-columns=RUN:.name,RESULT:.result`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			parent, err := o.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			cl, ns, err := o.client()
			if err != nil {
				return err
			}
			children, err := listRuns(cmd.Context(), cl, ns, parent)
			if err != nil {
				return err
			}
			runsView, err := plugin.Runs(parent, children)
			if err != nil {
				return err //nolint:wrapcheck // it names the SafeJob
			}
			names := safeJobNames(runsView.Runs, func(r plugin.RunView) string { return r.Name })
			return o.print(view{obj: runsView, rows: asRows(runsView.Runs), names: names,
				table: func(w io.Writer, t plugin.TableOptions) error { return plugin.PrintRuns(w, runsView, t) }})
		},
	}
	o.addOutput(cmd)
	return cmd
}

// runNowCmd is run-now, or under the name run the same command, deprecated.
func (o *options) runNowCmd(use string) *cobra.Command {
	var name string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               use + " PARENT",
		ValidArgsFunction: o.completeNames,
		Short: "Start a run of a scheduled SafeJob now, as kubectl create job --from=cronjob/PARENT: " +
			"the parent records it in its ledger, then creates it, once",
		Long: `run-now asks a scheduled SafeJob for a run now, outside its schedule, as
kubectl create job --from=cronjob/PARENT does for a CronJob. It sets the
parent's annotation batch.safejob.dev/run-now to the run's name; the
operator records the run in the parent's ledger, then creates it, exactly
once, whatever happens meanwhile. run-now waits until the run is recorded
and prints it. It refuses while an earlier request has not started, and a
name the parent has a run of already.

The run counts toward the parent's history limits like any other, and its
concurrencyPolicy applies: under Forbid it waits for the active run.`,
		Example: `  # Run schedule nightly now
  kubectl safejob run-now nightly

  # With a name of your choosing
  kubectl safejob run-now nightly --name nightly-rerun-1

  # Then follow it
  kubectl safejob ledger nightly-rerun-1 --watch`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cl, ns, err := o.client()
			if err != nil {
				return err
			}
			if name == "" {
				name = plugin.ManualRunName(args[0], rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))) //nolint:gosec // a name, not a secret
			}
			parent, err := askForRun(ctx, cl, ns, args[0], name)
			if err != nil {
				return err
			}
			started, err := awaitRecorded(ctx, cl, ns, parent, name, timeout)
			if err != nil {
				return err
			}
			return o.print(view{obj: started, names: []string{safeJobName(started.Name)},
				table: func(w io.Writer, _ plugin.TableOptions) error { return plugin.PrintStarted(w, started) }})
		},
	}
	if use != "run-now" {
		cmd.Hidden = true
		cmd.Deprecated = "use run-now"
		cmd.Example = strings.ReplaceAll(cmd.Example, "run-now", use)
	}
	cmd.Flags().StringVar(&name, "name", "", "The run's name (default: PARENT-manual-<five random letters>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "How long to wait for the parent to record the run")
	o.addOutput(cmd)
	return cmd
}

// askForRun checks that parent may be asked for run name and asks it. The
// request holds the version it was checked on, so a write that lands
// between the check and the request (the operator's status writes among
// them) fails it; it is then checked again on the newer parent, as
// kubectl's own read-modify-write commands retry a conflict.
func askForRun(ctx context.Context, cl client.Client, ns, parentName, name string) (*batchv1alpha1.SafeJob, error) {
	var parent *batchv1alpha1.SafeJob
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		parent = &batchv1alpha1.SafeJob{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: parentName}, parent); err != nil {
			return fmt.Errorf("getting SafeJob %s/%s: %w", ns, parentName, err)
		}
		children, err := listRuns(ctx, cl, ns, parent)
		if err != nil {
			return err
		}
		if err := plugin.CheckRunRequest(parent, children, name); err != nil {
			return err //nolint:wrapcheck // it names the SafeJob
		}
		return requestRun(ctx, cl, parent, name)
	})
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("SafeJob %s/%s kept changing while the run was asked for; try again", ns, parentName)
	}
	if err != nil {
		return nil, err //nolint:wrapcheck // each step names the SafeJob
	}
	return parent, nil
}

// requestRun asks the parent for run name: it sets the parent's
// RunNowAnnotation. The request holds the version it was checked on: a
// request or run that lands meanwhile makes it fail with a conflict rather
// than replace it.
func requestRun(ctx context.Context, cl client.Client, parent *batchv1alpha1.SafeJob, name string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": parent.ResourceVersion,
		"annotations":     map[string]string{batchv1alpha1.RunNowAnnotation: name},
	}})
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	if err := cl.Patch(ctx, parent, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsConflict(err) {
			return err //nolint:wrapcheck // retried by askForRun, which reads the conflict
		}
		return fmt.Errorf("asking SafeJob %s/%s for run %s: %w", parent.Namespace, parent.Name, name, err)
	}
	return nil
}

// awaitRecorded reads the parent again until its ledger records run name,
// for at most timeout, and returns the run as recorded.
func awaitRecorded(ctx context.Context, cl client.Client, ns string, parent *batchv1alpha1.SafeJob, name string,
	timeout time.Duration) (*plugin.Started, error) {
	var started *plugin.Started
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(parent), parent); err != nil {
			return false, fmt.Errorf("reading SafeJob %s/%s: %w", ns, parent.Name, err)
		}
		started = plugin.RunRecorded(parent, name)
		return started != nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("run %s of SafeJob %s/%s was asked for but not recorded within %s (is the operator running? "+
			"see kubectl describe safejob %s): %w", name, ns, parent.Name, timeout, parent.Name, err)
	}
	return started, nil
}
