package main

import (
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/safejob/safejob/internal/plugin"
)

// whyCmd is why: whether a SafeJob progresses, and if not why, in its
// output and its exit code.
func (o *options) whyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "why NAME | job/NAME",
		ValidArgsFunction: o.completeNames,
		Short:             "Say why a SafeJob is not progressing; exit code 0 when it progresses or has finished, 2 when it waits",
		Long: `why reads a SafeJob's spec, conditions and ledger and says whether it is
Progressing, Finished or Waiting, with the reasons, most important first:
NotObserved (no operator has written its status: is one running?),
LedgerInvalid, Suspended, WaitingForAdmission or Deactivated (Kueue),
CreatesRefused, Scheduling, Backoff, Deadline; Running or Starting when it
progresses. docs/troubleshooting.md says what each means and its fix.

The exit code is 0 when it progresses or has finished, 2 when it waits and
1 on an error, so scripts can wait on it. job/NAME asks about a batch/v1
Job that SafeJob manages, through its ledger.`,
		Example: `  # Why SafeJob etl does not progress
  kubectl safejob why etl

  # The first reason alone
  kubectl safejob why etl -o jsonpath='{.reasons[0].kind}'

  # In a script: go on only if it is not stuck
  kubectl safejob why etl >/dev/null || echo "etl waits (exit $?)"

  # A batch/v1 Job that SafeJob manages
  kubectl safejob why job/report`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sj, job, err := o.target(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var verdict *plugin.Verdict
			if job != nil {
				verdict = plugin.WhyJob(job, sj, time.Now())
			} else {
				verdict = plugin.Why(sj, time.Now())
			}
			if err := o.print(view{obj: verdict, names: []string{safeJobName(verdict.Name)},
				table: func(w io.Writer, _ plugin.TableOptions) error { return plugin.PrintWhy(w, verdict) }}); err != nil {
				return err
			}
			if verdict.State == plugin.StateWaiting {
				return errNotProgressing
			}
			return nil
		},
	}
	o.addOutput(cmd)
	return cmd
}
