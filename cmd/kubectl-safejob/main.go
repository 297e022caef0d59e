// Command kubectl-safejob is the kubectl plugin of SafeJob: `kubectl
// safejob ledger|why|runs|run-now|top|convert|release|uninstall`. Install it on PATH (`go install
// ./cmd/kubectl-safejob`, `make plugin` or krew) and kubectl finds it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/plugin"
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

type options struct {
	flags   *genericclioptions.ConfigFlags
	out     printFlags
	streams genericiooptions.IOStreams
}

func newRoot(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams}
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
	o.flags.AddFlags(root.PersistentFlags())
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(o.ledgerCmd(), o.whyCmd(), o.runsCmd(), o.runNowCmd("run-now"), o.runNowCmd("run"), o.topCmd(),
		o.convertCmd(), o.releaseCmd(), o.uninstallCmd())
	return root
}

// addOutput adds -o and --no-headers, and refuses an unknown -o before the
// command runs.
func (o *options) addOutput(cmd *cobra.Command) {
	o.out.add(cmd)
	cmd.PreRunE = func(*cobra.Command, []string) error { return o.out.validate() }
}

// safeJobName is how -o name names a SafeJob, as kubectl does.
func safeJobName(name string) string { return "safejob.batch.safejob.dev/" + name }

// client returns a client and the namespace the flags name.
func (o *options) client() (client.Client, string, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace: %w", err)
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, "", err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("creating a client: %w", err)
	}
	return cl, ns, nil
}

// newScheme holds the types the commands read: SafeJobs, and for release
// and uninstall the built-in types, Workloads and CRDs.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{batchv1alpha1.AddToScheme, clientgoscheme.AddToScheme,
		kueue.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("adding the types: %w", err)
		}
	}
	return scheme, nil
}

// target reads what NAME names for ledger and why: a SafeJob, or with
// job/NAME a batch/v1 Job managed by SafeJob and its ledger (nil while it
// has none; job is nil for a SafeJob).
func (o *options) target(ctx context.Context, arg string) (sj *batchv1alpha1.SafeJob, job *batchv1.Job, err error) {
	kind, name, ok := strings.Cut(arg, "/")
	if !ok {
		sj, err := o.get(ctx, arg)
		return sj, nil, err
	}
	switch kind {
	case "safejob", "safejobs", "sj", "safejob.batch.safejob.dev":
		sj, err := o.get(ctx, name)
		return sj, nil, err
	case "job", "jobs", "job.batch":
	default:
		return nil, nil, fmt.Errorf("%s: name a SafeJob (NAME or safejob/NAME) or a Job SafeJob manages (job/NAME)", arg)
	}
	cl, ns, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	job = &batchv1.Job{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job); err != nil {
		return nil, nil, fmt.Errorf("getting Job %s/%s: %w", ns, name, err)
	}
	if !batchv1alpha1.ManagesJob(job) {
		return nil, nil, fmt.Errorf("the Job %s/%s is not managed by SafeJob: its spec.managedBy is %q, not %s", ns, name,
			ptr.Deref(job.Spec.ManagedBy, batchv1.JobControllerName), batchv1alpha1.ControllerName)
	}
	found := &batchv1alpha1.SafeJob{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, found); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, job, nil
		}
		return nil, nil, fmt.Errorf("getting the ledger of Job %s/%s: %w", ns, name, err)
	}
	if ref := batchv1alpha1.ManagedJobOf(found); ref == nil || ref.UID != job.UID {
		return nil, job, nil // a SafeJob of the name that is not the Job's ledger: why says so
	}
	return found, job, nil
}

// get reads a SafeJob of the flags' namespace.
func (o *options) get(ctx context.Context, name string) (*batchv1alpha1.SafeJob, error) {
	cl, ns, err := o.client()
	if err != nil {
		return nil, err
	}
	sj := &batchv1alpha1.SafeJob{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sj); err != nil {
		return nil, fmt.Errorf("getting SafeJob %s/%s: %w", ns, name, err)
	}
	return sj, nil
}

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
			v, err := plugin.Ledger(sj)
			if err != nil {
				return err //nolint:wrapcheck // it names the SafeJob
			}
			rows := make([]any, len(v.Entries))
			for k := range v.Entries {
				rows[k] = v.Entries[k]
			}
			return o.out.print(o.streams.Out, view{obj: v, rows: rows, names: []string{safeJobName(v.Name)},
				table: func(w io.Writer, t plugin.TableOptions) error { return plugin.PrintLedger(w, v, t) }})
		},
	}
	cmd.Flags().BoolVarP(&follow, "watch", "w", false,
		"After the summary, print each entry as it is appended (-o json: one entry per line) until interrupted")
	o.addOutput(cmd)
	return cmd
}

