package main

import (
	"cmp"
	"debug/buildinfo"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

// summary is the median over the repeats of one workload under one mode.
type summary struct {
	runs                                         int
	makespan, perSec, p50, p99, writes, cpu, rss float64
	apiCPU, allCPU, busy                         float64
	// half and last are when half the pods and the last pod had succeeded,
	// seconds after the first create; released when the last pod was let
	// go of by its controller (0: no run measured it).
	half, last, released float64
	// reconciles is the operator's reconcile passes per completion (0 for
	// another controller, or a run from before it was counted).
	reconciles float64
	// statusWrites is the operator's SafeJob status writes per completion
	// by kind (none for another controller, or a run from before they
	// were counted).
	statusWrites map[string]float64
	recovered    int
	// cpuBy is the median CPU ms per completion of each process.
	cpuBy        map[string]float64
	extra, noPod int
	byRes        map[string]int
	// conflicts is byRes' writes refused for a stale resourceVersion.
	conflicts map[string]int
}

// releasedP50 is the median over a mode's runs of when the last pod was
// released, over the runs that measured it.
func releasedP50(results []result, w, m string) float64 {
	return measuredP50(results, w, m, func(r *result) float64 { return r.LastReleasedSec })
}

// measuredP50 is the median of a figure over a mode's runs, over the runs
// that measured it (a zero figure is one not measured).
func measuredP50(results []result, w, m string, figure func(*result) float64) float64 {
	var xs []float64
	for i := range results {
		if r := &results[i]; r.Workload == w && r.Mode == m && figure(r) > 0 {
			xs = append(xs, figure(r))
		}
	}
	return median(xs)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func summarise(results []result, w, m string) (summary, bool) {
	var s summary
	var mk, ps, p50, p99, wr, cpu, rss, api, all, busy, half, last, rec []float64
	cpuBy := map[string][]float64{}
	var statusRuns []result
	for _, r := range results {
		if r.Workload != w || r.Mode != m {
			continue
		}
		s.runs++
		mk, ps, p50, p99 = append(mk, r.MakespanSec), append(ps, r.PerSecond), append(p50, r.FirstPodP50Sec), append(p99, r.FirstPodP99Sec)
		wr, cpu, rss = append(wr, r.WritesPerCompl), append(cpu, r.CPUSec), append(rss, r.PeakRSSMiB)
		api, busy = append(api, r.ClusterCPUSec["kube-apiserver"]/float64(r.Completions)*1000), append(busy, 100*r.MachineBusy)
		all = append(all, r.allCPU())
		if n := len(r.CompletionTimes); n > 0 {
			half, last = append(half, r.CompletionTimes[(n-1)/2]), append(last, r.CompletionTimes[n-1])
		}
		s.recovered = max(s.recovered, r.Recovered+r.Unseen)
		if r.Reconciles > 0 && r.Completions > 0 {
			rec = append(rec, float64(r.Reconciles)/float64(r.Completions))
		}
		if len(r.StatusWrites) > 0 && r.Completions > 0 {
			statusRuns = append(statusRuns, r)
		}
		for name, ms := range r.cpuByProcess() {
			cpuBy[name] = append(cpuBy[name], ms)
		}
		// The worst repeat, furthest from none either way: extra pods may
		// be negative (fewer pods than completions: completions counted
		// without a pod) and are shown as they are.
		if s.runs == 1 || abs(r.ExtraPods) > abs(s.extra) {
			s.extra = r.ExtraPods
		}
		s.noPod = max(s.noPod, r.noPod())
		if s.byRes == nil {
			s.byRes, s.conflicts = r.WritesByRes, r.Conflicts
		}
	}
	s.makespan, s.perSec, s.p50, s.p99 = median(mk), median(ps), median(p50), median(p99)
	s.writes, s.cpu, s.rss = median(wr), median(cpu), median(rss)
	s.apiCPU, s.allCPU, s.busy = median(api), median(all), median(busy)
	s.half, s.last, s.released, s.reconciles = median(half), median(last), releasedP50(results, w, m), median(rec)
	s.cpuBy = map[string]float64{}
	for name, ms := range cpuBy {
		s.cpuBy[name] = median(ms)
	}
	s.statusWrites = statusWritesPer(statusRuns)
	return s, s.runs > 0
}

// The modes (rows) and the controllers they run.
const (
	modeLimit          = "limit"
	modeBuiltin        = "built-in"
	modeSafeJob        = "SafeJob"
	modeBuiltinDefault = "built-in (default rate)"
	modeSafeJobDefault = "SafeJob (default rate)"

	ctrlLimit   = "limit"
	ctrlBuiltin = "builtin"
	ctrlSafeJob = "safejob"
)

var modeOrder = []string{modeLimit, modeBuiltin, modeSafeJob, modeBuiltinDefault, modeSafeJobDefault}

// repeatsSaid ends the report's paragraph on rates with what its runs are,
// read from the results themselves (failed runs have no row, and are
// listed apart): how many runs each row's medians are over and whether the
// default-rate rows are there. A report of merged raw results (-merge) so
// says what was run, not what this command's flags would have run.
func repeatsSaid(results []result) string {
	runs, defaults := map[string]int{}, false
	for _, r := range results {
		switch r.Mode {
		case modeBuiltinDefault, modeSafeJobDefault:
			defaults = true
		default:
			runs[r.Workload+"\x00"+r.Mode]++
		}
	}
	most, least := 0, 0
	for _, n := range runs {
		most = max(most, n)
		if least == 0 || n < least {
			least = n
		}
	}
	s := "."
	if defaults {
		s = "; the\n\"default rate\" rows keep each controller's own default (kube-controller-manager 20 QPS / 30 burst,\n" +
			"SafeJob 100 / 200) and ran once."
	}
	switch {
	case most > 1 && least < most:
		s += fmt.Sprintf("\nMedians over up to %d repeats (the runs column gives each row's), the pair alternating which goes first.", most)
	case most > 1:
		s += fmt.Sprintf(" Medians over %d repeats, the pair alternating which goes first.", most)
	case most == 1:
		s += "\nOne run of each workload and mode: figures of one run, not medians."
	}
	return s
}

func report(o options, ws []workload, results, failedRuns []result, chart string, took time.Duration) string {
	failed := failedLines(results, failedRuns)
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\nSafeJob against the built-in Job controller of kube-controller-manager, side by side on the same\n")
	fmt.Fprintf(&b, "local cluster (real kube-apiserver, etcd, kube-scheduler and kube-controller-manager, KWOK nodes), and\n")
	fmt.Fprintf(&b, "against **the limit**: a client that creates the same pods directly (no controller), keeping the same\n")
	fmt.Fprintf(&b, "parallelism, and lets KWOK finish them. Every run gets a fresh cluster.\n\n")
	if o.reportOnly {
		fmt.Fprintf(&b, "Command: `go run ./hack/bench %s`: no run, a report of the raw results of the runs below.\n\n",
			strings.Join(o.args, " "))
		fmt.Fprintf(&b, "Machine: %s. Versions: Go %s, Kubernetes %s (built from source), KWOK %s, SafeJob as each run "+
			"names.\n\n", machine(), strings.TrimPrefix(runtime.Version(), "go"), testutil.K8sVersion(), testutil.KWOKVersion())
	} else {
		spent := fmt.Sprintf("%s in all", took.Round(time.Second))
		if len(o.done) > 0 {
			spent = fmt.Sprintf("resumed (-resume) after %d runs, %s since", len(o.done), took.Round(time.Second))
		}
		fmt.Fprintf(&b, "Command: `go run ./hack/bench %s` (with -repeats %d -scale %g -qps %d -pod-duration %s), %s.\n\n",
			strings.Join(o.args, " "), o.repeats, o.scale, o.raisedQPS, o.podDuration, spent)
		fmt.Fprintf(&b, "Machine: %s. Versions: Go %s, Kubernetes %s (built from source), KWOK %s, SafeJob %s.\n\n",
			machine(), strings.TrimPrefix(runtime.Version(), "go"), testutil.K8sVersion(), testutil.KWOKVersion(), o.rev)
	}
	if len(o.earlier) > 0 {
		fmt.Fprintf(&b, "Merged (`-merge`) with the raw results of runs made apart, each on the same machine and harness: %s.\n\n",
			strings.Join(o.earlier, "; "))
	}
	fmt.Fprintf(&b, "Rates: \"built-in\" and \"SafeJob\" run at the same raised client rate (%d QPS, burst %d; through a\n",
		o.raisedQPS, 2*o.raisedQPS)
	fmt.Fprintf(&b, "queue, Kueue's manager too, whose Job integration does part of the built-in's work), and so does\n")
	fmt.Fprintf(&b, "kube-controller-manager's pod GC in both of those modes and in the limit's runs%s\n\n", repeatsSaid(results))
	fmt.Fprintf(&b, "Columns: makespan from the first create to the last job `Complete`; last pod released from the first\n")
	fmt.Fprintf(&b, "create until the last pod was let go of by its controller (medians): ended and no longer holding the\n")
	fmt.Fprintf(&b, "finalizer the controller keeps on it until it has counted its end (`%s`\n", batchv1.JobTrackingFinalizer)
	fmt.Fprintf(&b, "for the built-in, `%s` for SafeJob; the limit's pods carry none), or deleted;\n", batchv1alpha1.LedgerFinalizer)
	fmt.Fprintf(&b, "\"-\" for runs from before it was measured. The built-in controller lets go of every pod before it\n")
	fmt.Fprintf(&b, "marks its Job `Complete`, SafeJob marks a SafeJob `Complete` and lets go of its pods after, so either\n")
	fmt.Fprintf(&b, "end alone favours one of them: both are given, completions/s from the makespan; first-pod latency from a job's\n")
	fmt.Fprintf(&b, "create to its first pod; writes per completion from the API server's `apiserver_request_total`\n")
	fmt.Fprintf(&b, "(POST, PUT, PATCH, DELETE; every client: controllers, scheduler, KWOK, the submitting client);\n")
	fmt.Fprintf(&b, "CPU and peak RSS of the controller process (`/proc`; for the built-in controller the whole\n")
	fmt.Fprintf(&b, "kube-controller-manager); kube-apiserver CPU milliseconds per completion; all CPU milliseconds per\n")
	fmt.Fprintf(&b, "completion, of every process the run measured (controller, kube-apiserver, etcd, kube-scheduler, KWOK,\n")
	fmt.Fprintf(&b, "kube-controller-manager, which runs the garbage collector in every mode, and the bench's own client\n")
	fmt.Fprintf(&b, "and watches): on 2 cores every component competes for the same CPU, so this sum sets the throughput;\n")
	fmt.Fprintf(&b, "how busy the whole machine was (all from `/proc`); extra pods =\n")
	fmt.Fprintf(&b, "pods created (the API server's count of successful pod creates) − completions, worst repeat, shown\n")
	fmt.Fprintf(&b, "as it is (negative: fewer pods than completions); completions without a pod = the jobs' own\n")
	fmt.Fprintf(&b, "`status.succeeded` at the end − distinct pods seen to succeed, worst repeat: the bench's watch, and\n")
	fmt.Fprintf(&b, "at the end a list of every pod from the API server, which recovers what the watch missed; half / last\n")
	fmt.Fprintf(&b, "pod succeeded: when half the pods, and the last, had succeeded, from the first create (medians).\n\n")
	b.WriteString(targetsSection(ws, results, failedRuns))
	for _, w := range ws {
		fmt.Fprintf(&b, "## %s: %s\n\n", w.Name, w.Desc)
		fmt.Fprintf(&b, "| mode | runs | makespan s | last pod released s | completions/s | half / last pod succeeded s "+
			"| first pod p50 / p99 s | writes/completion | CPU s | peak RSS MiB | apiserver CPU ms/completion "+
			"| all CPU ms/completion | machine busy | extra pods | completions without a pod |\n")
		fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, m := range modeOrder {
			s, ok := summarise(results, w.Name, m)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %.1f | %s | %.1f | %.1f / %.1f | %.2f / %.2f | %.2f | %.1f | %.0f | %.1f | %.1f "+
				"| %.0f%% | %d | %d |\n", m, s.runs, s.makespan, orDash("%.1f", s.released), s.perSec, s.half, s.last, s.p50, s.p99,
				s.writes, s.cpu, s.rss, s.apiCPU, s.allCPU, s.busy, s.extra, s.noPod)
		}
		b.WriteString("\n")
		b.WriteString(verdict(results, w.Name))
		b.WriteString(writesTable(results, w.Name))
		b.WriteString(cpuTable(results, w.Name))
	}
	if len(failed) > 0 {
		b.WriteString("## Failed runs\n\nA run that passes `-timeout` has no row above; one that breaks exactness is " +
			"counted above but is a failed run, not a slow one.\n\n")
		for _, f := range failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	if sizes := sizeSection(ws, results); sizes != "" {
		b.WriteString(sizes)
		fmt.Fprintf(&b, "![cost per completion by size](%s)\n\n", strings.TrimSuffix(sizeChartPath(chart), ".png")+".svg")
	}
	svg := strings.TrimSuffix(chart, filepath.Ext(chart)) + ".svg"
	fmt.Fprintf(&b, "![pods succeeded over time](%s)\n\n(The same chart as a bitmap: [%s](%s).)\n\n", svg, chart, chart)
	b.WriteString(hotPathsPointer)
	fmt.Fprintf(&b, "Raw results of every run: `%s` (not kept in the repository; `-merge` takes it).\n",
		cmp.Or(o.jsonOut, "bench-results.json"))
	return b.String()
}

// hotPathsPointer says where the profiles of the runs are read: a report
// holds what a run measures, the reading of its profiles is written by hand.
const hotPathsPointer = "Where the time goes: the CPU profiles' hot paths (the operator and kube-apiserver at the " +
	"largest sizes) and what was changed because of them are in [docs/performance.md](docs/performance.md) " +
	"(\"Hot paths at the largest size\", \"The operator's own CPU at parallelism 2,000\", \"Fewer allocations per pass\").\n\n"

// verdict states the ratios the goals are about.
func verdict(results []result, w string) string {
	sj, ok1 := summarise(results, w, modeSafeJob)
	bi, ok2 := summarise(results, w, modeBuiltin)
	lim, ok3 := summarise(results, w, modeLimit)
	if !ok1 || !ok2 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- SafeJob / built-in throughput at equal rates: **%.2f** (goal ≥ 1.0 in every repeat, ≥ 2.5 on W1)%s\n",
		sj.perSec/bi.perSec, pairRatios(results, w))
	fmt.Fprintf(&b, "- writes per completion: SafeJob %.2f, built-in %.2f, difference **%+.2f** (goal ≤ 0)\n",
		sj.writes, bi.writes, sj.writes-bi.writes)
	if ok3 {
		fmt.Fprintf(&b, "- SafeJob throughput / the limit: **%.0f%%** (goal ≥ 90%% on W2); built-in: %.0f%%\n",
			100*sj.perSec/lim.perSec, 100*bi.perSec/lim.perSec)
	}
	b.WriteString(quotaLines(results, w))
	b.WriteString(closedWatchers(results, w))
	b.WriteString(kwokRewatches(results, w))
	b.WriteString(podWatchEvents(results, w))
	b.WriteString(contextSwitchLine(results, w))
	fmt.Fprintf(&b, "- largest status seen: SafeJob %s, built-in %s (target: at most 256 KiB at 100,000 completions)\n",
		kib(largestStatus(results, w, modeSafeJob)), kib(largestStatus(results, w, modeBuiltin)))
	if sj.reconciles > 0 {
		fmt.Fprintf(&b, "- the operator's reconcile passes per completion (`safejob_reconciles_total`): %.2f\n", sj.reconciles)
	}
	b.WriteString(statusWriteKinds(sj))
	fmt.Fprintf(&b, "- half the pods succeeded: SafeJob at %.1f s, built-in at %.1f s (target: SafeJob no later); "+
		"the last pod: %.1f s and %.1f s\n", sj.half, bi.half, sj.last, bi.last)
	if sj.released > 0 && bi.released > 0 {
		fmt.Fprintf(&b, "- the last pod released by its controller: SafeJob at %.1f s, built-in at %.1f s "+
			"(the last job `Complete`: %.1f s and %.1f s)\n", sj.released, bi.released, sj.makespan, bi.makespan)
	}
	for _, m := range modeOrder {
		if s, ok := summarise(results, w, m); ok && s.recovered > 0 {
			fmt.Fprintf(&b, "- %s: the pod watch had missed %d pods, successes or releases by the end (worst repeat); the final list of "+
				"every pod recovered them, and the counts above include them\n", m, s.recovered)
		}
		if s, ok := summarise(results, w, m); ok && s.noPod > 0 {
			fmt.Fprintf(&b, "- **%s counted up to %d completions without a pod that succeeded** (job status.succeeded "+
				"above the pods seen succeeding)\n", m, s.noPod)
		}
	}
	sjd, okd1 := summarise(results, w, modeSafeJobDefault)
	bid, okd2 := summarise(results, w, modeBuiltinDefault)
	if okd1 && okd2 {
		fmt.Fprintf(&b, "- at default rates: SafeJob %.1f/s, built-in %.1f/s (ratio %.2f)\n", sjd.perSec, bid.perSec, sjd.perSec/bid.perSec)
	}
	b.WriteString("\n")
	return b.String()
}

// largestStatus is the largest job status of a workload's runs in a mode.
func largestStatus(results []result, w, m string) int {
	largest := 0
	for _, r := range results {
		if r.Workload == w && r.Mode == m {
			largest = max(largest, r.LargestStatusBytes)
		}
	}
	return largest
}

// orDash formats v, or "-" for 0: not measured.
func orDash(format string, v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

// quotaLines states, for a queued workload, the most pods each run had at
// once against the queue's quota.
func quotaLines(results []result, w string) string {
	var b strings.Builder
	for _, r := range results {
		if r.Workload == w && r.Quota > 0 && (r.Mode == modeSafeJob || r.Mode == modeBuiltin) {
			fmt.Fprintf(&b, "- %s repeat %d: at most %d pods at once under a quota of %d pods\n", r.Mode, r.Repeat, r.PeakActivePods, r.Quota)
		}
	}
	return b.String()
}

// pairRatios lists the SafeJob / built-in throughput of each repeat that has
// both runs: the two ran back to back, so the machine's slow and fast spells
// weigh less on them than on the ratio of the medians.
func pairRatios(results []result, w string) string {
	xs := repeatRatios(results, w)
	ratios := make([]string, 0, len(xs))
	for _, x := range xs {
		ratios = append(ratios, fmt.Sprintf("%.2f", x))
	}
	if len(ratios) == 0 {
		return ""
	}
	return "; repeat by repeat: " + strings.Join(ratios, ", ")
}

// writesTable breaks down the writes per completion of the equal-rate pair
// by resource (the first repeat).
func writesTable(results []result, w string) string {
	sj, _ := summarise(results, w, modeSafeJob)
	bi, _ := summarise(results, w, modeBuiltin)
	lim, _ := summarise(results, w, modeLimit)
	keys := map[string]bool{}
	for _, m := range []map[string]int{sj.byRes, bi.byRes, lim.byRes} {
		for k := range m {
			keys[k] = true
		}
	}
	if len(keys) == 0 {
		return ""
	}
	var total int
	for _, r := range results {
		if r.Workload == w {
			total = r.Completions
			break
		}
	}
	var b strings.Builder
	b.WriteString("<details><summary>writes per completion by resource (first repeat; in brackets, " +
		"those refused for a stale resourceVersion, 409)</summary>\n\n")
	b.WriteString("| resource | limit | built-in | SafeJob |\n|---|---|---|---|\n")
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	per := func(s summary, k string) string {
		cell := fmt.Sprintf("%.2f", float64(s.byRes[k])/float64(total))
		if n := s.conflicts[k]; n > 0 {
			cell += fmt.Sprintf(" (%.2f)", float64(n)/float64(total))
		}
		return cell
	}
	for _, k := range sorted {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", k, per(lim, k), per(bi, k), per(sj, k))
	}
	b.WriteString("\n</details>\n\n")
	return b.String()
}

// cpuTable breaks down the CPU per completion of the equal-rate pair and
// the limit by process (medians).
func cpuTable(results []result, w string) string {
	modes := []string{modeLimit, modeBuiltin, modeSafeJob}
	sums := make([]summary, 0, len(modes))
	names := map[string]bool{}
	for _, m := range modes {
		s, _ := summarise(results, w, m)
		sums = append(sums, s)
		for name := range s.cpuBy {
			names[name] = true
		}
	}
	if len(names) == 0 {
		return ""
	}
	order := []string{"controller", "kube-apiserver", "etcd", "kube-scheduler", "kwok", kcmProcess, benchProcess}
	var b strings.Builder
	b.WriteString("<details><summary>CPU ms per completion by process (medians; kube-controller-manager beside the controller: " +
		"its garbage collector and pod GC)</summary>\n\n")
	b.WriteString("| process | limit | built-in | SafeJob |\n|---|---|---|---|\n")
	for _, name := range order {
		if !names[name] {
			continue
		}
		fmt.Fprintf(&b, "| %s |", name)
		for _, s := range sums {
			if ms, ok := s.cpuBy[name]; ok {
				fmt.Fprintf(&b, " %.2f |", ms)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "| **all** | %.2f | %.2f | %.2f |\n\n</details>\n\n", sums[0].allCPU, sums[1].allCPU, sums[2].allCPU)
	return b.String()
}

func machine() string {
	cpu := fmt.Sprintf("%d cores", runtime.NumCPU())
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu += " (" + strings.TrimSpace(strings.SplitN(l, ":", 2)[1]) + ")"
				break
			}
		}
	}
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		_, _ = fmt.Sscanf(strings.SplitN(string(raw), "\n", 2)[0], "MemTotal: %f kB", &kb)
		mem = fmt.Sprintf(", %.0f GiB RAM", kb/1024/1024)
	}
	return fmt.Sprintf("%s/%s, %s%s", runtime.GOOS, runtime.GOARCH, cpu, mem)
}

