// Command chart writes the Helm chart dist/chart from the manifests of
// config/default and config/prometheus, so that the two never drift (`make
// verify` regenerates it and fails on a difference):
//
//	{ kubectl kustomize config/default; echo ---; kubectl kustomize config/prometheus; } |
//		go run ./hack/chart -out dist/chart
//
// The CRD goes to crds/ as it is; every other object becomes a template in
// the release namespace, with the Deployment's image, replicas, resources
// and flags, the metrics Service, the PodDisruptionBudget and the
// monitoring objects of config/prometheus taken from values.yaml. The
// default of replicas is the Deployment's in config/default.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// operatorNamespace is the namespace config/default installs into; the
// chart installs into the release's.
const operatorNamespace = "safejob-system"

func main() {
	out := flag.String("out", "dist/chart", "the chart directory to write")
	flag.Parse()
	if err := run(os.Stdin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out string) error {
	objs, err := decode(in)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("clearing %s: %w", out, err)
	}
	replicas, err := deploymentReplicas(objs)
	if err != nil {
		return err
	}
	files := map[string]string{"Chart.yaml": chartYAML, "values.yaml": valuesYAML(replicas), ".helmignore": "*.orig\n",
		"README.md": chartREADME, "values.schema.json": valuesSchema, "templates/NOTES.txt": notesTXT}
	for _, obj := range objs {
		name, body, err := render(obj)
		if err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if name != "" {
			files[name] = body
		}
	}
	for name, body := range files {
		path := filepath.Join(out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("writing the chart: %w", err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil { //nolint:gosec // a chart is world-readable
			return fmt.Errorf("writing the chart: %w", err)
		}
	}
	return nil
}

func decode(in io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading the manifests: %w", err)
		}
		if obj.GetKind() != "" {
			out = append(out, obj)
		}
	}
}

// deploymentReplicas returns the replicas of the one Deployment, the
// operator's (1 if it sets none, as the API server defaults it).
func deploymentReplicas(objs []*unstructured.Unstructured) (int64, error) {
	var replicas []int64
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" {
			continue
		}
		// Decoded from YAML or JSON, a number is a float64.
		var n int64 = 1
		switch v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); v := v.(type) {
		case nil:
		case int64:
			n = v
		case float64:
			n = int64(v)
			if float64(n) != v {
				return 0, fmt.Errorf("the Deployment %s: replicas %v is not a whole number", obj.GetName(), v)
			}
		default:
			return 0, fmt.Errorf("the Deployment %s: replicas %v is not a number", obj.GetName(), v)
		}
		replicas = append(replicas, n)
	}
	if len(replicas) != 1 {
		return 0, fmt.Errorf("want one Deployment, the operator's; the manifests have %d", len(replicas))
	}
	return replicas[0], nil
}

const generated = "# Generated from config/ by hack/chart (make chart); do not edit.\n"

// render returns the chart file of an object and its text.
func render(obj *unstructured.Unstructured) (string, string, error) {
	kind, name := obj.GetKind(), obj.GetName()
	switch kind {
	case "Namespace":
		return "", "", nil // helm install --namespace ... --create-namespace
	case "CustomResourceDefinition":
		body, err := yaml.Marshal(obj.Object)
		if err != nil {
			return "", "", fmt.Errorf("writing the CRD: %w", err)
		}
		return "crds/" + name + ".yaml", generated + string(body), nil
	}
	if obj.GetNamespace() == operatorNamespace {
		obj.SetNamespace("__NAMESPACE__")
	}
	if labels := obj.GetLabels(); labels["app.kubernetes.io/managed-by"] != "" {
		labels["app.kubernetes.io/managed-by"] = "__MANAGED_BY__"
		obj.SetLabels(labels)
	}
	if err := releaseNamespaceSubjects(obj); err != nil {
		return "", "", err
	}
	if kind == "Deployment" {
		if err := templateDeployment(obj); err != nil {
			return "", "", err
		}
	}
	body, err := yaml.Marshal(obj.Object)
	if err != nil {
		return "", "", fmt.Errorf("writing the object: %w", err)
	}
	// Text that reads as a template action (an alert's {{ $value }}, a
	// dashboard's {{ legend }}) is written out as it is.
	text := strings.ReplaceAll(string(body), "{{", `{{ "{{" }}`)
	text = strings.ReplaceAll(text, "__NAMESPACE__", "{{ .Release.Namespace }}")
	text = strings.ReplaceAll(text, "__MANAGED_BY__", "{{ .Release.Service }}")
	for placeholder, tmpl := range deploymentTemplates {
		text = replaceBlock(text, placeholder, tmpl)
	}
	if kind == "Service" && strings.Contains(name, "metrics") {
		text = "{{- if .Values.metrics.enabled }}\n" + text + "{{- end }}\n"
	}
	if kind == "PodDisruptionBudget" {
		text = "{{- if .Values.podDisruptionBudget.enabled }}\n" + text + "{{- end }}\n"
	}
	if value := monitoringValue(obj); value != "" {
		labels := "{{- with .Values.metrics." + value + ".labels }}{{ toYaml . | nindent 4 }}{{- end }}"
		text = strings.Replace(text, "\n  labels:\n", "\n  labels:"+labels+"\n", 1)
		text = "{{- if and .Values.metrics.enabled .Values.metrics." + value + ".enabled }}\n" + text + "{{- end }}\n"
	}
	file := fmt.Sprintf("templates/%s-%s.yaml", strings.ToLower(kind), strings.TrimPrefix(name, "safejob-"))
	return file, generated + text, nil
}

