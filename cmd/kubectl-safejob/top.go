package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
)

// topCmd is top: the namespace's SafeJobs and their rates, sampled again
// every --interval.
func (o *options) topCmd() *cobra.Command {
	var interval time.Duration
	var once, allNamespaces bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live counts of the namespace's SafeJobs (completions per second, active, ready, failed), refreshed in place",
		Long: `top lists the SafeJobs of the namespace, or of every namespace with -A,
with their counts from status (completions, active, ready, succeeded,
failed), how many completions a second each made since the previous
sample, and its state (Running, Scheduled, Suspended, Complete, Failed).
On a terminal it refreshes in place every --interval; --once prints one
sample. Its -o json and yaml print a List of rows.`,
		Example: `  # Watch the SafeJobs of the current namespace
  kubectl safejob top

  # One sample of every namespace, with completion mode and parallelism
  kubectl safejob top -A --once -o wide

  # The SafeJobs that failed, by namespace
  kubectl safejob top -A --once -o jsonpath='{range .items[?(@.state=="Failed")]}{.namespace}/{.name}{"\n"}{end}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ns, err := o.client()
			if err != nil {
				return err
			}
			var opts []client.ListOption
			if !allNamespaces {
				opts = append(opts, client.InNamespace(ns))
			}
			terminal := isTerminal(o.streams.Out)
			var prevSample map[string]int32
			lastSampleAt := time.Time{}
			for {
				var list batchv1alpha1.SafeJobList
				if err := cl.List(cmd.Context(), &list, opts...); err != nil {
					return fmt.Errorf("listing SafeJobs: %w", err)
				}
				now := time.Now()
				var rows []plugin.TopRow
				rows, prevSample = plugin.Top(list.Items, prevSample, now.Sub(lastSampleAt))
				lastSampleAt = now
				if terminal && !once {
					_, _ = io.WriteString(o.streams.Out, "\x1b[H\x1b[2J") // clear the screen, cursor home
				}
				items := asRows(rows)
				names := safeJobNames(rows, func(r plugin.TopRow) string { return r.Name })
				if err := o.print(view{obj: itemList(items), rows: items, names: names,
					table: func(w io.Writer, t plugin.TableOptions) error { return plugin.PrintTop(w, rows, allNamespaces, t) }}); err != nil {
					return err
				}
				if once {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the SafeJobs of every namespace")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "How often to refresh")
	cmd.Flags().BoolVar(&once, "once", false, "Print one sample and exit")
	o.addOutput(cmd)
	return cmd
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
