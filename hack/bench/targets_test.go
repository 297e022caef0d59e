package main

import (
	"slices"
	"strings"
	"testing"
)

// targetsFixture is a set of made-up runs: W1 at two sizes, W2, W4, W5 at
// 100,000 completions and W6 (queued), each under the limit (but W6), the
// built-in and SafeJob.
func targetsFixture(t *testing.T) ([]workload, []result) {
	t.Helper()
	all := map[string]workload{
		"W1": {Name: "W1", Desc: "one-pod jobs", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W2": {Name: "W2", Desc: "one job", Jobs: 1, Completions: 5000, Parallelism: 200},
		"W4": {Name: "W4", Desc: "at once", Jobs: 10000, Completions: 1, Parallelism: 1},
		"W5": {Name: "W5", Desc: "indexed", Jobs: 1, Completions: 100000, Parallelism: 2000, Indexed: true},
		"W6": {Name: "W6", Desc: "queued", Jobs: 5000, Completions: 1, Parallelism: 1, Quota: 500},
	}
	ws, err := selectWorkloads(all, "W1,W2,W4,W5,W6", "W1:1,10 W2:1 W4:1 W5:1 W6:1", 1)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]workload{}
	for _, w := range ws {
		byName[w.Name] = w
	}
	type fig struct{ perSec, half, api, ctl, rss, writes, p99, status float64 }
	mk := func(name, m string, f fig) result {
		w, ok := byName[name]
		if !ok {
			t.Fatalf("no workload %s in %v", name, ws)
		}
		n := float64(w.total())
		return result{Workload: w.Name, Base: w.Base, Size: w.Size, Mode: m, Repeat: 1, Completions: w.total(),
			PerSecond: f.perSec, CompletionTimes: []float64{f.half, f.half + 1}, CPUSec: f.ctl * n / 1000,
			ClusterCPUSec: map[string]float64{"kube-apiserver": f.api * n / 1000}, PeakRSSMiB: f.rss,
			WritesPerCompl: f.writes, FirstPodP99Sec: f.p99, Quota: w.Quota, PeakActivePods: 100,
			LargestStatusBytes: int(f.status * 1024), SubmittedSec: f.half / 4,
			PodStepsP50: map[string]float64{"scheduled to running": f.ctl, "running to succeeded": 1}}
	}
	w1, w1x10 := ws[0].Name, ws[1].Name
	return ws, []result{
		mk(w1, modeLimit, fig{perSec: 100, api: 10}),
		mk(w1, modeBuiltin, fig{perSec: 40, half: 8, api: 30, ctl: 6, rss: 120, writes: 12, p99: 10}),
		mk(w1, modeSafeJob, fig{perSec: 60, half: 10, api: 29, ctl: 4, rss: 80, writes: 11, p99: 8}),
		mk(w1x10, modeLimit, fig{perSec: 100, api: 12}),
		mk(w1x10, modeBuiltin, fig{perSec: 30, half: 80, api: 32, ctl: 10, rss: 372, writes: 11, p99: 120}),
		mk(w1x10, modeSafeJob, fig{perSec: 45, half: 70, api: 31, ctl: 4.2, rss: 200, writes: 11, p99: 100}),
		mk("W2", modeLimit, fig{perSec: 100, api: 10}),
		mk("W2", modeBuiltin, fig{perSec: 80, half: 30, api: 13, ctl: 1.4, rss: 140, writes: 6.1}),
		mk("W2", modeSafeJob, fig{perSec: 92, half: 29, api: 14, ctl: 1.5, rss: 100, writes: 6.0}),
		mk("W4", modeBuiltin, fig{perSec: 30, half: 80, api: 30, ctl: 12, rss: 370, writes: 11, p99: 130}),
		mk("W4", modeSafeJob, fig{perSec: 45, half: 90, api: 29, ctl: 4.6, rss: 300, writes: 10, p99: 15}),
		mk("W5", modeLimit, fig{perSec: 110, api: 9}),
		mk("W5", modeBuiltin, fig{perSec: 70, half: 700, api: 15, ctl: 2, rss: 300, writes: 6.1, status: 2}),
		mk("W5", modeSafeJob, fig{perSec: 75, half: 720, api: 14, ctl: 2, rss: 250, writes: 6.3, status: 300}),
		mk("W6", modeBuiltin, fig{perSec: 13, half: 200, api: 100, ctl: 10, rss: 250, writes: 26}),
		mk("W6", modeSafeJob, fig{perSec: 14, half: 190, api: 99, ctl: 11, rss: 230, writes: 21}),
	}
}

// targetRowOf returns the row of a target and workload in a report.
func targetRowOf(t *testing.T, out, target, where string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| "+target+" | "+where) {
			return line
		}
	}
	t.Fatalf("no row %q for %q in:\n%s", target, where, out)
	return ""
}

