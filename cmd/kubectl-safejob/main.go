// Command kubectl-safejob is the kubectl plugin of SafeJob: `kubectl
// safejob ledger|why|runs|run-now|top|convert|release|uninstall`. Install it on PATH (`go install
// ./cmd/kubectl-safejob`, `make plugin` or krew) and kubectl finds it.
//
// Each file holds one concern:
//   - main.go: main, the exit codes, and the root command with the flags
//     every command shares.
//   - cluster.go: reading the cluster: the client, and the SafeJob, Job or
//     runs a command's arguments name, with their shell completion.
//   - printers.go: -o and --no-headers: the output formats kubectl get
//     takes, and what each command prints through them (view).
//   - ledger.go: the ledger command.
//   - watch.go: ledger --watch, which follows a ledger as it grows.
//   - why.go: the why command.
//   - runs.go: the runs and run-now commands, of scheduled SafeJobs.
//   - top.go: the top command.
//   - convert.go: the convert command, batch/v1 manifests into SafeJobs.
//   - uninstall.go: the release and uninstall commands, which free or
//     remove SafeJob from a cluster.
//   - kubectl_complete-safejob: the script kubectl runs to complete
//     `kubectl safejob ...` in a shell.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// Exit codes beyond kubectl's 0 (done) and 1 (error).
const (
	// exitNotProgressing: `why` found the SafeJob waiting.
	exitNotProgressing = 2
)

// version is the plugin's release version, set at build time
// (-ldflags "-X main.version=v0.1.0"; hack/release does).
var version = "dev"

// errNotProgressing ends `why` with exitNotProgressing after its output.
var errNotProgressing = errors.New("not progressing")

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	cmd := newRoot(streams)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		if errors.Is(err, errNotProgressing) {
			os.Exit(exitNotProgressing)
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// options are what every command shares: kubectl's flags, the command's
// -o flags and the streams it reads and writes.
type options struct {
	// kubeFlags are kubectl's flags: --kubeconfig, --context, -n, ...
	kubeFlags *genericclioptions.ConfigFlags
	// outputFlags are -o and --no-headers, of the commands that print.
	outputFlags printFlags
	streams     genericiooptions.IOStreams
}

func newRoot(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{kubeFlags: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:         "kubectl-safejob",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl safejob"},
		Short:       "Read SafeJobs' ledgers, see why one waits, run schedules, convert batch/v1 Jobs, uninstall SafeJob",
		Long: `kubectl safejob reads and operates SafeJobs (batch.safejob.dev/v1alpha1):
the ledger each keeps of its pods, why one is not progressing, the runs of
a schedule. It converts batch/v1 Jobs and CronJobs into SafeJobs, and
removes SafeJob from a cluster without leaving anything stuck.

It takes kubectl's flags (--kubeconfig, --context, -n, ...), and the
commands that print take -o as kubectl get does.`,
		Example: `  # Why is my SafeJob not running?
  kubectl safejob why my-job

  # Every pod it launched, and the outcome the ledger recorded
  kubectl safejob ledger my-job

  # Move a batch/v1 Job to SafeJob
  kubectl get job my-job -o yaml | kubectl safejob convert -f - | kubectl apply -f -`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.kubeFlags.AddFlags(root.PersistentFlags())
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(o.ledgerCmd(), o.whyCmd(), o.runsCmd(), o.runNowCmd("run-now"), o.runNowCmd("run"), o.topCmd(),
		o.convertCmd(), o.releaseCmd(), o.uninstallCmd())
	return root
}

// addOutput adds -o and --no-headers, and refuses an unknown -o before the
// command runs.
func (o *options) addOutput(cmd *cobra.Command) {
	o.outputFlags.add(cmd)
	cmd.PreRunE = func(*cobra.Command, []string) error { return o.outputFlags.validate() }
}

// print writes v to the command's output as -o asks.
func (o *options) print(v view) error {
	return o.outputFlags.print(o.streams.Out, v)
}
