package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/safejob/safejob/internal/plugin"
)

// The output formats -o takes, as kubectl get takes them. The table is the
// default; the formats that take an argument are written FORMAT=ARG.
const (
	outputWide          = "wide"
	outputName          = "name"
	outputJSON          = "json"
	outputYAML          = "yaml"
	outputJSONPath      = "jsonpath"
	outputCustomColumns = "custom-columns"
	outputGoTemplate    = "go-template"
)

// outputFormats are -o's values, for its help and completion.
var outputFormats = []string{outputWide, outputName, outputJSON, outputYAML, outputJSONPath + "=", outputCustomColumns + "=",
	outputGoTemplate + "="}

// printFlags are -o and --no-headers.
type printFlags struct {
	output    string
	noHeaders bool
}

func (p *printFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&p.output, "output", "o", "",
		"Output format: wide, name, json, yaml, jsonpath=TEMPLATE, custom-columns=SPEC or go-template=TEMPLATE (default: a table)")
	cmd.Flags().BoolVar(&p.noHeaders, "no-headers", false, "Print no header or summary lines before a table's rows")
	complete := cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace)
	_ = cmd.RegisterFlagCompletionFunc("output", complete)
}

// validate refuses an unknown -o before the command reads anything.
func (p *printFlags) validate() error {
	format, arg, hasArg := strings.Cut(p.output, "=")
	switch format {
	case "", outputWide, outputName, outputJSON, outputYAML:
		if hasArg {
			return fmt.Errorf("-o %s takes no argument", format)
		}
		return nil
	case outputJSONPath, outputCustomColumns, outputGoTemplate:
		if arg == "" {
			return fmt.Errorf("-o %s needs a template: -o %s=TEMPLATE", format, format)
		}
		return nil
	}
	return fmt.Errorf("unknown output format %q: one of %s", p.output, strings.Join(outputFormats, ", "))
}

// view is what a command prints, for each output format.
type view struct {
	// obj is printed by json, yaml, jsonpath and go-template.
	obj any
	// rows are custom-columns' rows, one each (nil: obj alone).
	rows []any
	// names are name's lines, as kubectl prints them: KIND.GROUP/NAME.
	names []string
	// table writes the table, and with Wide its wide form.
	table func(io.Writer, plugin.TableOptions) error
}

// safeJobName is how -o name names a SafeJob, as kubectl does.
func safeJobName(name string) string { return "safejob.batch.safejob.dev/" + name }

// safeJobNames are -o name's lines for items, each a SafeJob that name
// names.
func safeJobNames[T any](items []T, name func(T) string) []string {
	names := make([]string, len(items))
	for k, item := range items {
		names[k] = safeJobName(name(item))
	}
	return names
}

// asRows is items as custom-columns' rows, one each. It is never nil, so
// that no items print no rows rather than obj as one.
func asRows[T any](items []T) []any {
	rows := make([]any, len(items))
	for k, item := range items {
		rows[k] = item
	}
	return rows
}

// itemList is items as kubectl prints a list: a v1 List.
func itemList(items []any) map[string]any {
	if items == nil {
		items = []any{}
	}
	return map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}, "items": items}
}

// print writes v as -o asks.
func (p *printFlags) print(w io.Writer, v view) error {
	format, arg, _ := strings.Cut(p.output, "=")
	switch format {
	case "", outputWide:
		return v.table(w, plugin.TableOptions{Wide: format == outputWide, NoHeaders: p.noHeaders})
	case outputName:
		for _, name := range v.names {
			if _, err := fmt.Fprintln(w, name); err != nil {
				return err //nolint:wrapcheck // a failed write to stdout says enough
			}
		}
		return nil
	case outputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "    ") // as kubectl -o json indents
		if err := enc.Encode(v.obj); err != nil {
			return fmt.Errorf("writing JSON: %w", err)
		}
		return nil
	case outputYAML:
		b, err := yaml.Marshal(v.obj)
		if err != nil {
			return fmt.Errorf("writing YAML: %w", err)
		}
		_, err = w.Write(b)
		return err //nolint:wrapcheck // a failed write to stdout says enough
	case outputJSONPath, outputGoTemplate:
		return printTemplate(w, format, arg, v.obj)
	case outputCustomColumns:
		rows := v.rows
		if rows == nil {
			rows = []any{v.obj}
		}
		return printColumns(w, arg, rows, p.noHeaders)
	}
	return p.validate()
}

