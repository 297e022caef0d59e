package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/safejob/safejob/internal/plugin"
)

type row struct {
	Name   string `json:"name"`
	Result string `json:"result,omitempty"`
	Count  int    `json:"count"`
}

func testView() view {
	rows := []any{row{Name: "a", Result: "Succeeded", Count: 2}, row{Name: "b", Count: 1}}
	return view{obj: itemList(rows), rows: rows, names: []string{safeJobName("a"), safeJobName("b")},
		table: func(w io.Writer, o plugin.TableOptions) error {
			if !o.NoHeaders {
				_, _ = io.WriteString(w, "NAME\n")
			}
			if o.Wide {
				_, _ = io.WriteString(w, "a wide\nb wide\n")
				return nil
			}
			_, _ = io.WriteString(w, "a\nb\n")
			return nil
		}}
}

// TestPrintFormats: every -o kubectl get takes prints the view as kubectl
// would.
func TestPrintFormats(t *testing.T) {
	for _, tc := range []struct {
		output    string
		noHeaders bool
		want      string
	}{
		{output: "", want: "NAME\na\nb\n"},
		{output: "", noHeaders: true, want: "a\nb\n"},
		{output: "wide", want: "NAME\na wide\nb wide\n"},
		{output: "name", want: "safejob.batch.safejob.dev/a\nsafejob.batch.safejob.dev/b\n"},
		{output: "jsonpath={.items[*].name}", want: "a b"},
		{output: `jsonpath={range .items[*]}{.name}={.result}{"\n"}{end}`, want: "a=Succeeded\nb=\n"},
		{output: "go-template={{range .items}}{{.name}}:{{.count}} {{end}}", want: "a:2 b:1 "},
		{output: "custom-columns=NAME:.name,RESULT:{.result},N:count", want: "NAME  RESULT     N\na     Succeeded  2\nb     <none>     1\n"},
		{output: "custom-columns=NAME:.name", noHeaders: true, want: "a\nb\n"},
		{output: "yaml", want: "apiVersion: v1\nitems:\n- count: 2\n  name: a\n  result: Succeeded\n- count: 1\n  name: b\nkind: List\nmetadata: {}\n"},
	} {
		p := printFlags{output: tc.output, noHeaders: tc.noHeaders}
		if err := p.validate(); err != nil {
			t.Errorf("-o %s: %v", tc.output, err)
			continue
		}
		var b bytes.Buffer
		if err := p.print(&b, testView()); err != nil {
			t.Errorf("-o %s: %v", tc.output, err)
			continue
		}
		if diff := cmp.Diff(tc.want, b.String()); diff != "" {
			t.Errorf("-o %s --no-headers=%t (-want,+got):\n%s", tc.output, tc.noHeaders, diff)
		}
	}
	var b bytes.Buffer
	p := printFlags{output: "json"}
	if err := p.print(&b, testView()); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []row  `json:"items"`
	}
	if err := json.Unmarshal(b.Bytes(), &list); err != nil || list.Kind != "List" || len(list.Items) != 2 || list.Items[0].Count != 2 {
		t.Errorf("-o json: %v\n%s", err, b.String())
	}
}

// TestPrintFormatRefused: an unknown -o, or one that lacks or wrongly has
// an argument, is refused before anything is read, naming it.
func TestPrintFormatRefused(t *testing.T) {
	for output, want := range map[string]string{
		"table":           `unknown output format "table"`,
		"jsonpath":        "-o jsonpath needs a template",
		"custom-columns=": "-o custom-columns needs a template",
		"json=x":          "-o json takes no argument",
	} {
		p := printFlags{output: output}
		if err := p.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-o %s: %v, want %q", output, err, want)
		}
	}
	for output, want := range map[string]string{
		"custom-columns=NAME":       `"NAME" is not HEADER:JSONPATH`,
		"custom-columns=NAME:{.a}}": "is not a JSONPath",
		"jsonpath={.a":              "reading -o jsonpath",
	} {
		p := printFlags{output: output}
		if err := p.print(io.Discard, testView()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-o %s: %v, want %q", output, err, want)
		}
	}
}

// run runs the plugin with args and stdin, as kubectl would, and returns
// what it printed and its error.
func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRoot(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: io.Discard})
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

const jobs = `apiVersion: batch/v1
kind: Job
metadata: {name: one}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: c, image: i}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: two}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: c, image: i}]}}
`

// TestConvertOutputs: convert writes YAML documents by default, and a v1
// List for -o json and -o yaml, which kubectl apply -f - takes.
func TestConvertOutputs(t *testing.T) {
	out, err := run(t, jobs, "convert", "-f", "-")
	if err != nil || strings.Count(out, "kind: SafeJob") != 2 || strings.Count(out, "\n---\n") != 1 {
		t.Errorf("convert: %v\n%s", err, out)
	}
	out, err = run(t, jobs, "convert", "-f", "-", "-o", "json")
	var list struct {
		APIVersion, Kind string
		Items            []struct {
			Kind     string
			Metadata struct{ Name string }
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != 2 ||
		list.Items[1].Kind != "SafeJob" || list.Items[1].Metadata.Name != "two" {
		t.Errorf("convert -o json: %v\n%s", err, out)
	}
	out, err = run(t, jobs, "convert", "-f", "-", "-o", "name")
	if err != nil || out != "safejob.batch.safejob.dev/one\nsafejob.batch.safejob.dev/two\n" {
		t.Errorf("convert -o name: %v\n%s", err, out)
	}
	if _, err := run(t, "", "convert", "-f", "-", "-o", "xml"); err == nil || !strings.Contains(err.Error(), `unknown output format "xml"`) {
		t.Errorf("convert -o xml: %v", err)
	}
}

// TestCommandsDocumented: every command has a long help and examples, and
// run is run-now's deprecated name.
func TestCommandsDocumented(t *testing.T) {
	root := newRoot(genericiooptions.NewTestIOStreamsDiscard())
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Long == "" || c.Example == "" {
			t.Errorf("%s: Long %t, Example %t", c.CommandPath(), c.Long != "", c.Example != "")
		}
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	walk(root)
	runNow, _, err := root.Find([]string{"run-now"})
	if err != nil || runNow.Name() != "run-now" || runNow.Hidden || runNow.Deprecated != "" {
		t.Errorf("run-now: %v", err)
	}
	old, _, err := root.Find([]string{"run"})
	if err != nil || old.Name() != "run" || !old.Hidden || !strings.Contains(old.Deprecated, "run-now") {
		t.Errorf("run: %v, want run-now's deprecated name", err)
	}
}
