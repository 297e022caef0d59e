package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestAllCPUCountsEachProcessOnce(t *testing.T) {
	cluster := map[string]float64{"kube-apiserver": 10, "etcd": 2, "kube-scheduler": 1, "kwok": 3,
		"kube-controller-manager": 4, "bench": 1}
	cases := []struct {
		mode string
		want float64 // ms per completion, for 1,000 completions
	}{
		// kube-controller-manager is the controller: counted once, as CPUSec.
		{modeBuiltin, 1000 * (4 + 10 + 2 + 1 + 3 + 1) / 1000.0},
		{modeBuiltinDefault, 1000 * (4 + 10 + 2 + 1 + 3 + 1) / 1000.0},
		// The operator and kube-controller-manager's garbage collector both count.
		{modeSafeJob, 1000 * (5 + 10 + 2 + 1 + 3 + 4 + 1) / 1000.0},
		{modeLimit, 1000 * (10 + 2 + 1 + 3 + 4 + 1) / 1000.0},
	}
	for _, tc := range cases {
		r := result{Mode: tc.mode, Completions: 1000, ClusterCPUSec: cluster}
		switch tc.mode {
		case modeBuiltin, modeBuiltinDefault:
			r.CPUSec = 4
		case modeSafeJob:
			r.CPUSec = 5
		}
		if got := r.allCPU(); got != tc.want {
			t.Errorf("%s: all CPU %.2f ms/completion, want %.2f", tc.mode, got, tc.want)
		}
	}
}

func TestReportShowsCPUByProcess(t *testing.T) {
	w := workload{Name: "W9", Desc: "test", Jobs: 1, Completions: 100}
	mk := func(m string, ctl, api float64) result {
		return result{Workload: "W9", Mode: m, Repeat: 1, Completions: 100, PerSecond: 10, CPUSec: ctl, LargestStatusBytes: int(ctl * 2048),
			ClusterCPUSec: map[string]float64{"kube-apiserver": api, "kube-controller-manager": 0.5, "bench": 0.1}}
	}
	results := []result{mk(modeLimit, 0, 1), mk(modeBuiltin, 0.5, 1.5), mk(modeSafeJob, 0.3, 2)}
	out := report(options{repeats: 1, scale: 1, raisedQPS: 200, podDuration: "1s"}, []workload{w}, results,
		[]result{{Workload: "W9", Mode: modeSafeJob, Repeat: 2, Failed: "timed out"}}, "c.png", time.Minute)
	wantLines(t, out, "| all CPU ms/completion |", "| controller | – | 5.00 | 3.00 |", "| kube-controller-manager | 5.00 | – | 5.00 |",
		"| **all** | 16.00 | 21.00 | 29.00 |", "- W9 SafeJob repeat 2: timed out", "largest status seen: SafeJob 0.6 KiB, built-in 1.0 KiB")
}

// TestRecorderRecoversWhatTheWatchMissed: the final list records a pod the
// watch never showed and a success it missed, each counted once, timed by
// the pod's finish; what the watch had already seen is not counted again.
func TestRecorderRecoversWhatTheWatchMissed(t *testing.T) {
	r := newRecorder(ctrlLimit)
	r.ownerLabel = "job"
	finished := time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)
	pod := func(uid string, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Labels: map[string]string{"job": "j-" + uid}},
			Status: corev1.PodStatus{Phase: phase}}
		if phase == corev1.PodSucceeded {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(finished)}}}}
		}
		return p
	}
	r.see(pod("a", corev1.PodRunning))   // seen running; its success is missed
	r.see(pod("b", corev1.PodSucceeded)) // seen whole
	for _, p := range []*corev1.Pod{pod("a", corev1.PodSucceeded), pod("b", corev1.PodSucceeded), pod("c", corev1.PodSucceeded)} {
		r.seeAt(p, finishedAt(p), listed)
	}
	if r.peakActive != 1 || r.active != 0 {
		t.Errorf("active %d, peak %d; want 0 and 1: a ran, then b was seen ended", r.active, r.peakActive)
	}
	if r.recovered != 2 || len(r.seen) != 3 || len(r.succeeded) != 3 {
		t.Fatalf("recovered %d, seen %d, succeeded %d; want 2, 3, 3", r.recovered, len(r.seen), len(r.succeeded))
	}
	if !r.succeeded["a"].Equal(finished) || !r.succeeded["c"].Equal(finished) || r.succeeded["b"].Equal(finished) {
		t.Errorf("success times %v: recovered ones from the finish time, the watched one from the watch", r.succeeded)
	}
}

