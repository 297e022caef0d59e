package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/safejob/safejob/internal/plugin"
)

// ledgerCmd is ledger: a SafeJob's ledger, or with --watch its entries as
// they are appended (watch.go).
func (o *options) ledgerCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:               "ledger NAME | job/NAME",
		Short:             "Show a SafeJob's ledger: its totals and every listed entry (seq, time, type, index, attempt, pod, reason)",
		ValidArgsFunction: o.completeNames,
		Long: `ledger shows what a SafeJob's ledger (status.ledger) records: a line of
totals, then one row per entry, oldest first. A SafeJob launches each pod
by appending a Launched entry and records each pod's outcome (Succeeded,
Failed, Lost, Evicted) once; its counts are read from these entries. Old
entries may be folded into the checkpoint, whose totals the first line
includes. A schedule's ledger lists its runs instead (see also runs).

job/NAME shows the ledger of a batch/v1 Job that SafeJob manages
(spec.managedBy: batch.safejob.dev/safejob-controller).`,
		Example: `  # The ledger of SafeJob etl in the current namespace
  kubectl safejob ledger etl

  # Follow it: each entry as it is appended, until Ctrl-C
  kubectl safejob ledger etl --watch

  # The ledger of Job report, which SafeJob manages
  kubectl safejob ledger job/report

  # The pods that failed, and why
  kubectl safejob ledger etl -o jsonpath='{range .entries[?(@.type=="Failed")]}{.pod}{"\t"}{.reason}{"\n"}{end}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sj, job, err := o.target(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if sj == nil {
				return fmt.Errorf("the Job %s/%s has no ledger yet (see kubectl safejob why job/%s)", job.Namespace, job.Name, job.Name)
			}
			if follow {
				return o.watchLedger(cmd.Context(), sj.Name)
			}
			ledgerView, err := plugin.Ledger(sj)
			if err != nil {
				return err //nolint:wrapcheck // it names the SafeJob
			}
			return o.print(view{obj: ledgerView, rows: asRows(ledgerView.Entries), names: []string{safeJobName(ledgerView.Name)},
				table: func(w io.Writer, t plugin.TableOptions) error { return plugin.PrintLedger(w, ledgerView, t) }})
		},
	}
	cmd.Flags().BoolVarP(&follow, "watch", "w", false,
		"After the summary, print each entry as it is appended (-o json: one entry per line) until interrupted")
	o.addOutput(cmd)
	return cmd
}
