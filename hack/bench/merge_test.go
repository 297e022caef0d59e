package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// merged merges an earlier run's raw results, written to a file, into a
// run of W1.
func merged(t *testing.T) (o options, path string, ws []workload, results, failed []result) {
	t.Helper()
	all := map[string]workload{
		"W1": {Name: "W1", Desc: "1,000 jobs of one pod", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W5": {Name: "W5", Desc: "one big job", Jobs: 1, Completions: 100000, Parallelism: 2000, Indexed: true},
	}
	o = options{args: []string{"-workloads", "W1"}, rev: "commit abc"}
	w1 := all["W1"]
	mine := []result{{Workload: "W1", Mode: modeSafeJob, Repeat: 1, Completions: 1000, Run: o.runName(), Spec: &w1}}
	earlier := []result{
		// Results that predate Spec and Run: their workload is rebuilt from Base and Size.
		{Workload: "W5×0.2", Base: "W5", Size: 0.2, Mode: modeSafeJob, Repeat: 1, Completions: 20000, PodsSucceeded: 20000,
			Reported: 20000},
		{Workload: "W5×0.5", Base: "W5", Size: 0.5, Mode: modeBuiltin, Repeat: 1, Failed: "timed out"},
		// Judged again by today's rules: recorded as exact, it was not.
		{Workload: "W5×0.2", Base: "W5", Size: 0.2, Mode: modeLimit, Repeat: 1, Completions: 20000, PodsSucceeded: 20000,
			Reported: 20000, ExtraPods: 1},
		// This run measured it again: its own result stays, the earlier one goes.
		{Workload: "W1", Mode: modeSafeJob, Repeat: 1, Completions: 999},
	}
	raw, err := json.Marshal(earlier)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "earlier.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	ws, results, failed, err = mergeEarlier([]string{path}, all, []workload{w1}, mine, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o, path, ws, results, failed
}

func TestMergeEarlier(t *testing.T) {
	_, _, ws, results, failed := merged(t)
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	if want := []string{"W1", "W5×0.2", "W5×0.5"}; !slices.Equal(names, want) {
		t.Errorf("workloads %v, want %v", names, want)
	}
	if ws[1].Completions != 20000 || ws[1].Parallelism != 2000 || !ws[1].Indexed {
		t.Errorf("W5×0.2 rebuilt as %+v", ws[1])
	}
	if len(results) != 3 || results[0].Completions != 1000 {
		t.Errorf("results %+v: want this run's W1 and the two earlier W5×0.2", results)
	}
	if len(failed) != 1 || failed[0].Workload != "W5×0.5" {
		t.Errorf("failed %+v, want the earlier W5×0.5 run", failed)
	}
}

// TestMergedReport: the report of a merge names the earlier run, lists its
// failed run and summarises none.
func TestMergedReport(t *testing.T) {
	o, path, ws, results, failed := merged(t)
	lines := failedLines(results, failed)
	if len(lines) != 2 || !strings.Contains(lines[0], "timed out") || !strings.Contains(lines[1], "W5×0.2 limit repeat 1 broke exactness: 1 extra pods") {
		t.Errorf("failed lines %q", lines)
	}
	runs := earlierRuns(o, results, failed)
	if len(runs) != 1 || !strings.Contains(runs[0], path) {
		t.Errorf("earlier runs %q, want one naming %s", runs, path)
	}
	o.earlier = runs
	doc := report(o, ws, results, failed, "chart.png", 0)
	for _, want := range []string{"## W5×0.2", "## W5×0.5", "W5×0.5 built-in repeat 1: timed out", "Merged (`-merge`)",
		"SafeJob commit abc"} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// A report of merged results alone names no operator of its own.
	o.reportOnly = true
	doc = report(o, ws, results, failed, "chart.png", 0)
	if !strings.Contains(doc, "no run, a report of the raw results of the runs below") || strings.Contains(doc, "commit abc") {
		t.Errorf("a report-only header:\n%s", doc[:min(len(doc), 1500)])
	}
}

// TestMergeLaterFileReplaces: of the -merge files, listed oldest first, a
// later file's result replaces an earlier file's for the same workload,
// mode and repeat (a part run again; here a run that timed out, then
// finished), and the others are kept in the order of the files.
func TestMergeLaterFileReplaces(t *testing.T) {
	all := map[string]workload{"W2": {Name: "W2", Jobs: 1, Completions: 5000, Parallelism: 200}}
	write := func(name string, rs ...result) string {
		raw, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	w2x10 := workload{Name: "W2×10", Base: "W2", Size: 10, Jobs: 1, Completions: 50000, Parallelism: 200}
	done := func(mode string, perSecond float64) result {
		return result{Workload: "W2×10", Base: "W2", Size: 10, Mode: mode, Repeat: 1, Completions: 50000,
			PodsSucceeded: 50000, Reported: 50000, PerSecond: perSecond, Spec: &w2x10, Run: "run " + mode}
	}
	older := write("older.json", done(modeLimit, 93), done(modeBuiltin, 61.7),
		result{Workload: "W2×10", Base: "W2", Size: 10, Mode: modeSafeJob, Repeat: 1, Failed: "timed out", Spec: &w2x10})
	newer := write("newer.json", done(modeSafeJob, 57.3), done(modeLimit, 95))
	_, results, failed, err := mergeEarlier([]string{older, newer}, all, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 0 {
		t.Errorf("failed %+v: the later run that finished replaces the one that timed out", failed)
	}
	var got []string
	for _, r := range results {
		got = append(got, fmt.Sprintf("%s %.1f", r.Mode, r.PerSecond))
	}
	if want := []string{modeBuiltin + " 61.7", modeSafeJob + " 57.3", modeLimit + " 95.0"}; !slices.Equal(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
}