// TestChartWritesPNGAndSVG draws the chart of two workloads from results.
func TestChartWritesPNGAndSVG(t *testing.T) {
	dir := t.TempDir()
	ws := []workload{{Name: "W1", Desc: "one", Jobs: 2, Completions: 1}, {Name: "W2", Desc: "two", Jobs: 1, Completions: 2}}
	var results []result
	for _, w := range ws {
		for _, m := range []string{modeLimit, modeBuiltin, modeSafeJob, modeBuiltinDefault} {
			results = append(results, result{Workload: w.Name, Mode: m, Repeat: 1, CompletionTimes: []float64{1, 2.5}})
		}
	}
	png := filepath.Join(dir, "chart.png")
	if err := writeChart(png, ws, results); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{png, filepath.Join(dir, "chart.svg")} {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v, %v", f, st, err)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "chart.svg"))
	if err != nil || !strings.Contains(string(svg), "pods succeeded") || !strings.Contains(string(svg), "SafeJob") {
		t.Errorf("the SVG lacks its axis label or legend (%v)", err)
	}
}

// TestSelectWorkloads: -sizes runs each workload at each size under its
// own name.
func TestSelectWorkloads(t *testing.T) {
	all := map[string]workload{"W1": {Name: "W1", Desc: "jobs", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W4": {Name: "W4", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W5": {Name: "W5", Jobs: 1, Completions: 100000, Parallelism: 2000}}
	describe := func(ws []workload) string {
		var out []string
		for _, w := range ws {
			out = append(out, fmt.Sprintf("%s(%s) %dx%d/%d", w.Name, w.Base, w.Jobs, w.Completions, w.Parallelism))
		}
		return strings.Join(out, ", ")
	}
	for _, c := range []struct {
		names, sizes string
		scale        float64
		want         string
	}{
		{"W1", "1,10", 0.5, "W1×1(W1) 500x1/1, W1×10(W1) 5000x1/1"},
		{"W1", "", 1, "W1() 1000x1/1"},
		{"W1,W4", "W1:10 W4:1", 1, "W1×10(W1) 10000x1/1, W4() 1000x1/1"},
		{"W1,W5", "1,3 W5:0.01,1", 1, "W1×1(W1) 1000x1/1, W1×3(W1) 3000x1/1, W5×0.01(W5) 1x1000/1000, W5×1(W5) 1x100000/2000"},
	} {
		ws, err := selectWorkloads(all, c.names, c.sizes, c.scale)
		if got := describe(ws); err != nil || got != c.want {
			t.Errorf("%s at %q: %s, %v; want %s", c.names, c.sizes, got, err, c.want)
		}
	}
	if _, err := selectWorkloads(all, "W1", "1,x", 1); err == nil {
		t.Error("a size that is not a number accepted")
	}
}

// TestSizeSection: the report and chart compare a workload's sizes
// against the targets.
func TestSizeSection(t *testing.T) {
	all := map[string]workload{"W1": {Name: "W1", Desc: "jobs", Jobs: 1000, Completions: 1, Parallelism: 1}}
	ws, err := selectWorkloads(all, "W1", "1,10", 0.5)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(w workload, m string, api, ctl, rss float64) result {
		return result{Workload: w.Name, Base: w.Base, Size: w.Size, Mode: m, Repeat: 1, Completions: w.total(), PerSecond: 50,
			CPUSec: ctl * float64(w.total()) / 1000, PeakRSSMiB: rss, CompletionTimes: []float64{1, 2},
			ClusterCPUSec: map[string]float64{"kube-apiserver": api * float64(w.total()) / 1000}}
	}
	results := []result{
		mk(ws[0], modeLimit, 10, 0, 0), mk(ws[0], modeBuiltin, 20, 6, 100), mk(ws[0], modeSafeJob, 25, 4, 80),
		mk(ws[1], modeLimit, 12, 0, 0), mk(ws[1], modeBuiltin, 22, 8, 220), mk(ws[1], modeSafeJob, 30, 4.2, 180),
	}
	wantLines(t, sizeSection(ws, results), "## W1 by size", "| ×10 | 5000 |", "SafeJob +20%, built-in +10%, the limit +20%",
		"SafeJob +5%, kube-controller-manager +33%", "SafeJob 22.8 KiB, kube-controller-manager 27.3 KiB")
	// A controller that timed out at the largest size: "-" there, its
	// growth over the sizes it finished, never a drop to zero.
	ws3, err := selectWorkloads(all, "W1", "1,10,20", 0.5)
	if err != nil {
		t.Fatal(err)
	}
	partial := append(slices.Clone(results), mk(ws3[2], modeLimit, 15, 0, 0))
	wantLines(t, sizeSection(ws3, partial), "| ×20 | 10000 | 50.0 / - / - | - | - / - | 15.0 / - / - |",
		"SafeJob +20% (×1 to ×10, the sizes it finished), built-in +10% (×1 to ×10, the sizes it finished), the limit +50%")
	if out := sizeSection(ws3, partial); strings.Contains(out, "-100%") {
		t.Errorf("a run that did not finish counted as a drop:\n%s", out)
	}
	dir := t.TempDir()
	path := sizeChartPath(filepath.Join(dir, "b.png"))
	if err := writeSizeChart(path, results); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, strings.TrimSuffix(path, ".png") + ".svg"} {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if err := writeSizeChart(filepath.Join(dir, "none.png"), results[:0]); err != nil {
		t.Errorf("no sizes: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.png")); err == nil {
		t.Error("a chart by size written without sizes")
	}
}

func TestExactness(t *testing.T) {
	for _, c := range []struct {
		r    result
		want string
	}{
		{result{Completions: 10, PodsSucceeded: 10, Reported: 10}, ""},
		{result{Completions: 10, PodsSucceeded: 10, Reported: 10, ExtraPods: 2}, "2 extra pods"},
		{result{Completions: 10, PodsSucceeded: 9, Reported: 10}, "1 completions counted without a pod that succeeded, 1 of 10 completions lost"},
		{result{Completions: 10, PodsSucceeded: 10, Reported: 10, Unseen: 1}, "1 pods created that no watch or list showed"},
		{result{Completions: 10, PodsSucceeded: 10, Reported: 10, Quota: 5, PeakActivePods: 5}, ""},
		{result{Completions: 10, PodsSucceeded: 10, Reported: 10, Quota: 5, PeakActivePods: 6}, "6 pods at once under a quota of 5"},
	} {
		if got := c.r.exactness(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

// TestMeasureJudgesExactness: a run is judged on all its counts, the
// completions the jobs reported among them.
func TestMeasureJudgesExactness(t *testing.T) {
	now := time.Now()
	rec := &recorder{seen: map[string]time.Time{}, succeeded: map[string]time.Time{}, reported: map[string]int{"j-0": 3}}
	for _, uid := range []string{"a", "b"} {
		rec.seen[uid], rec.succeeded[uid] = now, now
	}
	w := workload{Name: "W", Jobs: 1, Completions: 3, Parallelism: 3}
	end := runEnd{complete: now.Add(time.Second), released: now.Add(3 * time.Second)}
	res := measure(w, mode{Name: modeBuiltin, Controller: ctrlBuiltin}, 1, now, end, nil, rec,
		map[string]int{}, map[string]int{"created:pods": 2}, 0, 0)
	if want := "1 completions counted without a pod that succeeded, 1 of 3 completions lost"; res.Inexact != want {
		t.Errorf("judged %q, want %q", res.Inexact, want)
	}
	if res.MakespanSec != 1 || res.LastReleasedSec != 3 {
		t.Errorf("makespan %.1f s, last pod released %.1f s; want 1 and 3", res.MakespanSec, res.LastReleasedSec)
	}
}

// wantLines fails the test for each text out lacks.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q:\n%s", w, out)
		}
	}
}

func TestStatusBytes(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{}
	empty := statusBytes(sj)
	sj.Status.Ledger.Entries = []batchv1alpha1.LedgerEntry{{Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "j-0-0"}}
	if grown := statusBytes(sj); empty <= 0 || grown <= empty {
		t.Errorf("status bytes %d, then %d with a ledger entry", empty, grown)
	}
	if statusBytes(&batchv1.Job{}) <= 0 || statusBytes("not a job") != 0 {
		t.Error("a Job's status has a size; anything else none")
	}
}

// TestOperatorRev: a binary that cannot be read, or records no commit, is
// said to be so in the report rather than taken for the tree's commit.
func TestOperatorRev(t *testing.T) {
	if got := operatorRev(filepath.Join(t.TempDir(), "none"), "abc"); !strings.Contains(got, "unreadable") {
		t.Errorf("missing binary: %q", got)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got := operatorRev(exe, "abc"); strings.HasPrefix(got, "commit abc") {
		t.Errorf("the test binary read as the tree's commit: %q", got)
	}
}

func TestPerMinute(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	times := map[string]time.Time{
		"a": start.Add(10 * time.Second),
		"b": start.Add(59 * time.Second),
		"c": start.Add(60 * time.Second),
		"d": start.Add(185 * time.Second),
		"e": start.Add(-time.Second), // seen before the first create: the first minute
	}
	if got, want := perMinute(times, start), "per minute 3 1 0 1"; got != want {
		t.Errorf("perMinute = %q, want %q", got, want)
	}
	if got, want := perMinute(nil, start), "per minute "; got != want {
		t.Errorf("perMinute(none) = %q, want %q", got, want)
	}
}

// TestClusterOptions: both controllers at the raised rate meet the same
// cluster (kube-controller-manager's pod GC and garbage collector, Kueue at
// that rate), and so does the limit; at the defaults, both keep theirs.
func TestClusterOptions(t *testing.T) {
	o := options{raisedQPS: 200}
	w := workload{Name: "W6", Quota: 500}
	for _, tc := range []struct {
		m             mode
		kcm, kueueQPS int
	}{
		{mode{modeBuiltin, ctrlBuiltin, 200}, 200, 200},
		{mode{modeSafeJob, ctrlSafeJob, 200}, 200, 200},
		{mode{modeLimit, ctrlLimit, 0}, 200, 0},
		{mode{modeBuiltinDefault, ctrlBuiltin, 0}, 0, 0},
		{mode{modeSafeJobDefault, ctrlSafeJob, 0}, 0, 0},
	} {
		got := clusterOptions(o, w, tc.m, "/tmp/run")
		if got.ControllerManagerQPS != tc.kcm || got.KueueQPS != tc.kueueQPS || !got.Kueue || got.Dir != "/tmp/run" {
			t.Errorf("%s: kube-controller-manager QPS %d, Kueue QPS %d (queue %v), want %d and %d",
				tc.m.Name, got.ControllerManagerQPS, got.KueueQPS, got.Kueue, tc.kcm, tc.kueueQPS)
		}
	}
}

// TestSummariseWorstExtraPods: the extra-pods column shows the repeat
// furthest from none, whichever side: fewer pods than completions is as
// wrong as more.
func TestSummariseWorstExtraPods(t *testing.T) {
	for _, tc := range []struct {
		extra []int
		want  int
	}{
		{[]int{-68, -516, -69}, -516},
		{[]int{2, -1, 0}, 2},
		{[]int{0, 0, 0}, 0},
	} {
		var results []result
		for i, e := range tc.extra {
			results = append(results, result{Workload: "W2", Mode: modeBuiltin, Repeat: i + 1, Completions: 15000,
				ExtraPods: e, PerSecond: 60})
		}
		s, ok := summarise(results, "W2", modeBuiltin)
		if !ok || s.extra != tc.want {
			t.Errorf("extra pods %v: summarised as %d, want %d", tc.extra, s.extra, tc.want)
		}
	}
}

// TestStatusWriteKinds: the report gives the median over repeats of each
// kind of status write per completion, a kind one repeat never counted
// being none there.
func TestStatusWriteKinds(t *testing.T) {
	results := []result{
		{Workload: "W3", Mode: modeSafeJob, Repeat: 1, Completions: 1000, PerSecond: 60,
			StatusWrites: map[string]int{"ledger": 1193, "counts": 635, "other": 3}},
		{Workload: "W3", Mode: modeSafeJob, Repeat: 2, Completions: 1000, PerSecond: 60,
			StatusWrites: map[string]int{"ledger": 1162, "counts": 556}},
		{Workload: "W3", Mode: modeSafeJob, Repeat: 3, Completions: 1000, PerSecond: 60,
			StatusWrites: map[string]int{"ledger": 1200, "counts": 600, "other": 1}},
		{Workload: "W3", Mode: modeBuiltin, Repeat: 1, Completions: 1000, PerSecond: 60},
	}
	sj, _ := summarise(results, "W3", modeSafeJob)
	want := "- the operator's SafeJob status writes per completion by kind (`safejob_status_writes_total`; counts: " +
		"only active, ready or terminating changed): counts 0.60, ledger 1.19, other 0.00\n"
	if got := statusWriteKinds(sj); got != want {
		t.Errorf("statusWriteKinds = %q, want %q", got, want)
	}
	bi, _ := summarise(results, "W3", modeBuiltin)
	if got := statusWriteKinds(bi); got != "" {
		t.Errorf("statusWriteKinds of the built-in = %q, want nothing", got)
	}
}

func TestContextSwitchLine(t *testing.T) {
	results := []result{
		{Workload: "W5", Mode: modeBuiltin, Completions: 1000, ContextSwitches: 120_000},
		{Workload: "W5", Mode: modeSafeJob, Completions: 1000, ContextSwitches: 150_000},
		{Workload: "W5", Mode: modeSafeJob, Completions: 1000, ContextSwitches: 170_000},
		{Workload: "W5", Mode: modeSafeJob, Completions: 1000, ContextSwitches: 190_000},
		// Recorded before the count existed, or for another workload: left out.
		{Workload: "W5", Mode: modeBuiltin, Completions: 1000},
		{Workload: "W1", Mode: modeBuiltin, Completions: 1000, ContextSwitches: 1},
	}
	want := "- the machine's context switches per completion, every process (medians): built-in 120, SafeJob 170\n"
	if got := contextSwitchLine(results, "W5"); got != want {
		t.Errorf("contextSwitchLine = %q, want %q", got, want)
	}
	if got := contextSwitchLine(results[4:5], "W5"); got != "" {
		t.Errorf("contextSwitchLine without counts = %q, want nothing", got)
	}
}

func TestContextSwitchesReadsProcStat(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat here")
	}
	a := readMachine().ctxt
	if a <= 0 {
		t.Fatalf("readMachine().ctxt = %d, want the machine's count since boot", a)
	}
	if b := readMachine().ctxt; b < a {
		t.Errorf("readMachine().ctxt went back from %d to %d", a, b)
	}
}

func TestPerCompletionByName(t *testing.T) {
	got := perCompletion(map[string]int64{"kwok": 3000, "bench": 500, "controller": 12_345}, 100)
	if want := "bench 5, controller 123, kwok 30"; got != want {
		t.Errorf("perCompletion = %q, want %q", got, want)
	}
}

func TestProcessSwitchesCountsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc here")
	}
	if n := processSwitches(os.Getpid()); n <= 0 {
		t.Errorf("processSwitches(self) = %d, want the switches of this process's threads", n)
	}
	if n := processSwitches(-1); n != 0 {
		t.Errorf("processSwitches(no such process) = %d, want 0", n)
	}
}

