package main

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
)

// watchLedger prints a SafeJob's ledger summary and entries, then every
// entry appended after them, until interrupted or the SafeJob is deleted.
// A watch the API server ends is started again; entries are shown by seq,
// so none is shown twice, and entries folded before they were seen are said.
func (o *options) watchLedger(ctx context.Context, name string) error {
	if f := o.out.output; f != "" && f != outputJSON && f != outputYAML {
		return fmt.Errorf("--watch prints a table, -o json or -o yaml, not -o %s", f)
	}
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	_, ns, err := o.client()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("adding the SafeJob types: %w", err)
	}
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	shown := int64(-1) // nothing shown yet
	for ctx.Err() == nil {
		w, err := cl.Watch(ctx, &batchv1alpha1.SafeJobList{}, client.InNamespace(ns),
			client.MatchingFields{"metadata.name": name})
		if err != nil {
			return fmt.Errorf("watching SafeJob %s/%s: %w", ns, name, err)
		}
		shown, err = o.showAppended(ctx, w, shown)
		w.Stop()
		if err != nil || shown == -2 {
			return err
		}
	}
	return nil
}

// showAppended prints what each event of w adds to the ledger after seq
// shown (-1: nothing shown yet, the summary comes first) and returns the
// last seq shown, -2 once the SafeJob is deleted.
func (o *options) showAppended(ctx context.Context, w watch.Interface, shown int64) (int64, error) {
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Deleted:
			_, _ = fmt.Fprintln(o.streams.ErrOut, "The SafeJob was deleted.")
			return -2, nil
		case watch.Error:
			if ctx.Err() != nil {
				return shown, nil // interrupted
			}
			return shown, fmt.Errorf("watching: %w", apierrors.FromObject(ev.Object))
		case watch.Added, watch.Modified:
		default:
			continue
		}
		sj, ok := ev.Object.(*batchv1alpha1.SafeJob)
		if !ok {
			continue
		}
		v, err := plugin.Ledger(sj)
		if err != nil {
			return shown, err //nolint:wrapcheck // it names the SafeJob
		}
		if shown < 0 {
			if o.out.output == "" && !o.out.noHeaders {
				if err := plugin.PrintLedgerSummary(o.streams.Out, v); err != nil {
					return shown, err //nolint:wrapcheck // a failed write to stdout says enough
				}
				if err := plugin.PrintWatchHeader(o.streams.Out); err != nil {
					return shown, err //nolint:wrapcheck // a failed write to stdout says enough
				}
			}
			shown = 0
		}
		entries, folded := plugin.NewEntries(v, max(shown, 0))
		if err := o.printAppended(entries, folded && shown > 0, v); err != nil {
			return shown, err
		}
		shown = max(shown, v.Seq)
	}
	return shown, nil
}

// printAppended prints entries in the --watch form of -o.
func (o *options) printAppended(entries []plugin.Entry, folded bool, v *plugin.LedgerView) error {
	if o.out.output == "" {
		foldedSeq := int64(0)
		if v.Folded != nil {
			foldedSeq = v.Folded.Seq
		}
		return plugin.PrintWatchRows(o.streams.Out, entries, folded, foldedSeq) //nolint:wrapcheck // a failed write to stdout says enough
	}
	for _, e := range entries {
		if err := o.printLine(e); err != nil {
			return err
		}
	}
	return nil
}

// printLine writes v as one line of JSON (-o json) or one YAML document.
func (o *options) printLine(v any) error {
	if o.out.output == outputJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("writing JSON: %w", err)
		}
		_, err = fmt.Fprintf(o.streams.Out, "%s\n", b)
		return err //nolint:wrapcheck // a failed write to stdout says enough
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("writing YAML: %w", err)
	}
	_, err = fmt.Fprintf(o.streams.Out, "---\n%s", b)
	return err //nolint:wrapcheck // a failed write to stdout says enough
}
