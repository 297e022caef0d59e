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

// The seqs showAppended returns besides a ledger's: it has shown nothing
// yet, or the SafeJob is gone.
const (
	nothingShown   int64 = -1
	safeJobDeleted int64 = -2
)

// watchLedger prints a SafeJob's ledger summary and entries, then every
// entry appended after them, until interrupted or the SafeJob is deleted.
// A watch the API server ends is started again; entries are shown by seq,
// so none is shown twice, and entries folded before they were seen are said.
func (o *options) watchLedger(ctx context.Context, name string) error {
	if format := o.outputFlags.output; format != "" && format != outputJSON && format != outputYAML {
		return fmt.Errorf("--watch prints a table, -o json or -o yaml, not -o %s", format)
	}
	cfg, err := o.kubeFlags.ToRESTConfig()
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
	shown := nothingShown
	for ctx.Err() == nil {
		watcher, err := cl.Watch(ctx, &batchv1alpha1.SafeJobList{}, client.InNamespace(ns),
			client.MatchingFields{"metadata.name": name})
		if err != nil {
			return fmt.Errorf("watching SafeJob %s/%s: %w", ns, name, err)
		}
		shown, err = o.showAppended(ctx, watcher, shown)
		watcher.Stop()
		if err != nil || shown == safeJobDeleted {
			return err
		}
	}
	return nil
}

// showAppended prints what each event of watcher adds to the ledger after
// seq shown (nothingShown: the summary comes first) and returns the last seq
// shown, safeJobDeleted once the SafeJob is deleted.
func (o *options) showAppended(ctx context.Context, watcher watch.Interface, shown int64) (int64, error) {
	for ev := range watcher.ResultChan() {
		switch ev.Type {
		case watch.Deleted:
			_, _ = fmt.Fprintln(o.streams.ErrOut, "The SafeJob was deleted.")
			return safeJobDeleted, nil
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
		ledgerView, err := plugin.Ledger(sj)
		if err != nil {
			return shown, err //nolint:wrapcheck // it names the SafeJob
		}
		if shown < 0 {
			if o.outputFlags.output == "" && !o.outputFlags.noHeaders {
				if err := plugin.PrintLedgerSummary(o.streams.Out, ledgerView); err != nil {
					return shown, err //nolint:wrapcheck // a failed write to stdout says enough
				}
				if err := plugin.PrintWatchHeader(o.streams.Out); err != nil {
					return shown, err //nolint:wrapcheck // a failed write to stdout says enough
				}
			}
			shown = 0
		}
		entries, folded := plugin.NewEntries(ledgerView, max(shown, 0))
		if err := o.printAppended(entries, folded && shown > 0, ledgerView); err != nil {
			return shown, err
		}
		shown = max(shown, ledgerView.Seq)
	}
	return shown, nil
}

// printAppended prints entries in the --watch form of -o.
func (o *options) printAppended(entries []plugin.Entry, folded bool, ledgerView *plugin.LedgerView) error {
	if o.outputFlags.output == "" {
		foldedSeq := int64(0)
		if ledgerView.Folded != nil {
			foldedSeq = ledgerView.Folded.Seq
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

// printLine writes item as one line of JSON (-o json) or one YAML document.
func (o *options) printLine(item any) error {
	if o.outputFlags.output == outputJSON {
		b, err := json.Marshal(item)
		if err != nil {
			return fmt.Errorf("writing JSON: %w", err)
		}
		_, err = fmt.Fprintf(o.streams.Out, "%s\n", b)
		return err //nolint:wrapcheck // a failed write to stdout says enough
	}
	b, err := yaml.Marshal(item)
	if err != nil {
		return fmt.Errorf("writing YAML: %w", err)
	}
	_, err = fmt.Fprintf(o.streams.Out, "---\n%s", b)
	return err //nolint:wrapcheck // a failed write to stdout says enough
}