// TestTargetsSection judges each target from made-up runs: a met target
// says so, a missed one by how much and where its cause was measured, and a
// broken run or quota fails its row whatever the rest.
func TestTargetsSection(t *testing.T) {
	ws, results := targetsFixture(t)
	out := targetsSection(ws, results, nil)
	row := func(target, where string) string { t.Helper(); return targetRowOf(t, out, target, where) }
	wantLines(t, row(targetHalf, "W1×1 "), "10.0 s vs 8.0 s", "**missed** by 2.0 s (+25%)",
		"the last job's create returned at 2.5 s against 2.0 s", "4.0 and 1.0 s", "against 6.0 and 1.0")
	wantLines(t, row(targetHalf, "W1×10 "), "70.0 s vs 80.0 s", "| met |")
	wantLines(t, row(targetHalf, "W5 "), "**missed** by 20.0 s")
	if strings.Contains(row(targetHalf, "W5 "), "create returned") {
		t.Error("the create of a workload's one job given as a cause")
	}
	wantLines(t, row(targetRepeats, "W1×1 "), "| 1.50x | met |")
	wantLines(t, row(targetW1Ratio, "W1×1 "), "60.0 vs 40.0/s (1.50x)", "**missed** by 1.00x (below 2.5x)",
		"100/s at 33.0 ms of CPU per completion (every process) would take 3.3 cores")
	wantLines(t, row(targetThroughput, "W6 "), "14.0 vs 13.0/s (1.08x)", "| met |")
	wantLines(t, row(targetLimit, "W2 "), "92.0 vs 100.0/s (92.0%; the built-in 80.0%)", "| met |")
	wantLines(t, row(targetAPI, "W1×1 "), "29.0 ms vs 30.0 ms", "| met |")
	wantLines(t, row(targetAPI, "W2 "), "14.0 ms vs 13.0 ms", "**missed** by 1.0 ms (+8%)")
	wantLines(t, row(targetAPIGrowth, "W1×1 "), "+6.9% vs +20.0%", "| met |")
	wantLines(t, row(targetControllerGrowth, "W1×1 "), "4.00 to 4.20 ms (+5.0%); kube-controller-manager +67%", "| met |")
	wantLines(t, row(targetControllerGrowth, "W4 "), "4.60 vs 4.00 ms (+15.0%)", "**missed** by 5.0 points")
	wantLines(t, row(targetWrites, "W5 "), "6.30 vs 6.10", "**missed** by 0.20 (+3%)")
	wantLines(t, row(targetStatus, "W5 "), "300.0 KiB", "**missed** by 44.0 KiB")
	wantLines(t, row(targetRSS, "W1×1 "), "80 vs 120 MiB", "| met |")
	wantLines(t, row(targetRSSPerJob, "W1×1 "), "13.7 KiB vs 28.7 KiB", "| met |")
	wantLines(t, row(targetFirstPod, "W4 "), "15.0 s vs 8.0 s (1.9x); the built-in 130.0 s vs 10.0 s (13.0x)", "| met |")
	wantLines(t, row(targetQuota, "W6 "), "at most 100 vs 100 pods (quota 500)", "| met |")
	wantLines(t, row(targetExact, "every workload"), "6 of 6 SafeJob runs finished and exact", "| met |")
	for _, why := range []string{whyAPIServer, whyHalfOnePod, whyHalfInFlight, whyCPU, whyControllerJobs, whyStatus, whyWrites} {
		if !strings.Contains(out, "- "+why) {
			t.Errorf("a missed target's cause is not listed: %s", why)
		}
	}
	for _, why := range []string{whyWindow, whyQueued, whyMemory, whyDefect} {
		if strings.Contains(out, "- "+why) {
			t.Errorf("a met target's cause is listed as a miss's: %s", why)
		}
	}
	// The rows go by target, in the order of targetOrder.
	var order []int
	for _, line := range strings.Split(out, "\n") {
		for i, target := range targetOrder {
			if strings.HasPrefix(line, "| "+target+" |") {
				order = append(order, i)
			}
		}
	}
	if !slices.IsSorted(order) || len(order) == 0 {
		t.Errorf("rows not in the targets' order: %v", order)
	}

	// A SafeJob run that broke exactness, one that did not finish, one
	// that passed its quota, and a controller that grew too much fail
	// their rows.
	results[len(results)-1].PeakActivePods = 501
	results[2].Inexact = "1 pod created beyond the completions"
	results[5].CPUSec = 4.6 * 10 // W1×10: 4.6 ms per completion, 15% above W1×1's
	stuck := []result{{Workload: "W2", Mode: modeSafeJob, Repeat: 2, Failed: "timed out after 20m0s"}}
	out = targetsSection(ws, results, stuck)
	wantLines(t, row(targetControllerGrowth, "W1×1 "), "4.00 to 4.60 ms (+15.0%)", "**missed** by 5.0 points")
	wantLines(t, row(targetQuota, "W6 "), "**missed** by 1 pods over")
	wantLines(t, row(targetExact, "every workload"), "5 of 7 SafeJob runs finished and exact",
		"**missed** by W1×1 repeat 1: 1 pod created beyond", "W2 repeat 2 did not finish: timed out after 20m0s")
	if !strings.Contains(out, "- "+whyDefect) {
		t.Error("a broken run's row names no cause")
	}
}

