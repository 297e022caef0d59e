package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
)

// convertCmd is convert: batch/v1 Job and CronJob manifests as the
// SafeJobs that run the same.
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
			input := o.streams.In
			if file != "-" {
				f, err := os.Open(file) //nolint:gosec // the user names the file to read
				if err != nil {
					return fmt.Errorf("reading %s: %w", file, err)
				}
				defer func() { _ = f.Close() }()
				input = f
			}
			converted, err := plugin.Convert(input)
			if err != nil {
				return err //nolint:wrapcheck // it names the document and the field
			}
			items := make([]any, 0, len(converted))
			for _, sj := range converted {
				manifest, err := manifestMap(sj)
				if err != nil {
					return err
				}
				items = append(items, manifest)
			}
			names := safeJobNames(converted, func(sj *batchv1alpha1.SafeJob) string { return sj.Name })
			return o.print(view{obj: itemList(items), rows: items, names: names,
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
	for k, manifest := range items {
		b, err := yaml.Marshal(manifest)
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
	manifest, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sj)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", sj.Name, err)
	}
	delete(manifest, "status")
	if metadata, ok := manifest["metadata"].(map[string]any); ok {
		delete(metadata, "creationTimestamp")
	}
	return manifest, nil
}
