package controller

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.countReconcile(nil, time.Millisecond)
	m.countReconcile(errors.New("boom"), time.Millisecond)
	before := &batchv1alpha1.SafeJobStatus{Active: 1}
	m.recordWrite(before, &batchv1alpha1.SafeJobStatus{Active: 2}, []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched},
		{Type: batchv1alpha1.EntryLaunched}, {Type: batchv1alpha1.EntrySucceeded},
		{Type: batchv1alpha1.EntryFailed, Reason: batchv1alpha1.FailReasonIgnored},
		{Type: batchv1alpha1.EntryFailed, Reason: batchv1alpha1.FailReasonCounted}})
	m.recordWrite(before, &batchv1alpha1.SafeJobStatus{Active: 1, Ready: 1}, nil)
	m.recordWrite(before, &batchv1alpha1.SafeJobStatus{Active: 0, Terminating: ptr.To[int32](1)}, nil)
	m.recordWrite(before, &batchv1alpha1.SafeJobStatus{Active: 1, Ready: 1, Conditions: []metav1.Condition{{Type: "X"}}}, nil)
	running := &batchv1alpha1.SafeJob{Spec: batchv1alpha1.SafeJobSpec{CompletionMode: batchv1alpha1.IndexedCompletion}}
	failed := running.DeepCopy()
	failed.Status.Conditions = []metav1.Condition{{Type: batchv1alpha1.ConditionFailed, Status: metav1.ConditionTrue,
		Reason: batchv1alpha1.ReasonBackoffLimitExceeded}}
	m.recordFinished(running, failed)
	m.recordFinished(failed, failed) // already finished: not counted again
	m.observeCommit(20 * time.Millisecond)
	want := `
# HELP safejob_ledger_appends_total Ledger entries committed, by entry type.
# TYPE safejob_ledger_appends_total counter
safejob_ledger_appends_total{type="Failed"} 2
safejob_ledger_appends_total{type="Launched"} 2
safejob_ledger_appends_total{type="Succeeded"} 1
# HELP safejob_jobs_finished_total SafeJobs that finished, by completion mode, result (succeeded, failed) and reason.
# TYPE safejob_jobs_finished_total counter
safejob_jobs_finished_total{completion_mode="Indexed",reason="BackoffLimitExceeded",result="failed"} 1
# HELP safejob_pod_failures_total Pod failures committed, by the podFailurePolicy action that handled them (Count when no rule matched).
# TYPE safejob_pod_failures_total counter
safejob_pod_failures_total{action="Count"} 1
safejob_pod_failures_total{action="Ignore"} 1
# HELP safejob_status_writes_total SafeJob status writes, by kind: ledger (appended to the ledger), counts (only active, ready or terminating changed), other.
# TYPE safejob_status_writes_total counter
safejob_status_writes_total{kind="counts"} 2
safejob_status_writes_total{kind="ledger"} 1
safejob_status_writes_total{kind="other"} 1
# HELP safejob_reconciles_total SafeJob reconciles, by result (success, error).
# TYPE safejob_reconciles_total counter
safejob_reconciles_total{result="error"} 1
safejob_reconciles_total{result="success"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "safejob_ledger_appends_total", "safejob_reconciles_total",
		"safejob_jobs_finished_total", "safejob_pod_failures_total", "safejob_status_writes_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.ReconcileDuration); n != 2 {
		t.Errorf("reconcile duration histogram has %d series, want one per result", n)
	}
	if n := testutil.CollectAndCount(m.CommitObserve); n != 1 {
		t.Errorf("commit-observe histogram has %d series", n)
	}
	if err := m.Register(reg); err == nil {
		t.Error("registering twice succeeded")
	}
}

// TestMetricsReference keeps docs/reference/metrics.md's table of SafeJob's
// own metrics the same as the metrics the manager registers: name, type
// and labels, in the same order.
func TestMetricsReference(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(doc), "## From controller-runtime")
	row := regexp.MustCompile("(?m)^\\| `(safejob_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		labels := strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(m[3]), "`", ""), " ", "")
		documented = append(documented, m[1]+" "+m[2]+" {"+labels+"}")
	}
	desc := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	var registered []string
	for _, c := range NewMetrics().collectors() {
		kind := metricType(t, c)
		descs := make(chan *prometheus.Desc, 4)
		c.Describe(descs)
		close(descs)
		for d := range descs {
			m := desc.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			registered = append(registered, m[1]+" "+kind+" {"+strings.ReplaceAll(m[2], " ", "")+"}")
		}
	}
	if diff := cmp.Diff(registered, documented); diff != "" {
		t.Errorf("docs/reference/metrics.md lists other metrics than NewMetrics (-registered,+documented):\n%s", diff)
	}
}

// metricType is the Prometheus type of one of the manager's collectors.
func metricType(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.HistogramVec, prometheus.Histogram:
		return "histogram"
	case prometheus.Gauge, *heldPods: // before Counter: a Gauge has Inc and Add too
		return "gauge"
	case prometheus.Counter:
		return "counter"
	}
	t.Fatalf("a collector of type %T: name its metric type here", c)
	return ""
}
