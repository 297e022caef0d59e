package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

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

// hotPathsPointer says where the profiles of the runs are read: a report
// holds what a run measures, the reading of its profiles is written by hand.
const hotPathsPointer = "Where the time goes: the CPU profiles' hot paths (the operator and kube-apiserver at the " +
	"largest sizes) and what was changed because of them are in [docs/performance.md](docs/performance.md) " +
	"(\"Hot paths at the largest size\", \"The operator's own CPU at parallelism 2,000\", \"Fewer allocations per pass\").\n\n"

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

// orDash formats v, or "-" for 0: not measured.
func orDash(format string, v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
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