// printTemplate writes obj through a JSONPath or a Go template, as kubectl
// -o jsonpath=TEMPLATE and -o go-template=TEMPLATE do.
func printTemplate(w io.Writer, format, tmpl string, obj any) error {
	unstructuredObj, err := asUnstructured(obj)
	if err != nil {
		return err
	}
	var printer printers.ResourcePrinter
	if format == outputJSONPath {
		jp, err := printers.NewJSONPathPrinter(tmpl)
		if err != nil {
			return fmt.Errorf("reading -o jsonpath: %w", err)
		}
		jp.AllowMissingKeys(true)
		printer = jp
	} else {
		gt, err := printers.NewGoTemplatePrinter([]byte(tmpl))
		if err != nil {
			return fmt.Errorf("reading -o go-template: %w", err)
		}
		gt.AllowMissingKeys(true)
		printer = gt
	}
	if err := printer.PrintObj(unstructuredObj, w); err != nil {
		return fmt.Errorf("printing -o %s: %w", format, err)
	}
	return nil
}

// asUnstructured is v as the JSON-shaped object the template printers walk.
func asUnstructured(v any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the output: %w", err)
	}
	object := map[string]any{}
	if err := json.Unmarshal(b, &object); err != nil {
		return nil, fmt.Errorf("encoding the output: %w", err)
	}
	return &unstructured.Unstructured{Object: object}, nil
}

// relaxedPath is a column's JSONPath as kubectl takes it: {.a.b}, .a.b or a.b.
var relaxedPath = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// column is one of -o custom-columns' columns.
type column struct {
	header string
	path   *jsonpath.JSONPath
}

// parseColumns reads -o custom-columns=HEADER:PATH,...
func parseColumns(spec string) ([]column, error) {
	var columns []column
	for part := range strings.SplitSeq(spec, ",") {
		header, expr, ok := strings.Cut(part, ":")
		if !ok || header == "" || expr == "" {
			return nil, fmt.Errorf("-o custom-columns: %q is not HEADER:JSONPATH", part)
		}
		match := relaxedPath.FindStringSubmatch(expr)
		if match == nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %q is not a JSONPath such as .name", header, expr)
		}
		jp := jsonpath.New(header).AllowMissingKeys(true)
		if err := jp.Parse("{." + match[1] + match[2] + "}"); err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %w", header, err)
		}
		columns = append(columns, column{header: header, path: jp})
	}
	return columns, nil
}

// cell is what a column shows of obj: its values, comma-separated, or
// <none>.
func (c column) cell(obj map[string]any) (string, error) {
	results, err := c.path.FindResults(obj)
	if err != nil {
		return "", fmt.Errorf("-o custom-columns: column %s: %w", c.header, err)
	}
	var cell bytes.Buffer
	for _, r := range results {
		for i, val := range r {
			if i > 0 {
				cell.WriteString(",")
			}
			if err := c.path.PrintResults(&cell, []reflect.Value{val}); err != nil {
				return "", fmt.Errorf("-o custom-columns: column %s: %w", c.header, err)
			}
		}
	}
	if cell.Len() == 0 {
		return "<none>", nil
	}
	return cell.String(), nil
}

// printColumns writes rows as kubectl -o custom-columns=HEADER:PATH,... does:
// a column per spec, <none> where a row has no value.
func printColumns(w io.Writer, spec string, rows []any, noHeaders bool) error {
	columns, err := parseColumns(spec)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !noHeaders {
		headers := make([]string, len(columns))
		for k, c := range columns {
			headers[k] = c.header
		}
		if _, err := fmt.Fprintln(tw, strings.Join(headers, "\t")); err != nil {
			return err //nolint:wrapcheck // a failed write to stdout says enough
		}
	}
	for _, row := range rows {
		obj, err := asUnstructured(row)
		if err != nil {
			return err
		}
		cells := make([]string, len(columns))
		for k, c := range columns {
			if cells[k], err = c.cell(obj.Object); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintln(tw, strings.Join(cells, "\t")); err != nil {
			return err //nolint:wrapcheck // a failed write to stdout says enough
		}
	}
	return tw.Flush() //nolint:wrapcheck // a failed write to stdout says enough
}
