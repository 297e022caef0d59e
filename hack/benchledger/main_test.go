package main

import (
	"strings"
	"testing"
)

func TestParseNamesOrders(t *testing.T) {
	raw := []byte(`goos: linux
BenchmarkDecideToCompletion/Indexed/completions=1000/parallelism=100-2   1   14300 decide-ns/completion   21307 max-status-bytes   0 ns/op
BenchmarkDecideToCompletion/NonIndexed/completions=100000/parallelism=2000/order=shuffled-2   1   52000 decide-ns/completion   181000 max-status-bytes   0 ns/op
BenchmarkDecideToCompletion/Indexed/completions=10000/parallelism=2000/order=shuffled   1   40000 decide-ns/completion   90000 max-status-bytes   0 ns/op
PASS
`)
	rows, err := parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{mode: "Indexed", completions: "1000", parallelism: "100", order: "waves"},
		{mode: "NonIndexed", completions: "100000", parallelism: "2000", order: "shuffled"},
		{mode: "Indexed", completions: "10000", parallelism: "2000", order: "shuffled"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if r.mode != w.mode || r.completions != w.completions || r.parallelism != w.parallelism || r.order != w.order {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}
	if got := rows[1].metrics["max-status-bytes"]; got != 181000 {
		t.Errorf("row 1 max-status-bytes %v, want 181000", got)
	}
	table := render(rows, 0)
	if !strings.Contains(table, "| NonIndexed | 100000 | 2000 | shuffled | 52.0 |") {
		t.Errorf("rendered table lacks the shuffled row:\n%s", table)
	}
}

func TestParseRefusesOtherNames(t *testing.T) {
	if _, err := parse([]byte("BenchmarkDecideToCompletion/Indexed/completions=1000-2   1   1 ns/op\n")); err == nil {
		t.Fatal("a name of two parts was accepted")
	}
}