// TestRatesSayWhatRan: the paragraph on rates names the repeats and the
// default-rate rows the results hold, not this command's flags (a report
// of merged raw results runs nothing and keeps -repeats at its default).
func TestRatesSayWhatRan(t *testing.T) {
	w := workload{Name: "W9", Desc: "test", Jobs: 1, Completions: 100}
	mk := func(m string, repeat int) result {
		return result{Workload: "W9", Mode: m, Repeat: repeat, Completions: 100, PerSecond: 10,
			ClusterCPUSec: map[string]float64{"kube-apiserver": 1}}
	}
	o := options{repeats: 3, scale: 1, raisedQPS: 200, podDuration: "1s", reportOnly: true}
	failedDefault := []result{{Workload: "W9", Mode: modeSafeJobDefault, Repeat: 1, Failed: "timed out"}}
	once := report(o, []workload{w}, []result{mk(modeBuiltin, 1), mk(modeSafeJob, 1)}, failedDefault, "c.png", time.Minute)
	wantLines(t, once, "One run of each workload and mode: figures of one run, not medians.")
	for _, not := range []string{"Medians over", "default rate\" rows"} {
		if strings.Contains(once, not) {
			t.Errorf("a report of single runs without default-rate rows (one failed) says %q", not)
		}
	}
	o.repeats = 1
	var three []result
	for i := 1; i <= 3; i++ {
		three = append(three, mk(modeBuiltin, i), mk(modeSafeJob, i))
	}
	three = append(three, mk(modeSafeJobDefault, 1))
	out := report(o, []workload{w}, three, []result{{Workload: "W9", Mode: modeBuiltin, Repeat: 4, Failed: "timed out"}}, "c.png", time.Minute)
	wantLines(t, out, "\"default rate\" rows keep each controller's own default", "Medians over 3 repeats, the pair alternating")
	// Merged: W9 three times, W8 once.
	w8 := workload{Name: "W8", Desc: "merged", Jobs: 1, Completions: 100}
	one := mk(modeSafeJob, 1)
	one.Workload = "W8"
	mixed := report(o, []workload{w, w8}, append(three[:6:6], one), nil, "c.png", time.Minute)
	wantLines(t, mixed, "Medians over up to 3 repeats (the runs column gives each row's)")
}
