package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	m.countReconcile(nil)
	m.countReconcile(errors.New("boom"))
	m.recordAppends([]batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched}, {Type: batchv1alpha1.EntryLaunched},
		{Type: batchv1alpha1.EntrySucceeded}})
	m.observeCommit(20 * time.Millisecond)
	want := `
# HELP safejob_ledger_appends_total Ledger entries committed, by entry type.
# TYPE safejob_ledger_appends_total counter
safejob_ledger_appends_total{type="Launched"} 2
safejob_ledger_appends_total{type="Succeeded"} 1
# HELP safejob_reconciles_total SafeJob reconciles, by result (success, error).
# TYPE safejob_reconciles_total counter
safejob_reconciles_total{result="error"} 1
safejob_reconciles_total{result="success"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "safejob_ledger_appends_total", "safejob_reconciles_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.CommitObserve); n != 1 {
		t.Errorf("commit-observe histogram has %d series", n)
	}
	if err := m.Register(reg); err == nil {
		t.Error("registering twice succeeded")
	}
}
