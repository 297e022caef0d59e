package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifests is what `kubectl kustomize config/default` writes, cut down to
// the objects the generator treats apart.
const manifests = `apiVersion: v1
kind: Namespace
metadata:
  name: safejob-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: safejob-controller-manager
  namespace: safejob-system
spec:
  replicas: 3
  selector:
    matchLabels:
      app.kubernetes.io/name: safejob
  template:
    metadata:
      labels:
        app.kubernetes.io/name: safejob
    spec:
      containers:
      - name: manager
        image: controller:latest
        args: [--leader-elect]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: safejob-controller-manager
  namespace: safejob-system
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: safejob
`

// TestGenerate: values.yaml's replicas default to the Deployment's, and the
// PodDisruptionBudget becomes a template in the release namespace that
// podDisruptionBudget.enabled turns off.
func TestGenerate(t *testing.T) {
	out := t.TempDir()
	if err := run(strings.NewReader(manifests), out); err != nil {
		t.Fatal(err)
	}
	values := readFile(t, filepath.Join(out, "values.yaml"))
	if !strings.Contains(values, "\nreplicas: 3\n") {
		t.Errorf("values.yaml does not default replicas to the Deployment's 3:\n%s", values)
	}
	pdb := readFile(t, filepath.Join(out, "templates", "poddisruptionbudget-controller-manager.yaml"))
	for _, want := range []string{"{{- if .Values.podDisruptionBudget.enabled }}\n", "namespace: {{ .Release.Namespace }}\n", "{{- end }}\n"} {
		if !strings.Contains(pdb, want) {
			t.Errorf("the PodDisruptionBudget's template has no %q:\n%s", want, pdb)
		}
	}
	noDeployment := manifests[strings.Index(manifests, "apiVersion: policy/v1"):]
	if err := run(strings.NewReader(noDeployment), t.TempDir()); err == nil {
		t.Error("manifests without the operator's Deployment: no error")
	}
}

// TestChartDefaults renders dist/chart as helm would with its values.yaml
// (and values overridden) and checks the high-availability defaults: two
// replicas with leader election on different nodes if they can, a
// PodDisruptionBudget of the manager's pods that a drain of a single
// replica gets past (maxUnavailable: 1, never minAvailable), and room for
// the manager's 20 seconds of draining at shutdown.
func TestChartDefaults(t *testing.T) {
	chart := filepath.Join("..", "..", "dist", "chart")
	objs := renderChart(t, chart, nil)
	deploy, pdb := objs["Deployment"], objs["PodDisruptionBudget"]
	if deploy == nil || pdb == nil {
		t.Fatalf("the chart renders Deployment %v and PodDisruptionBudget %v, want both", deploy != nil, pdb != nil)
	}
	podLabels := checkDeploymentDefaults(t, deploy)
	checkAntiAffinity(t, deploy, podLabels)
	checkPodDisruptionBudget(t, pdb, podLabels)
	checkOverrides(t, chart)
}

// checkDeploymentDefaults checks that the manager's Deployment runs two
// replicas with leader election and 30 seconds of grace at shutdown, and
// returns the labels of its pods (stopping the test when they have none).
func checkDeploymentDefaults(t *testing.T, deploy *unstructured.Unstructured) map[string]string {
	t.Helper()
	if r, _, _ := unstructured.NestedFieldNoCopy(deploy.Object, "spec", "replicas"); fmt.Sprint(r) != "2" {
		t.Errorf("replicas %v by default, want 2", r)
	}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if args := fmt.Sprint(containers[0].(map[string]any)["args"]); !strings.Contains(args, "--leader-elect") {
		t.Errorf("args %s: two replicas without --leader-elect", args)
	}
	if g, _, _ := unstructured.NestedFieldNoCopy(deploy.Object, "spec", "template", "spec", "terminationGracePeriodSeconds"); fmt.Sprint(g) != "30" {
		t.Errorf("terminationGracePeriodSeconds %v, want 30", g)
	}
	podLabels, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "labels")
	if len(podLabels) == 0 {
		t.Fatal("the manager's pods have no labels")
	}
	return podLabels
}

// checkAntiAffinity checks that the Deployment prefers, in a single term,
// to put the manager's pods (labelled podLabels) on different nodes.
func checkAntiAffinity(t *testing.T, deploy *unstructured.Unstructured, podLabels map[string]string) {
	t.Helper()
	terms, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "affinity", "podAntiAffinity",
		"preferredDuringSchedulingIgnoredDuringExecution")
	if len(terms) != 1 {
		t.Errorf("preferred pod anti-affinity terms %v, want one", terms)
		return
	}
	term := terms[0].(map[string]any)
	key, _, _ := unstructured.NestedString(term, "podAffinityTerm", "topologyKey")
	sel, _, _ := unstructured.NestedStringMap(term, "podAffinityTerm", "labelSelector", "matchLabels")
	if key != "kubernetes.io/hostname" || len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
		t.Errorf("pod anti-affinity on %q selecting %v, want kubernetes.io/hostname and the manager's pods %v", key, sel, podLabels)
	}
}