func gitRev() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// operatorRev names the commit the operator binary was built from, as its
// build information records it, and says so when that is not the tree's
// (a binary left from an earlier build measures other code).
func operatorRev(binary, head string) string {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fmt.Sprintf("(operator binary %s unreadable: %v)", binary, err)
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return fmt.Sprintf("(operator binary %s records no commit)", binary)
	case modified == "true":
		return fmt.Sprintf("commit %.7s with uncommitted changes", rev)
	case head != "" && rev != head:
		return fmt.Sprintf("commit %.7s (the operator binary's; the tree is at %.7s: rebuild it to measure the tree)", rev, head)
	}
	return fmt.Sprintf("commit %.7s", rev)
}

// sizeGroups lists, for every workload run at several sizes, its sizes in
// order: base name -> workloads.
func sizeGroups(ws []workload) (bases []string, groups map[string][]workload) {
	groups = map[string][]workload{}
	for _, w := range ws {
		if w.Base == "" {
			continue
		}
		if _, ok := groups[w.Base]; !ok {
			bases = append(bases, w.Base)
		}
		groups[w.Base] = append(groups[w.Base], w)
	}
	for _, b := range bases {
		sort.Slice(groups[b], func(i, j int) bool { return groups[b][i].Size < groups[b][j].Size })
	}
	return bases, groups
}

