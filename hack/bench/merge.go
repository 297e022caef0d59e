package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

// runName names this run in its raw results: the command and the operator
// build it measured.
func (o options) runName() string {
	return fmt.Sprintf("`go run ./hack/bench %s` (operator %s)", strings.Join(o.args, " "), o.rev)
}

// mergeEarlier adds the raw results of earlier runs (their -json files) to
// this run's, with their workloads, so one report covers a set run in
// parts. This run's result for a workload and mode replaces an earlier one
// of the same repeat, and so does a later file's (paths are listed oldest
// first): a part run again replaces its earlier run.
func mergeEarlier(paths []string, all map[string]workload, ws []workload, results, failed []result) (
	[]workload, []result, []result, error) {
	mine := map[string]bool{}
	for _, r := range slices.Concat(results, failed) {
		mine[runKey(r)] = true
	}
	have := map[string]bool{}
	for _, w := range ws {
		have[w.Name] = true
	}
	var merged []result
	for _, path := range slices.Backward(paths) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("-merge: reading %s: %w", path, err)
		}
		var earlier []result
		if err := json.Unmarshal(raw, &earlier); err != nil {
			return nil, nil, nil, fmt.Errorf("-merge: decoding %s: %w", path, err)
		}
		var kept []result
		for _, r := range earlier {
			if mine[runKey(r)] {
				continue
			}
			if r.Run == "" {
				r.Run = fmt.Sprintf("an earlier run (raw results in %s; it did not record its command)", path)
			}
			if !have[r.Workload] {
				w, err := workloadOf(all, r)
				if err != nil {
					return nil, nil, nil, fmt.Errorf("-merge: %s: %w", path, err)
				}
				ws, have[r.Workload] = append(ws, w), true
			}
			kept = append(kept, r)
		}
		for _, r := range kept {
			mine[runKey(r)] = true
		}
		merged = append(kept, merged...) // in the order of the files
	}
	for _, r := range merged {
		if r.Failed != "" {
			failed = append(failed, r)
		} else {
			r.Inexact = r.exactness() // by today's rules
			results = append(results, r)
		}
	}
	slices.SortStableFunc(ws, func(a, b workload) int {
		return cmp.Or(cmp.Compare(cmp.Or(a.Base, a.Name), cmp.Or(b.Base, b.Name)), cmp.Compare(a.Size, b.Size))
	})
	return ws, results, failed, nil
}

// runKey names a result by what it measured: workload, mode and repeat.
func runKey(r result) string { return key(r.Workload, r.Mode, r.Repeat) }

func key(workload, mode string, repeat int) string {
	return fmt.Sprintf("%s/%s/%d", workload, mode, repeat)
}

// workloadOf is the workload a result measured: as it recorded it, or, for
// results that predate that, its base workload at its size (-scale 1).
func workloadOf(all map[string]workload, r result) (workload, error) {
	if r.Spec != nil {
		return *r.Spec, nil
	}
	w, ok := all[cmp.Or(r.Base, r.Workload)]
	if !ok {
		return workload{}, fmt.Errorf("result of an unknown workload %q", r.Workload)
	}
	if r.Base == "" {
		return w, nil
	}
	s := scaled(w, r.Size)
	s.Name, s.Base, s.Size = r.Workload, r.Base, r.Size
	return s, nil
}

// failedLines lists the runs that failed: those without figures, and those
// that broke exactness (counted in the tables, but failed all the same).
func failedLines(results, failed []result) []string {
	var lines []string
	for _, r := range failed {
		lines = append(lines, fmt.Sprintf("%s %s repeat %d: %s", r.Workload, r.Mode, r.Repeat, r.Failed))
	}
	for _, r := range results {
		if r.Inexact != "" {
			lines = append(lines, fmt.Sprintf("%s %s repeat %d broke exactness: %s", r.Workload, r.Mode, r.Repeat, r.Inexact))
		}
	}
	return lines
}

// earlierRuns lists the runs other than this one whose results a report
// merged, in the order first met.
func earlierRuns(o options, results, failed []result) []string {
	var runs []string
	for _, r := range slices.Concat(results, failed) {
		if r.Run != "" && r.Run != o.runName() && !slices.Contains(runs, r.Run) {
			runs = append(runs, r.Run)
		}
	}
	return runs
}
