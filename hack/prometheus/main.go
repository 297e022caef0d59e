// Command prometheus writes the rule groups of config/prometheus/rules.yaml,
// a PrometheusRule, as the plain rules file that promtool checks and tests:
//
//	go run ./hack/prometheus -in config/prometheus/rules.yaml -out DIR/rules.yaml
//
// make test-rules runs it, then `promtool check rules` and `promtool test
// rules` on hack/prometheus/rules_test.yaml.
package main

import (
	"flag"
	"fmt"
	"os"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	in := flag.String("in", "config/prometheus/rules.yaml", "the PrometheusRule to read")
	out := flag.String("out", "", "the rules file to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	rule, err := readRule(in)
	if err != nil {
		return err
	}
	body, err := yaml.Marshal(rule.Spec)
	if err != nil {
		return fmt.Errorf("writing the rule groups: %w", err)
	}
	if err := os.WriteFile(out, body, 0o644); err != nil { //nolint:gosec // rules are not secret
		return fmt.Errorf("writing the rule groups: %w", err)
	}
	return nil
}

// readRule reads a PrometheusRule, refusing a field the Prometheus Operator's
// types do not have.
func readRule(path string) (*monitoringv1.PrometheusRule, error) {
	rule := &monitoringv1.PrometheusRule{}
	if err := readStrict(path, rule); err != nil {
		return nil, err
	}
	if rule.Kind != monitoringv1.PrometheusRuleKind || rule.APIVersion != monitoringv1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("%s: want a %s %s, have %s %s", path, monitoringv1.SchemeGroupVersion, monitoringv1.PrometheusRuleKind,
			rule.APIVersion, rule.Kind)
	}
	return rule, nil
}

func readStrict(path string, into any) error {
	body, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := yaml.UnmarshalStrict(body, into); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}