// controllerMS is a summary's controller CPU ms per completion.
func (s summary) controllerMS(completions int) float64 {
	return 1000 * s.cpu / float64(max(completions, 1))
}

// growth is the change from a to b in percent.
func growth(a, b float64) string {
	if a == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.0f%%", 100*(b-a)/a)
}

// sizeSection compares each workload run at several sizes: the cost per
// completion and its growth from the smallest size to the largest, against
// the targets. A mode with no figures at a size (its run timed out) shows
// "-" there, and its growth is taken over the sizes it finished.
func sizeSection(ws []workload, results []result) string {
	bases, groups := sizeGroups(ws)
	var b strings.Builder
	for _, base := range bases {
		g := groups[base]
		fmt.Fprintf(&b, "## %s by size\n\n", base)
		b.WriteString("| size | completions | completions/s: limit / built-in / SafeJob | SafeJob ÷ built-in " +
			"| half pods succeeded s: built-in / SafeJob | kube-apiserver ms/completion: limit / built-in / SafeJob " +
			"| controller ms/completion: built-in / SafeJob | writes/completion: built-in / SafeJob | peak RSS MiB: built-in / SafeJob |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
		series := map[string][]sizedSummary{}
		for _, w := range g {
			var s [3]summary
			var ok [3]bool
			for i, m := range []string{modeLimit, modeBuiltin, modeSafeJob} {
				if s[i], ok[i] = summarise(results, w.Name, m); ok[i] {
					series[m] = append(series[m], sizedSummary{w, s[i]})
				}
			}
			lim, bi, sj := s[0], s[1], s[2]
			cell := func(format string, vs ...float64) string {
				var out []string
				for i, v := range vs {
					k := i + 3 - len(vs) // the last two are built-in and SafeJob
					if !ok[k] {
						out = append(out, "-")
						continue
					}
					out = append(out, fmt.Sprintf(format, v))
				}
				return strings.Join(out, " / ")
			}
			ratio := "-"
			if ok[1] && ok[2] && bi.perSec > 0 {
				ratio = fmt.Sprintf("%.2f", sj.perSec/bi.perSec)
			}
			fmt.Fprintf(&b, "| ×%g | %d | %s | %s | %s | %s | %s | %s | %s |\n", w.Size, w.total(),
				cell("%.1f", lim.perSec, bi.perSec, sj.perSec), ratio, cell("%.1f", bi.half, sj.half),
				cell("%.1f", lim.apiCPU, bi.apiCPU, sj.apiCPU),
				cell("%.1f", bi.controllerMS(w.total()), sj.controllerMS(w.total())), cell("%.2f", bi.writes, sj.writes),
				cell("%.0f", bi.rss, sj.rss))
		}
		fw, lw := g[0], g[len(g)-1]
		api := func(x sizedSummary) float64 { return x.s.apiCPU }
		ctl := func(x sizedSummary) float64 { return x.s.controllerMS(x.w.total()) }
		fmt.Fprintf(&b, "\n- kube-apiserver CPU per completion from ×%g to ×%g: SafeJob %s, built-in %s, the limit %s "+
			"(target: SafeJob at or below the built-in at every size, and growing no more than the limit)\n",
			fw.Size, lw.Size, seriesGrowth(series[modeSafeJob], fw, lw, api), seriesGrowth(series[modeBuiltin], fw, lw, api),
			seriesGrowth(series[modeLimit], fw, lw, api))
		fmt.Fprintf(&b, "- the controller's CPU per completion from ×%g to ×%g: SafeJob %s, kube-controller-manager %s "+
			"(target: SafeJob within 10%%)\n", fw.Size, lw.Size, seriesGrowth(series[modeSafeJob], fw, lw, ctl),
			seriesGrowth(series[modeBuiltin], fw, lw, ctl))
		sjs, bis := series[modeSafeJob], series[modeBuiltin]
		if len(sjs) > 1 && len(bis) > 1 && sjs[len(sjs)-1].w.Jobs > sjs[0].w.Jobs && bis[len(bis)-1].w.Jobs > bis[0].w.Jobs {
			fmt.Fprintf(&b, "- peak RSS per job added: SafeJob %.1f KiB, kube-controller-manager %.1f KiB (target: SafeJob below, "+
				"aiming at half)\n", rssPerJobKiB(sjs), rssPerJobKiB(bis))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// rssPerJobKiB is the peak RSS each job added cost from the first size of
// a series to its last, in KiB: the sizes must differ in jobs.
func rssPerJobKiB(xs []sizedSummary) float64 {
	a, z := xs[0], xs[len(xs)-1]
	return (z.s.rss - a.s.rss) * 1024 / float64(z.w.Jobs-a.w.Jobs)
}

// sizedSummary is one mode's figures at one size.
type sizedSummary struct {
	w workload
	s summary
}

// seriesGrowth is how much f grew over the sizes a mode finished, naming
// them when they are not the whole range (from ×first to ×last).
func seriesGrowth(xs []sizedSummary, first, last workload, f func(sizedSummary) float64) string {
	if len(xs) < 2 {
		return "- (fewer than two sizes finished)"
	}
	a, z := xs[0], xs[len(xs)-1]
	out := growth(f(a), f(z))
	if a.w.Size != first.Size || z.w.Size != last.Size {
		out += fmt.Sprintf(" (×%g to ×%g, the sizes it finished)", a.w.Size, z.w.Size)
	}
	return out
}

// closedWatchers says how many watches kube-apiserver closed because their
// client (any component) fell behind, by mode, when it closed any: each
// costs that client a new watch, or a re-list of every object, and in the
// meantime it acts on what it saw before.
func closedWatchers(results []result, w string) string {
	var parts []string
	for _, m := range modeOrder {
		total, runs := 0, 0
		for _, r := range results {
			if r.Workload != w || r.Mode != m {
				continue
			}
			runs++
			for _, n := range r.WatchersClosed {
				total += n
			}
		}
		if runs > 0 && total > 0 {
			parts = append(parts, fmt.Sprintf("%s %d in %d runs", m, total, runs))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "- watches kube-apiserver closed for falling behind (every client): " + strings.Join(parts, ", ") + "\n"
}

// podWatchEvents gives, by mode, the median pod watch events kube-apiserver
// sent per completion (one per pod event and watcher) and their bytes: a
// cost that grows with every watcher of pods, which no write count shows.
// Runs from before this was recorded are left out.
func podWatchEvents(results []result, w string) string {
	var parts []string
	for _, m := range modeOrder {
		var events, kib []float64
		for _, r := range results {
			if r.Workload == w && r.Mode == m && r.WatchEvents["pods"] > 0 && r.Completions > 0 {
				events = append(events, float64(r.WatchEvents["pods"])/float64(r.Completions))
				kib = append(kib, float64(r.WatchBytes["pods"])/1024/float64(r.Completions))
			}
		}
		if len(events) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f (%.1f KiB)", m, median(events), median(kib)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "- pod watch events kube-apiserver sent per completion, one per event and watcher (medians): " +
		strings.Join(parts, ", ") + "\n"
}

// contextSwitchLine gives the machine's context switches per completion,
// by mode (medians). Runs from before this was recorded are left out.
func contextSwitchLine(results []result, w string) string {
	var parts []string
	for _, m := range modeOrder {
		var per []float64
		for _, r := range results {
			if r.Workload == w && r.Mode == m && r.ContextSwitches > 0 && r.Completions > 0 {
				per = append(per, float64(r.ContextSwitches)/float64(r.Completions))
			}
		}
		if len(per) > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", m, median(per)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "- the machine's context switches per completion, every process (medians): " + strings.Join(parts, ", ") + "\n"
}

// kwokRewatches says, run by run, how often KWOK's pod watch ended during
// the run. KWOK starts each new watch from resourceVersion 0, so every pod
// is sent to it again while pods keep changing; with many pods it falls
// behind, its new watch is closed in turn, and pods wait on it. A run where
// this repeats measures the simulated kubelet rather than the controller.
// Runs from before this was recorded are left out.
func kwokRewatches(results []result, w string) string {
	var parts []string
	for _, m := range modeOrder {
		var counts []string
		for _, r := range results {
			if r.Workload == w && r.Mode == m && r.PodWatchesEnded != nil {
				n := 0
				for client, k := range r.PodWatchesEnded {
					if strings.HasPrefix(client, "kwok") { // the user agent names KWOK's version
						n += k
					}
				}
				counts = append(counts, strconv.Itoa(n))
			}
		}
		if len(counts) > 0 {
			parts = append(parts, m+" "+strings.Join(counts, ", "))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "- KWOK's pod watch ended and started over (every pod sent to it again), run by run: " + strings.Join(parts, "; ") + "\n"
}

func abs(n int) int { return max(n, -n) }

// statusWritesPer is the median over runs of each kind's status writes per
// completion, a kind a run did not count being none in it; nil for no runs.
func statusWritesPer(runs []result) map[string]float64 {
	if len(runs) == 0 {
		return nil
	}
	kinds := map[string]bool{}
	for _, r := range runs {
		for kind := range r.StatusWrites {
			kinds[kind] = true
		}
	}
	per := map[string]float64{}
	for kind := range kinds {
		xs := make([]float64, 0, len(runs))
		for _, r := range runs {
			xs = append(xs, float64(r.StatusWrites[kind])/float64(r.Completions))
		}
		per[kind] = median(xs)
	}
	return per
}

// statusWriteKinds is a line of the operator's SafeJob status writes per
// completion by kind (medians of the repeats), or nothing if none were
// counted.
func statusWriteKinds(sj summary) string {
	if len(sj.statusWrites) == 0 {
		return ""
	}
	kinds := slices.Sorted(maps.Keys(sj.statusWrites))
	parts := make([]string, 0, len(kinds))
	for _, kind := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.2f", kind, sj.statusWrites[kind]))
	}
	return "- the operator's SafeJob status writes per completion by kind (`safejob_status_writes_total`; counts: " +
		"only active, ready or terminating changed): " + strings.Join(parts, ", ") + "\n"
}
