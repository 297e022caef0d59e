package main

import (
	"strings"
	"testing"
)

// TestTargetsSection judges each target from made-up runs: a met target
// says so, a missed one by how much and where its cause was measured, and a
// broken run or quota fails its row whatever the rest.
func TestTargetsSection(t *testing.T) {
	all := map[string]workload{
		"W1": {Name: "W1", Desc: "one-pod jobs", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W2": {Name: "W2", Desc: "one job", Jobs: 1, Completions: 5000, Parallelism: 200},
		"W4": {Name: "W4", Desc: "at once", Jobs: 10000, Completions: 1, Parallelism: 1},
		"W6": {Name: "W6", Desc: "queued", Jobs: 5000, Completions: 1, Parallelism: 1, Quota: 500},
	}
	ws, err := selectWorkloads(all, "W1,W2,W4,W6", "W1:1,10 W2:1 W4:1 W6:1", 1)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]workload{}
	for _, w := range ws {
		byName[w.Name] = w
	}
	type fig struct{ perSec, half, api, ctl, rss, writes, p99 float64 }
	mk := func(name, m string, f fig) result {
		w := byName[name]
		n := float64(w.total())
		return result{Workload: w.Name, Base: w.Base, Size: w.Size, Mode: m, Repeat: 1, Completions: w.total(),
			PerSecond: f.perSec, CompletionTimes: []float64{f.half, f.half + 1}, CPUSec: f.ctl * n / 1000,
			ClusterCPUSec: map[string]float64{"kube-apiserver": f.api * n / 1000}, PeakRSSMiB: f.rss,
			WritesPerCompl: f.writes, FirstPodP99Sec: f.p99, Quota: w.Quota, PeakActivePods: 100,
			PodStepsP50: map[string]float64{"scheduled to running": f.ctl, "running to succeeded": 1}}
	}
	w1, w1x10 := ws[0].Name, ws[1].Name
	results := []result{
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
		mk("W6", modeBuiltin, fig{perSec: 13, half: 200, api: 100, ctl: 10, rss: 250, writes: 26}),
		mk("W6", modeSafeJob, fig{perSec: 14, half: 190, api: 99, ctl: 11, rss: 230, writes: 21}),
	}
	out := targetsSection(ws, results)
	row := func(target, where string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "| "+target+" | "+where) {
				return line
			}
		}
		t.Fatalf("no row %q for %q in:\n%s", target, where, out)
		return ""
	}
	wantIn := func(line string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("row lacks %q: %s", w, line)
			}
		}
	}
	wantIn(row(targetHalf, "W1×1 "), "10.0 s vs 8.0 s", "**missed** by 2.0 s (+25%)", "4.0 and 1.0 s", "against 6.0 and 1.0")
	wantIn(row(targetHalf, "W1×10 "), "70.0 s vs 80.0 s", "| met |")
	wantIn(row(targetW1Ratio, "W1×1 "), "(1.50x)", "**missed** by 1.00x short")
	wantIn(row(targetLimit, "W2 "), "92.0 vs 100.0 (92%; the built-in 80%)", "| met |")
	wantIn(row(targetAPI, "W1×1 "), "29.0 vs 30.0", "| met |")
	wantIn(row(targetAPI, "W2 "), "14.0 vs 13.0", "**missed** by 1.0 (+8%)")
	wantIn(row(targetAPIGrowth, "W1×1 "), "+7% vs +20%", "| met |")
	wantIn(row(targetControllerGrowth, "W1×1 "), "4.00 to 4.20 ms (+5.0%); kube-controller-manager +67%", "| met |")
	wantIn(row(targetControllerGrowth, "W4 "), "4.60 vs 4.00 ms (+15.0%)", "**missed** by 5.0 points")
	wantIn(row(targetRSSPerJob, "W1×1 "), "13.7 KiB vs 28.7 KiB", "| met |")
	wantIn(row(targetFirstPod, "W4 "), "15.0 s vs 8.0 s (1.9x); the built-in 130.0 s vs 10.0 s (13.0x)", "| met |")
	wantIn(row(targetQuota, "W6 "), "at most 100 vs 100 pods (quota 500)", "| met |")
	wantIn(row(targetExact, "every workload"), "5 of 5 SafeJob runs exact", "| met |")
	if !strings.Contains(out, whyAPIServer) || !strings.Contains(out, whyHalf) {
		t.Errorf("a missed target's cause is not listed:\n%s", out)
	}
	if strings.Contains(out, whyLimit) || strings.Contains(out, whyFirstPod) {
		t.Errorf("a met target's cause is listed as a miss's:\n%s", out)
	}

	// A SafeJob run that broke exactness, one that passed its quota, and
	// a controller that grew too much fail their rows.
	results[len(results)-1].PeakActivePods = 501
	results[2].Inexact = "1 pod created beyond the completions"
	results[5].CPUSec = 4.6 * 10 // W1×10: 4.6 ms per completion, 15% above W1×1's
	out = targetsSection(ws, results)
	wantIn(row(targetControllerGrowth, "W1×1 "), "4.00 to 4.60 ms (+15.0%)", "**missed** by 5.0 points")
	wantIn(row(targetQuota, "W6 "), "**missed** by 1 pods")
	wantIn(row(targetExact, "every workload"), "4 of 5 SafeJob runs exact", "**missed** by W1×1 repeat 1: 1 pod created beyond")
}