// monitoringValue names the values under metrics that turn on an object of
// config/prometheus and give it more labels (for the selectors of the
// Prometheus or the Grafana that is to pick it up); "" for another object.
func monitoringValue(obj *unstructured.Unstructured) string {
	switch obj.GetKind() {
	case "ServiceMonitor":
		return "serviceMonitor"
	case "PrometheusRule":
		return "prometheusRule"
	case "ConfigMap":
		if _, ok := obj.GetLabels()[grafanaDashboardLabel]; ok {
			return "dashboard"
		}
	}
	return ""
}

// grafanaDashboardLabel marks a ConfigMap that holds a Grafana dashboard,
// for the dashboard sidecar of Grafana's chart.
const grafanaDashboardLabel = "grafana_dashboard"

// releaseNamespaceSubjects binds a role binding's subjects of the
// operator's namespace in the release's.
func releaseNamespaceSubjects(obj *unstructured.Unstructured) error {
	subjects, found, _ := unstructured.NestedSlice(obj.Object, "subjects")
	if !found {
		return nil
	}
	for _, s := range subjects {
		if m, ok := s.(map[string]any); ok && m["namespace"] == operatorNamespace {
			m["namespace"] = "__NAMESPACE__"
		}
	}
	if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
		return fmt.Errorf("setting subjects: %w", err)
	}
	return nil
}

// templateDeployment puts placeholders where values.yaml decides.
func templateDeployment(obj *unstructured.Unstructured) error {
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) != 1 {
		return fmt.Errorf("want one container: %v", err)
	}
	c := containers[0].(map[string]any)
	c["image"], c["imagePullPolicy"], c["args"], c["resources"] = "__IMAGE__", "__PULL_POLICY__", "__ARGS__", "__RESOURCES__"
	if err := unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		return fmt.Errorf("setting the containers: %w", err)
	}
	if err := unstructured.SetNestedField(obj.Object, "__REPLICAS__", "spec", "replicas"); err != nil {
		return fmt.Errorf("setting replicas: %w", err)
	}
	return nil
}

// deploymentTemplates replace the Deployment's placeholders; a block
// template's lines are indented as the placeholder's line.
var deploymentTemplates = map[string]string{
	"__IMAGE__":       `"{{ .Values.image.repository }}:{{ .Values.image.tag | default (printf "v%s" .Chart.AppVersion) }}"`,
	"__PULL_POLICY__": `{{ .Values.image.pullPolicy }}`,
	"__REPLICAS__":    `{{ .Values.replicas }}`,
	"__RESOURCES__":   "\n{{- toYaml .Values.resources | nindent INDENT }}",
	"__ARGS__": "\n{{- if .Values.leaderElect }}\nPAD- --leader-elect\n{{- end }}\nPAD- --health-probe-bind-address=:8081\n" +
		"{{- if .Values.metrics.enabled }}\nPAD- --metrics-bind-address=:8443\nPAD- --metrics-secure\n{{- end }}\n" +
		"{{- range .Values.extraArgs }}\nPAD- {{ . }}\n{{- end }}",
}

var placeholderLine = regexp.MustCompile(`(?m)^( *(?:- )?)([a-zA-Z]+): (__[A-Z_]+__)$`)

// replaceBlock replaces the placeholder on its line (a key, maybe the first
// of a list item); in the template, PAD becomes the key's column and INDENT
// that column plus two.
func replaceBlock(text, placeholder, tmpl string) string {
	return placeholderLine.ReplaceAllStringFunc(text, func(line string) string {
		m := placeholderLine.FindStringSubmatch(line)
		if m[3] != placeholder {
			return line
		}
		column := len(m[1])
		t := strings.ReplaceAll(tmpl, "INDENT", fmt.Sprint(column+2))
		t = strings.ReplaceAll(t, "PAD", strings.Repeat(" ", column))
		if !strings.HasPrefix(t, "\n") {
			t = " " + t
		}
		return m[1] + m[2] + ":" + t
	})
}

var chartYAML = `apiVersion: v2
name: safejob
description: SafeJob, batch jobs with an exact completion ledger (generated from config/default by hack/chart)
type: application
version: 0.1.0
appVersion: "0.1.0"
`

// valuesYAML is values.yaml, replicas defaulting to the Deployment's.
func valuesYAML(replicas int64) string {
	var b bytes.Buffer
	b.WriteString(`# The operator's image: make image builds it (an OCI layout tarball) for
# you to push to your registry. An empty tag is v and the chart's appVersion.
image:
  repository: safejob-controller
  tag: ""
  pullPolicy: IfNotPresent
# Replicas of the operator; with leaderElect one leads and the others wait
# to take over. The pods prefer different nodes.
`)
	fmt.Fprintf(&b, "replicas: %d\n", replicas)
	b.WriteString(`leaderElect: true
# A PodDisruptionBudget that lets drains evict one manager pod at a time
# (maxUnavailable: 1, so that a single replica can still be drained).
podDisruptionBudget:
  enabled: true
# HTTPS metrics on port 8443, served to callers bound to the
# safejob-metrics-reader ClusterRole; the metrics Service comes with it.
# With the Prometheus Operator, serviceMonitor scrapes them (bind
# Prometheus's ServiceAccount to safejob-metrics-reader), prometheusRule
# adds SafeJob's alerts, and dashboard a Grafana dashboard in a ConfigMap
# labelled grafana_dashboard for Grafana's sidecar. Their labels are added
# to each object's, e.g. release: <your kube-prometheus-stack release>.
metrics:
  enabled: true
  serviceMonitor:
    enabled: false
    labels: {}
  prometheusRule:
    enabled: false
    labels: {}
  dashboard:
    enabled: false
    labels: {}
resources:
  limits:
    cpu: "1"
    memory: 512Mi
  requests:
    cpu: 100m
    memory: 128Mi
# More manager flags, e.g. --concurrent-reconciles=64 (see --help).
extraArgs: []
`)
	return b.String()
}