// completeNames completes the name of a SafeJob of the namespace.
func (o *options) completeNames(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl, ns, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var list batchv1alpha1.SafeJobList
	if err := cl.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []cobra.Completion
	for _, sj := range list.Items {
		names = append(names, sj.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

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
			var v *plugin.Verdict
			if job != nil {
				v = plugin.WhyJob(job, sj, time.Now())
			} else {
				v = plugin.Why(sj, time.Now())
			}
			if err := o.out.print(o.streams.Out, view{obj: v, names: []string{safeJobName(v.Name)},
				table: func(w io.Writer, _ plugin.TableOptions) error { return plugin.PrintWhy(w, v) }}); err != nil {
				return err
			}
			if v.State == plugin.StateWaiting {
				return errNotProgressing
			}
			return nil
		},
	}
	o.addOutput(cmd)
	return cmd
}

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
			var children batchv1alpha1.SafeJobList
			if err := cl.List(cmd.Context(), &children, client.InNamespace(ns),
				client.MatchingLabels{batchv1alpha1.ParentLabel: ledger.ShortName(parent.Name, 63)}); err != nil {
				return fmt.Errorf("listing the runs of %s: %w", parent.Name, err)
			}
			v, err := plugin.Runs(parent, children.Items)
			if err != nil {
				return err //nolint:wrapcheck // it names the SafeJob
			}
			rows := make([]any, len(v.Runs))
			names := make([]string, len(v.Runs))
			for k, r := range v.Runs {
				rows[k], names[k] = r, safeJobName(r.Name)
			}
			return o.out.print(o.streams.Out, view{obj: v, rows: rows, names: names,
				table: func(w io.Writer, t plugin.TableOptions) error { return plugin.PrintRuns(w, v, t) }})
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
			parent, err := o.get(ctx, args[0])
			if err != nil {
				return err
			}
			if name == "" {
				name = plugin.ManualRunName(parent.Name, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))) //nolint:gosec // a name, not a secret
			}
			var children batchv1alpha1.SafeJobList
			if err := cl.List(ctx, &children, client.InNamespace(ns),
				client.MatchingLabels{batchv1alpha1.ParentLabel: ledger.ShortName(parent.Name, 63)}); err != nil {
				return fmt.Errorf("listing the runs of %s: %w", parent.Name, err)
			}
			if err := plugin.CheckRunRequest(parent, children.Items, name); err != nil {
				return err //nolint:wrapcheck // it names the SafeJob
			}
			// The request holds the version it was checked on: a request or
			// run that lands meanwhile makes it fail rather than replace it.
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": parent.ResourceVersion,
				"annotations":     map[string]string{batchv1alpha1.RunNowAnnotation: name},
			}})
			if err != nil {
				return fmt.Errorf("encoding the request: %w", err)
			}
			if err := cl.Patch(ctx, parent, client.RawPatch(types.MergePatchType, patch)); err != nil {
				if apierrors.IsConflict(err) {
					return fmt.Errorf("SafeJob %s/%s changed while the run was asked for; try again", ns, parent.Name)
				}
				return fmt.Errorf("asking SafeJob %s/%s for run %s: %w", ns, parent.Name, name, err)
			}
			var started *plugin.Started
			err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
				if err := cl.Get(ctx, client.ObjectKeyFromObject(parent), parent); err != nil {
					return false, fmt.Errorf("reading SafeJob %s/%s: %w", ns, parent.Name, err)
				}
				started = plugin.RunRecorded(parent, name)
				return started != nil, nil
			})
			if err != nil {
				return fmt.Errorf("run %s of SafeJob %s/%s was asked for but not recorded within %s (is the operator running? "+
					"see kubectl describe safejob %s): %w", name, ns, parent.Name, timeout, parent.Name, err)
			}
			return o.out.print(o.streams.Out, view{obj: started, names: []string{safeJobName(started.Name)},
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

func (o *options) topCmd() *cobra.Command {
	var interval time.Duration
	var once, all bool
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
			if !all {
				opts = append(opts, client.InNamespace(ns))
			}
			terminal := isTerminal(o.streams.Out)
			var prev map[string]int32
			last := time.Time{}
			for {
				var list batchv1alpha1.SafeJobList
				if err := cl.List(cmd.Context(), &list, opts...); err != nil {
					return fmt.Errorf("listing SafeJobs: %w", err)
				}
				now := time.Now()
				var rows []plugin.TopRow
				rows, prev = plugin.Top(list.Items, prev, now.Sub(last))
				last = now
				if terminal && !once {
					_, _ = io.WriteString(o.streams.Out, "\x1b[H\x1b[2J") // clear the screen, cursor home
				}
				items := make([]any, len(rows))
				names := make([]string, len(rows))
				for k, r := range rows {
					items[k], names[k] = r, safeJobName(r.Name)
				}
				if err := o.out.print(o.streams.Out, view{obj: itemList(items), rows: items, names: names,
					table: func(w io.Writer, t plugin.TableOptions) error { return plugin.PrintTop(w, rows, all, t) }}); err != nil {
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
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List the SafeJobs of every namespace")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "How often to refresh")
	cmd.Flags().BoolVar(&once, "once", false, "Print one sample and exit")
	o.addOutput(cmd)
	return cmd
}

// itemList is items as kubectl prints a list: a v1 List.
func itemList(items []any) map[string]any {
	if items == nil {
		items = []any{}
	}
	return map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}, "items": items}
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

func (o *options) convertCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "convert -f FILE",
		Short: "Convert batch/v1 Job and CronJob manifests (one or many documents; -f - reads stdin) into SafeJob manifests",
		Long: `convert reads batch/v1 Job and CronJob manifests, YAML or JSON, one or many
documents or a List, and writes the SafeJobs that run the same: a Job's
spec as a SafeJob's, a CronJob's jobTemplate as a scheduled SafeJob's, with
names, labels and annotations kept. It refuses, naming the field, what a
SafeJob cannot honour (manualSelector, a selector of its own). Status,
uid and resourceVersion are left out, so the output can be applied as it is.

By default it writes YAML documents; -o json and -o yaml write a v1 List,
which kubectl apply -f - takes too.`,
		Example: `  # Convert a manifest file
  kubectl safejob convert -f job.yaml > safejob.yaml

  # Move a running cluster's CronJob to a scheduled SafeJob
  kubectl get cronjob nightly -o yaml | kubectl safejob convert -f - | kubectl apply -f -

  # Convert every Job of a directory's manifests, as one List
  cat manifests/*.yaml | kubectl safejob convert -f - -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			in := o.streams.In
			if file != "-" {
				f, err := os.Open(file) //nolint:gosec // the user names the file to read
				if err != nil {
					return fmt.Errorf("reading %s: %w", file, err)
				}
				defer func() { _ = f.Close() }()
				in = f
			}
			out, err := plugin.Convert(in)
			if err != nil {
				return err //nolint:wrapcheck // it names the document and the field
			}
			items := make([]any, 0, len(out))
			names := make([]string, 0, len(out))
			for _, sj := range out {
				m, err := manifestMap(sj)
				if err != nil {
					return err
				}
				items, names = append(items, m), append(names, safeJobName(sj.Name))
			}
			return o.out.print(o.streams.Out, view{obj: itemList(items), rows: items, names: names,
				table: func(w io.Writer, _ plugin.TableOptions) error { return writeManifests(w, items) }})
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "The manifests to convert (- for stdin)")
	_ = cmd.MarkFlagRequired("filename")
	o.addOutput(cmd)
	return cmd
}

// writeManifests writes each manifest as a YAML document.
func writeManifests(w io.Writer, items []any) error {
	for k, m := range items {
		b, err := yaml.Marshal(m)
		if err != nil {
			return fmt.Errorf("writing YAML: %w", err)
		}
		if k > 0 {
			b = append([]byte("---\n"), b...)
		}
		if _, err := w.Write(b); err != nil {
			return err //nolint:wrapcheck // a failed write to stdout says enough
		}
	}
	return nil
}

// manifestMap is a SafeJob as a manifest: no status, no empty metadata.
func manifestMap(sj *batchv1alpha1.SafeJob) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sj)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", sj.Name, err)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return m, nil
}
