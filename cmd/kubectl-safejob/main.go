// Command kubectl-safejob is the kubectl plugin of SafeJob: `kubectl
// safejob ledger|why|runs|run|top|convert|release|uninstall`. Install it on PATH (`go install
// ./cmd/kubectl-safejob` or `make plugin`) and kubectl finds it.
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
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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

// The output formats -o takes.
const (
	outputJSON = "json"
	outputYAML = "yaml"
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
	output  string
	streams genericiooptions.IOStreams
}

func newRoot(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	root := &cobra.Command{
		Use:           "kubectl-safejob",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl safejob"},
		Short:         "Read SafeJobs' ledgers, see why one waits, run schedules, convert batch/v1 Jobs, uninstall SafeJob",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.flags.AddFlags(root.PersistentFlags())
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(o.ledgerCmd(), o.whyCmd(), o.runsCmd(), o.runCmd(), o.topCmd(), o.convertCmd(),
		o.releaseCmd(), o.uninstallCmd())
	return root
}

func (o *options) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (default: text)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputJSON, outputYAML}, cobra.ShellCompDirectiveNoFileComp))
}

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

// print writes v as JSON or YAML when -o asks, or calls text.
func (o *options) print(v any, text func(io.Writer) error) error {
	switch o.output {
	case "":
		return text(o.streams.Out)
	case outputJSON:
		enc := json.NewEncoder(o.streams.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("writing JSON: %w", err)
		}
		return nil
	case outputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("writing YAML: %w", err)
		}
		_, err = o.streams.Out.Write(b)
		return err //nolint:wrapcheck // a failed write to stdout says enough
	default:
		return fmt.Errorf("unknown output format %q: json or yaml", o.output)
	}
}

func (o *options) ledgerCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:               "ledger NAME",
		Short:             "Show a SafeJob's ledger: its totals and every listed entry (seq, time, type, index, attempt, pod, reason)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow {
				return o.watchLedger(cmd.Context(), args[0])
			}
			sj, err := o.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			v, err := plugin.Ledger(sj)
			if err != nil {
				return err //nolint:wrapcheck // it names the SafeJob
			}
			return o.print(v, func(w io.Writer) error { return plugin.PrintLedger(w, v) })
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
		Use:               "why NAME",
		ValidArgsFunction: o.completeNames,
		Short:             "Say why a SafeJob is not progressing; exit code 0 when it progresses or has finished, 2 when it waits",
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sj, err := o.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			v := plugin.Why(sj, time.Now())
			if err := o.print(v, func(w io.Writer) error { return plugin.PrintWhy(w, v) }); err != nil {
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
		Args:              cobra.ExactArgs(1),
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
			return o.print(v, func(w io.Writer) error { return plugin.PrintRuns(w, v) })
		},
	}
	o.addOutput(cmd)
	return cmd
}

func (o *options) runCmd() *cobra.Command {
	var name string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "run PARENT",
		ValidArgsFunction: o.completeNames,
		Short: "Start a run of a scheduled SafeJob now, as kubectl create job --from=cronjob/PARENT: " +
			"the parent records it in its ledger, then creates it, once",
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
			return o.print(started, func(w io.Writer) error { return plugin.PrintStarted(w, started) })
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "The run's name (default: PARENT-manual-<five random letters>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "How long to wait for the parent to record the run")
	o.addOutput(cmd)
	return cmd
}

func (o *options) topCmd() *cobra.Command {
	var interval time.Duration
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live counts of the namespace's SafeJobs (completions per second, active, ready, failed), refreshed in place",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, ns, err := o.client()
			if err != nil {
				return err
			}
			terminal := isTerminal(o.streams.Out)
			var prev map[string]int32
			last := time.Time{}
			for {
				var list batchv1alpha1.SafeJobList
				if err := cl.List(cmd.Context(), &list, client.InNamespace(ns)); err != nil {
					return fmt.Errorf("listing SafeJobs: %w", err)
				}
				now := time.Now()
				var rows []plugin.TopRow
				rows, prev = plugin.Top(list.Items, prev, now.Sub(last))
				last = now
				if terminal && !once {
					_, _ = io.WriteString(o.streams.Out, "\x1b[H\x1b[2J") // clear the screen, cursor home
				}
				if err := o.print(rows, func(w io.Writer) error { return plugin.PrintTop(w, rows) }); err != nil {
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

func (o *options) convertCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "convert -f FILE",
		Short: "Convert batch/v1 Job and CronJob manifests (one or many documents; -f - reads stdin) into SafeJob manifests",
		Args:  cobra.NoArgs,
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
			if o.output == outputJSON {
				var list []map[string]any
				for _, sj := range out {
					m, err := manifestMap(sj)
					if err != nil {
						return err
					}
					list = append(list, m)
				}
				return o.print(list, nil)
			}
			for k, sj := range out {
				b, err := manifest(sj)
				if err != nil {
					return err
				}
				if k > 0 {
					b = append([]byte("---\n"), b...)
				}
				if _, err := o.streams.Out.Write(b); err != nil {
					return err //nolint:wrapcheck // a failed write to stdout says enough
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "The manifests to convert (- for stdin)")
	_ = cmd.MarkFlagRequired("filename")
	o.addOutput(cmd)
	return cmd
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

func manifest(sj *batchv1alpha1.SafeJob) ([]byte, error) {
	m, err := manifestMap(sj)
	if err != nil {
		return nil, err
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("writing YAML: %w", err)
	}
	return b, nil
}
