package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The targets a report judges SafeJob by, from the runs it holds: each row
// names what is asked, of which workload, what was measured (SafeJob's
// figure first, the reference's second) and whether it holds. A miss says
// by how much, and why: a figure of the same runs where one explains it,
// and the section of docs/performance.md where its cause was measured.

// The targets, in the order the report lists them.
const (
	targetHalf             = "half the pods succeeded no later than the built-in's"
	targetRepeats          = "completions/s at least the built-in's, every repeat"
	targetThroughput       = "completions/s at least the built-in's (medians)"
	targetW1Ratio          = "completions/s at least 2.5x the built-in's (medians)"
	targetLimit            = "completions/s at least 90% of the limit's"
	targetAPI              = "kube-apiserver CPU per completion at or below the built-in's"
	targetAPIGrowth        = "kube-apiserver CPU per completion growing no more than the limit's"
	targetControllerGrowth = "controller CPU per completion within 10% from the smallest size to the largest"
	targetWrites           = "writes per completion at or below the built-in's"
	targetStatus           = "largest status at most 256 KiB at 100,000 completions"
	targetRSS              = "controller peak RSS below kube-controller-manager's"
	targetRSSPerJob        = "peak RSS per job added at most half kube-controller-manager's (the aim)"
	targetFirstPod         = "first-pod p99 at most twice W1's"
	targetQuota            = "never more pods at once than the queue's quota"
	targetExact            = "exact: 0 extra pods, 0 completions without a pod, 0 lost, none stuck"
	targetVsBuiltin        = "every target against the built-in"
	targetOverSizes        = "every target over sizes"
)

var targetOrder = []string{targetHalf, targetRepeats, targetThroughput, targetW1Ratio, targetLimit, targetAPI,
	targetAPIGrowth, targetControllerGrowth, targetWrites, targetStatus, targetRSS, targetRSSPerJob, targetFirstPod,
	targetQuota, targetExact, targetVsBuiltin, targetOverSizes}

// Where the causes of the misses were measured: docs/performance.md's
// sections.
const (
	whyHalfOnePod = "docs/performance.md, \"W1 on a faster machine: the first half of the pods\": in the first seconds " +
		"of a burst kube-apiserver spends about a fifth of its CPU on SafeJob requests (their creates, then the launch " +
		"commit each pod waits for), and the pods get through that much later (the jobs' creates themselves take " +
		"longer: in the row); the built-in leaves its Job status writes until after its pods"
	whyHalfInFlight = "docs/performance.md, \"W5 at 10,000: KWOK's share of the machine\": with hundreds or thousands " +
		"of pods in flight, pods wait at the simulated kubelet, which loses its time waiting for a CPU on a machine " +
		"97-99% busy (the steps are in the row)"
	whyHalfWindow = "docs/performance.md, \"W3's first pods: why running SafeJobs keep their turn\": new SafeJobs " +
		"wait for the launch window while running ones keep their places"
	whyCPU = "the machine is the bound: completions/s times the CPU every process spends per completion is the " +
		"cores busy, and the rate asked would take the cores in the row; docs/performance.md, \"The floor of writes " +
		"per completion\", says which writes a completion cannot avoid"
	whyAPIServer = "docs/performance.md, \"What a SafeJob status write costs the API server\": a SafeJob write " +
		"costs it about 1.8 times a Job's (a custom resource: JSON, its schema, managed fields); where SafeJob makes " +
		"few status writes (W2) its profiles showed the built-in's mix, and runs vary more than the two differ"
	whyWrites = "docs/performance.md, \"The floor of writes per completion\": which writes a completion cannot " +
		"avoid, and which SafeJob adds"
	whyControllerPass = "docs/performance.md, \"The operator's own CPU at parallelism 2,000\": a decision pass reads " +
		"every open launch, and more are open at the larger sizes"
	whyControllerJobs = "docs/performance.md, \"Reconciles per completion, 1k to 10k\": more passes per completion " +
		"among 10,000 one-pod SafeJobs, and the collector marking their cache"
	whyStatus = "docs/performance.md, \"Pods that end out of order\": the listed ledger grows with the open " +
		"launches that runs cannot hold"
	whyMemory = "docs/performance.md, \"Memory\": what the operator's caches hold per job"
	whyWindow = "docs/performance.md, \"A launch window\": a one-pod SafeJob's pod is created when it can start, " +
		"so the first pod of a job that waits its turn is created later"
	whyQueued = "10,000 jobs created at once wait for the cluster's time whoever creates their pods: the " +
		"built-in's own ratio, in the row, is above twice too"
	whyDefect = "a defect: the run's raw results (-json) and logs (-keep-logs) name the pods"
)

