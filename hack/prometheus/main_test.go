package main

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const dir = "../../config/prometheus/"

// TestServiceMonitor checks that the ServiceMonitor is one the Prometheus
// Operator reads and that it selects the operator's metrics Service on its
// HTTPS port.
func TestServiceMonitor(t *testing.T) {
	mon := &monitoringv1.ServiceMonitor{}
	if err := readStrict(dir+"monitor.yaml", mon); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{}
	body, err := os.ReadFile("../../config/operator/metrics_service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(body, svc); err != nil {
		t.Fatal(err)
	}
	if !labels.SelectorFromSet(mon.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) || len(mon.Spec.Selector.MatchExpressions) > 0 {
		t.Errorf("the ServiceMonitor's selector %v does not select the metrics Service's labels %v", mon.Spec.Selector, svc.Labels)
	}
	if len(mon.Spec.Endpoints) != 1 || len(svc.Spec.Ports) != 1 {
		t.Fatalf("want one endpoint and one port, have %d and %d", len(mon.Spec.Endpoints), len(svc.Spec.Ports))
	}
	if ep, port := mon.Spec.Endpoints[0], svc.Spec.Ports[0]; ep.Port != port.Name || ep.Scheme == nil || ep.Scheme.String() != "https" {
		t.Errorf("the endpoint scrapes port %q over %v; the Service serves HTTPS on %q", ep.Port, ep.Scheme, port.Name)
	}
}

// metricName finds the metric names in a PromQL expression: words that
// start as the manager's metrics do, or as the controller-runtime and
// client-go metrics it serves.
var metricName = regexp.MustCompile(`\b(?:safejob|controller_runtime|workqueue|leader_election|rest_client|up)(?:_[a-z]+)*\b`)

// documented returns the metric names docs/reference/metrics.md lists (a
// test in internal/controller keeps that list the manager's), with the
// series a histogram adds, and Prometheus's own up.
func documented(t *testing.T) map[string]bool {
	t.Helper()
	body, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([a-z]+) \\|").FindAllStringSubmatch(string(body), -1) {
		names[m[1]] = true
		if m[2] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+s] = true
			}
		}
	}
	return names
}

// quoted matches PromQL's string literals, label values among them.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// unknownMetrics returns the metrics expr reads that the manager does not serve.
func unknownMetrics(expr string, known map[string]bool) []string {
	var unknown []string
	for _, name := range metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// TestRules checks that the PrometheusRule is one the Prometheus Operator
// reads, that every alert reads only metrics the manager serves and says
// what it means, and that every alert has a unit test (promtool runs them:
// make test-rules).
func TestRules(t *testing.T) {
	rule, err := readRule(dir + "rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	known := documented(t)
	tests, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("a rule that is not an alert: %s", r.Record)
				continue
			}
			alerts[r.Alert] = true
			if unknown := unknownMetrics(r.Expr.String(), known); len(unknown) > 0 {
				t.Errorf("%s reads metrics the manager does not serve: %v", r.Alert, unknown)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Labels["severity"] == "" {
				t.Errorf("%s wants a summary, a description and a severity", r.Alert)
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("%s has no test in rules_test.yaml", r.Alert)
			}
		}
	}
	for _, want := range []string{"SafeJobOperatorDown", "SafeJobReconcileErrors", "SafeJobStatusConflictsClimbing",
		"SafeJobFinalizerReleasesBackingUp", "SafeJobLaunchWindowStarved", "SafeJobEventsDropped", "SafeJobPodsHeldByFinalizer",
		"SafeJobLedgerRefused"} {
		if !alerts[want] {
			t.Errorf("no alert %s; have %v", want, slices.Sorted(maps.Keys(alerts)))
		}
	}
}

// TestDashboard checks that the dashboard is JSON Grafana reads and that
// each of its queries reads only metrics the manager serves.
func TestDashboard(t *testing.T) {
	body, err := os.ReadFile(dir + "dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(body, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard has no uid or no panels")
	}
	known := documented(t)
	var queries int
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if unknown := unknownMetrics(q.Expr, known); len(unknown) > 0 {
				t.Errorf("panel %q reads metrics the manager does not serve: %v", p.Title, unknown)
			}
		}
	}
	served := 0
	for name := range known {
		if strings.HasPrefix(name, "safejob_") && strings.Contains(string(body), name) {
			served++
		}
	}
	if served == 0 || queries == 0 {
		t.Errorf("the dashboard reads none of SafeJob's metrics")
	}
}