// checkPodDisruptionBudget checks that pdb is a policy/v1
// PodDisruptionBudget in the release's namespace, of the manager's pods
// (labelled podLabels), that lets a drain of one replica through.
func checkPodDisruptionBudget(t *testing.T, pdb *unstructured.Unstructured, podLabels map[string]string) {
	t.Helper()
	if pdb.GetAPIVersion() != "policy/v1" || pdb.GetNamespace() != "release-ns" {
		t.Errorf("PodDisruptionBudget %s in namespace %q, want policy/v1 in the release's", pdb.GetAPIVersion(), pdb.GetNamespace())
	}
	spec, _, _ := unstructured.NestedMap(pdb.Object, "spec")
	if fmt.Sprint(spec["maxUnavailable"]) != "1" || spec["minAvailable"] != nil {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, minAvailable %v; want 1 and none, so that one replica can be drained",
			spec["maxUnavailable"], spec["minAvailable"])
	}
	sel, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
		t.Errorf("PodDisruptionBudget selects %v, not the manager's pods %v", sel, podLabels)
	}
}

// checkOverrides checks that the chart's values override its defaults:
// replicas=1 renders one replica, podDisruptionBudget.enabled=false no
// PodDisruptionBudget.
func checkOverrides(t *testing.T, chart string) {
	t.Helper()
	one := renderChart(t, chart, map[string]any{"replicas": 1})
	if r, _, _ := unstructured.NestedFieldNoCopy(one["Deployment"].Object, "spec", "replicas"); fmt.Sprint(r) != "1" {
		t.Errorf("replicas=1 renders replicas %v", r)
	}
	if off := renderChart(t, chart, map[string]any{"podDisruptionBudget": map[string]any{"enabled": false}}); off["PodDisruptionBudget"] != nil {
		t.Error("podDisruptionBudget.enabled=false still renders the PodDisruptionBudget")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// renderChart renders the chart's templates with Go's text/template and
// the helm functions they use (toYaml, nindent, default), values.yaml's values with
// set's top-level keys replacing them, in namespace release-ns; it returns
// the objects by kind (the last of each).
func renderChart(t *testing.T, chart string, set map[string]any) map[string]*unstructured.Unstructured {
	t.Helper()
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chart, "values.yaml"))), &values); err != nil {
		t.Fatal(err)
	}
	for k, v := range set {
		values[k] = v
	}
	funcs := template.FuncMap{
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"default": func(d, v any) any {
			if v == nil || v == "" {
				return d
			}
			return v
		},
	}
	chartMeta := map[string]any{}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chart, "Chart.yaml"))), &chartMeta); err != nil {
		t.Fatal(err)
	}
	data := map[string]any{"Values": values, "Release": map[string]any{"Namespace": "release-ns", "Service": "Helm"},
		"Chart": map[string]any{"AppVersion": chartMeta["appVersion"]}}
	files, err := filepath.Glob(filepath.Join(chart, "templates", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", chart, err)
	}
	var all bytes.Buffer
	for _, f := range files {
		tmpl, err := template.New(filepath.Base(f)).Funcs(funcs).Option("missingkey=zero").Parse(readFile(t, f))
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString("\n---\n")
		if err := tmpl.Execute(&all, data); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := decode(&all)
	if err != nil {
		t.Fatalf("%v\n%s", err, all.String())
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, obj := range objs {
		byKind[obj.GetKind()] = obj
	}
	return byKind
}

// TestChartMonitoring: the ServiceMonitor, the alerts and the dashboard are
// off by default; turned on, each carries the labels it is given, and the
// alerts' and the dashboard's own {{ }} come out as config/prometheus has
// them, not read as the chart's templates.
func TestChartMonitoring(t *testing.T) {
	chart := filepath.Join("..", "..", "dist", "chart")
	kinds := []string{"ServiceMonitor", "PrometheusRule", "ConfigMap"}
	for _, kind := range kinds {
		if objs := renderChart(t, chart, nil); objs[kind] != nil {
			t.Errorf("a %s by default", kind)
		}
	}
	on := map[string]any{"enabled": true, "labels": map[string]any{"release": "monitoring"}}
	metrics := map[string]any{"enabled": true, "serviceMonitor": on, "prometheusRule": on, "dashboard": on}
	objs := renderChart(t, chart, map[string]any{"metrics": metrics})
	for _, kind := range kinds {
		obj := objs[kind]
		if obj == nil {
			t.Errorf("no %s with metrics.*.enabled", kind)
			continue
		}
		if obj.GetLabels()["release"] != "monitoring" || obj.GetLabels()["app.kubernetes.io/name"] != "safejob" || obj.GetNamespace() != "release-ns" {
			t.Errorf("%s: labels %v in %q, want release=monitoring beside its own, in the release's namespace", kind, obj.GetLabels(), obj.GetNamespace())
		}
	}
	if cm := objs["ConfigMap"]; cm != nil {
		got, _, _ := unstructured.NestedString(cm.Object, "data", "safejob.json")
		if want := readFile(t, filepath.Join("..", "..", "config", "prometheus", "dashboard.json")); got != want {
			t.Errorf("the chart's dashboard differs from config/prometheus/dashboard.json")
		}
	}
	if rule := objs["PrometheusRule"]; rule != nil {
		body, _ := yaml.Marshal(rule.Object)
		if !strings.Contains(string(body), "{{ $value | humanizePercentage }}") {
			t.Errorf("the alerts' annotations lost their templates:\n%s", body)
		}
	}
	metrics["enabled"] = false
	for kind := range renderChart(t, chart, map[string]any{"metrics": metrics}) {
		if slices.Contains(kinds, kind) {
			t.Errorf("a %s without metrics.enabled", kind)
		}
	}
}

// TestChartImageTag: the image's tag is v and the chart's appVersion unless
// image.tag names one.
func TestChartImageTag(t *testing.T) {
	chart := filepath.Join("..", "..", "dist", "chart")
	image := func(set map[string]any) any {
		containers, _, _ := unstructured.NestedSlice(renderChart(t, chart, set)["Deployment"].Object, "spec", "template", "spec", "containers")
		return containers[0].(map[string]any)["image"]
	}
	if got := image(nil); got != "safejob-controller:v0.1.0" {
		t.Errorf("image %v by default, want safejob-controller:v0.1.0 (the appVersion)", got)
	}
	set := map[string]any{"image": map[string]any{"repository": "r/safejob", "tag": "v9", "pullPolicy": "Always"}}
	if got := image(set); got != "r/safejob:v9" {
		t.Errorf("image %v with image.tag=v9, want r/safejob:v9", got)
	}
}

// TestChartDocumentsValues: every value of values.yaml is in
// values.schema.json, and each that is set as a whole (not a map of more
// values) has a row in the chart's README; the schema names no value that
// values.yaml lacks.
func TestChartDocumentsValues(t *testing.T) {
	chart := filepath.Join("..", "..", "dist", "chart")
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chart, "values.yaml"))), &values); err != nil {
		t.Fatal(err)
	}
	schema := &schemaNode{}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chart, "values.schema.json"))), schema); err != nil {
		t.Fatal(err)
	}
	readme := readFile(t, filepath.Join(chart, "README.md"))
	var walk func(path string, values map[string]any, node *schemaNode)
	walk = func(path string, values map[string]any, node *schemaNode) {
		node = schema.resolve(t, node)
		for k, v := range values {
			sub, ok := node.Properties[k]
			if !ok {
				t.Errorf("values.schema.json lacks %s%s", path, k)
				continue
			}
			// A map of values, not one value as a whole (resources, labels).
			if m, ok := v.(map[string]any); ok && len(schema.resolve(t, sub).Properties) > 0 {
				walk(path+k+".", m, sub)
			} else if !strings.Contains(readme, "| `"+path+k+"` |") {
				t.Errorf("the chart's README has no row for %s%s", path, k)
			}
		}
		for k := range node.Properties {
			if _, ok := values[k]; !ok {
				t.Errorf("values.schema.json names %s%s, which values.yaml does not have", path, k)
			}
		}
	}
	walk("", values, schema)
}

// schemaNode is the part of a JSON schema that names values.
type schemaNode struct {
	Ref         string                 `json:"$ref"`
	Properties  map[string]*schemaNode `json:"properties"`
	Definitions map[string]*schemaNode `json:"definitions"`
}

// resolve follows a node's reference to one of the root's definitions.
func (root *schemaNode) resolve(t *testing.T, n *schemaNode) *schemaNode {
	t.Helper()
	if n.Ref == "" {
		return n
	}
	def, ok := root.Definitions[strings.TrimPrefix(n.Ref, "#/definitions/")]
	if !ok {
		t.Fatalf("values.schema.json refers to %s, which it does not define", n.Ref)
	}
	return def
}