// targetRow is one target judged on one workload (or series of sizes).
type targetRow struct {
	target, where, measured string
	met                     bool
	// unjudged says why the runs cannot judge the target ("" when they
	// can): a run that did not finish, a figure not recorded.
	unjudged string
	// short says by how much a missed target was missed, and note what
	// else the row's reader needs (empty when nothing).
	short, note string
	// why is where a miss's cause was measured.
	why string
}

// unjudgedRow is a target the runs cannot judge, and why.
func unjudgedRow(target, where, why string) targetRow {
	return targetRow{target: target, where: where, measured: "-", unjudged: why}
}

// targetsSection judges every target the runs allow, in the order of the
// targets, then of the workloads.
func targetsSection(ws []workload, results, failedRuns []result) string {
	var rows []targetRow
	for _, w := range ws {
		rows = append(rows, workloadTargets(w, results)...)
	}
	rows = append(rows, sizeTargets(ws, results)...)
	rows = append(rows, statusTargets(ws, results)...)
	rows = append(rows, acrossTargets(ws, results)...)
	if exact, ok := exactRow(results, failedRuns); ok {
		rows = append(rows, exact)
	}
	if len(rows) == 0 {
		return ""
	}
	slices.SortStableFunc(rows, func(a, b targetRow) int {
		return slices.Index(targetOrder, a.target) - slices.Index(targetOrder, b.target)
	})
	var b strings.Builder
	b.WriteString("## Targets\n\nEach target judged from the runs below (medians of the repeats): SafeJob's figure " +
		"first, the reference's second (the built-in's, the limit's, or W1's for W4). A miss says by how much; where " +
		"its cause was measured is listed under the table.\n\n| target | workload | measured | verdict |\n|---|---|---|---|\n")
	met, unjudged := 0, 0
	var whys []string
	for _, r := range rows {
		var verdict string
		switch {
		case r.unjudged != "":
			unjudged++
			verdict = "not judged: " + r.unjudged
		case r.met:
			met++
			verdict = "met"
		default:
			verdict = "**missed** by " + r.short
			if r.why != "" && !slices.Contains(whys, r.why) {
				whys = append(whys, r.why)
			}
		}
		if r.note != "" {
			verdict += "; " + r.note
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.target, r.where, r.measured, verdict)
	}
	fmt.Fprintf(&b, "\n%d of %d met", met, len(rows))
	if unjudged > 0 {
		fmt.Fprintf(&b, ", %d not judged", unjudged)
	}
	if len(whys) > 0 {
		b.WriteString(". Where the misses come from, measured:\n\n")
		for _, why := range whys {
			fmt.Fprintf(&b, "- %s\n", why)
		}
	} else {
		b.WriteString(".\n")
	}
	b.WriteString("\n")
	return b.String()
}

// exactRow: every SafeJob run finished, and exact by the bench's checks
// (the built-in's are judged in "Failed runs"); false when no SafeJob ran.
func exactRow(results, failedRuns []result) (targetRow, bool) {
	row := targetRow{target: targetExact, where: "every workload", met: true, why: whyDefect}
	runs := 0
	var broke []string
	for _, r := range slices.Concat(results, failedRuns) {
		if r.Mode != modeSafeJob && r.Mode != modeSafeJobDefault {
			continue
		}
		runs++
		switch {
		case r.Failed != "":
			broke = append(broke, fmt.Sprintf("%s repeat %d did not finish: %s", r.Workload, r.Repeat, r.Failed))
		case r.Inexact != "":
			broke = append(broke, fmt.Sprintf("%s repeat %d: %s", r.Workload, r.Repeat, r.Inexact))
		}
	}
	row.measured = fmt.Sprintf("%d of %d SafeJob runs finished and exact", runs-len(broke), runs)
	if len(broke) > 0 {
		row.met, row.short = false, strings.Join(broke, "; ")
	}
	return row, runs > 0
}

// where names a workload and its completions.
func where(w workload) string {
	return fmt.Sprintf("%s (%s completions)", w.Name, thousands(w.total()))
}

// thousands writes n with comma separators.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// shortBy is how far a figure falls short of a bound it must reach, in a
// format, rounded away from the bound so that a miss never reads as 0.
func shortBy(format string, by float64, decimals int) string {
	p := math.Pow(10, float64(decimals))
	return fmt.Sprintf(format, math.Ceil(by*p)/p)
}