// TestTargetsNotJudged: a target whose runs did not finish, or whose
// figures are missing, is shown as not judged, never as met or missed on
// what is left.
func TestTargetsNotJudged(t *testing.T) {
	ws, results := targetsFixture(t)
	var kept []result
	for _, r := range results {
		// The built-in's W2 and SafeJob's W1×10 timed out.
		if (r.Workload == "W2" && r.Mode == modeBuiltin) || (r.Workload == ws[1].Name && r.Mode == modeSafeJob) {
			continue
		}
		kept = append(kept, r)
	}
	out := targetsSection(ws, kept, nil)
	row := func(target, where string) string { t.Helper(); return targetRowOf(t, out, target, where) }
	wantLines(t, row(targetVsBuiltin, "W2 "), "not judged: no run of the built-in finished")
	wantLines(t, row(targetLimit, "W2 "), "92.0 vs 100.0/s (92.0%)", "| met |")
	wantLines(t, row(targetOverSizes, "W1×1 "), "not judged: SafeJob did not finish every size")
	for _, target := range []string{targetAPIGrowth, targetRSSPerJob} {
		if strings.Contains(out, "| "+target+" | W1") {
			t.Errorf("%s judged over the sizes SafeJob finished:\n%s", target, out)
		}
	}
	if !strings.Contains(out, "not judged") || !strings.Contains(out, ", 2 not judged") {
		t.Errorf("the count of targets not judged is missing:\n%s", out)
	}

	// W5 run at 20,000 completions: its largest status is shown, not
	// judged against the bound at 100,000; a run without CPU figures
	// (raw results of an old harness) judges no CPU target.
	ws[4].Size, ws[4].Completions = 0.2, 20000
	for i := range kept {
		if kept[i].Workload == "W5" {
			kept[i].Completions = 20000
		}
		if kept[i].Workload == "W6" {
			kept[i].ClusterCPUSec, kept[i].CPUSec = nil, 0
		}
	}
	out = targetsSection(ws, kept, nil)
	wantLines(t, row(targetStatus, "W5 "), "300.0 KiB", "not judged: 100,000 completions not run")
	wantLines(t, row(targetAPI, "W6 "), "not judged: not recorded for both controllers")
	if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
		t.Errorf("a figure divided by zero:\n%s", out)
	}
}

// TestTargetsNeverShowEqualFigures: a miss whose two figures round alike
// shows them with the decimals that tell them apart, and its shortfall in
// tenths of a percent; figures that differ at the row's precision keep it.
func TestTargetsNeverShowEqualFigures(t *testing.T) {
	w := workload{Name: "W2", Jobs: 1, Completions: 5000}
	cases := []struct {
		row                  targetRow
		wantMet              bool
		wantMeasured, wantBy string
	}{
		{noMoreRow(targetWrites, w, 6.0534, 6.0462, "%.2f", ""), false, "6.053 vs 6.046", "0.007 (+0.1%)"},
		{noMoreRow(targetWrites, w, 6.05, 6.05, "%.2f", ""), true, "6.05 vs 6.05", ""},
		{noMoreRow(targetAPI, w, 14.9, 14.4, "%.1f ms", ""), false, "14.9 ms vs 14.4 ms", "0.5 ms (+3%)"},
		{belowRow(w, 100.2, 100.4, ""), true, "100.2 vs 100.4 MiB", ""},
		{belowRow(w, 100.4, 100.2, ""), false, "100.4 vs 100.2 MiB", "0.2 MiB (+0.2%)"},
		{belowRow(w, 100, 141, ""), true, "100 vs 141 MiB", ""},
	}
	for _, tc := range cases {
		if tc.row.met != tc.wantMet || tc.row.measured != tc.wantMeasured {
			t.Errorf("%s: measured %q, met %v; want %q, %v", tc.row.target, tc.row.measured, tc.row.met, tc.wantMeasured, tc.wantMet)
		}
		if !tc.wantMet && tc.row.short != tc.wantBy {
			t.Errorf("%s %s: missed by %q, want %q", tc.row.target, tc.row.measured, tc.row.short, tc.wantBy)
		}
	}
}
