package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestResumeKeepsFinishedRuns(t *testing.T) {
	o := options{args: withoutResume([]string{"-workloads", "W1", "-resume"}), rev: "commit abc"}
	if got := strings.Join(o.args, " "); got != "-workloads W1" {
		t.Fatalf("arguments named %q, want -resume left out", got)
	}
	w1 := workload{Name: "W1", Jobs: 1000, Completions: 1, Parallelism: 1}
	results := []result{
		{Workload: "W1", Mode: modeLimit, Repeat: 1, Completions: 1000, Run: o.runName(), Spec: &w1},
		{Workload: "W1", Mode: modeBuiltin, Repeat: 1, Completions: 1000, Run: o.runName(), Spec: &w1},
	}
	failed := []result{{Workload: "W1", Mode: modeSafeJob, Repeat: 1, Run: o.runName(), Spec: &w1, Failed: "timed out"}}
	path := partialPath(filepath.Join(t.TempDir(), "bench-results.json"))
	if err := writeRaw(path, results, failed); err != nil {
		t.Fatal(err)
	}
	done, err := loadCheckpoint(path, o.runName())
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for k, r := range done {
		if r.Completions != 1000 || r.Spec == nil || r.Run != o.runName() {
			t.Errorf("%s kept as %+v, want it as it was written", k, r)
		}
		kept = append(kept, k)
	}
	slices.Sort(kept)
	// A run that failed is run again, not kept.
	if want := []string{"W1/built-in/1", "W1/limit/1"}; !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
}

func TestResumeRefusesAnotherSet(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadCheckpoint(filepath.Join(dir, "none.partial"), "run"); err == nil ||
		!strings.Contains(err.Error(), "no interrupted set") {
		t.Errorf("resuming with nothing to resume: %v, want an error saying so", err)
	}
	path := filepath.Join(dir, "bench-results.json.partial")
	mine := options{args: []string{"-workloads", "W1"}, rev: "commit abc"}
	if err := writeRaw(path, []result{{Workload: "W1", Mode: modeLimit, Repeat: 1, Run: mine.runName()}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, other := range []options{
		{args: []string{"-workloads", "W2"}, rev: "commit abc"}, // another command
		{args: []string{"-workloads", "W1"}, rev: "commit def"}, // another operator build
	} {
		if _, err := loadCheckpoint(path, other.runName()); err == nil || !strings.Contains(err.Error(), "without -resume") {
			t.Errorf("resuming %s with the results of %s: %v, want it refused", other.runName(), mine.runName(), err)
		}
	}
}

// TestReportOfAResumedSet: the report of a set resumed names its one
// command and says that the time it gives is since the resumption.
func TestReportOfAResumedSet(t *testing.T) {
	w := workload{Name: "W9", Desc: "test", Jobs: 1, Completions: 100}
	results := []result{{Workload: "W9", Mode: modeSafeJob, Repeat: 1, Completions: 100, PerSecond: 10}}
	o := options{args: withoutResume([]string{"-workloads", "W9", "-resume"}), repeats: 1, scale: 1, raisedQPS: 200,
		podDuration: "1s", rev: "commit abc"}
	if out := report(o, []workload{w}, results, nil, "c.png", time.Minute); !strings.Contains(out, "1m0s in all") {
		t.Errorf("a set run whole: want its time in all, got:\n%s", out[:min(len(out), 1200)])
	}
	o.done = map[string]result{"W9/limit/1": {}, "W9/built-in/1": {}}
	out := report(o, []workload{w}, results, nil, "c.png", time.Minute)
	if !strings.Contains(out, "`go run ./hack/bench -workloads W9` (with") ||
		!strings.Contains(out, "resumed (-resume) after 2 runs, 1m0s since") {
		t.Errorf("a resumed set: want its command without -resume and the time since resuming, got:\n%s", out[:min(len(out), 1200)])
	}
}
