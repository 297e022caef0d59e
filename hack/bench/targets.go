package main

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
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

// workloadTargets judges the targets of one workload at one size.
func workloadTargets(w workload, results []result) []targetRow {
	sj, okS := summarise(results, w.Name, modeSafeJob)
	if !okS {
		return nil
	}
	var rows []targetRow
	if w.Quota > 0 {
		rows = append(rows, quotaRow(w, results))
	}
	base := cmp.Or(w.Base, w.Name)
	bi, okB := summarise(results, w.Name, modeBuiltin)
	if lim, ok := summarise(results, w.Name, modeLimit); ok && base == "W2" {
		rows = append(rows, limitRow(w, sj, lim, bi, okB))
	}
	if !okB {
		return append(rows, unjudgedRow(targetVsBuiltin, where(w), "no run of the built-in finished (timed out, or not run)"))
	}
	switch base {
	case "W1", "W2", "W3":
		rows = append(rows, repeatsRow(w, results, sj, bi))
	case "W6":
		rows = append(rows, ratioRow(targetThroughput, w, sj, bi, 1))
	}
	if base == "W1" {
		rows = append(rows, ratioRow(targetW1Ratio, w, sj, bi, 2.5))
	}
	return append(rows, halfRow(w, results, sj, bi),
		noMoreRow(targetAPI, w, sj.apiCPU, bi.apiCPU, "%.1f ms", whyAPIServer),
		noMoreRow(targetWrites, w, sj.writes, bi.writes, "%.2f", whyWrites),
		belowRow(w, sj.rss, bi.rss, whyMemory))
}

// coresFor says how many cores a rate would take at a summary's CPU per
// completion over every process: what a throughput target asks of the
// machine.
func coresFor(rate float64, s summary) string {
	return fmt.Sprintf("%.0f/s at %.1f ms of CPU per completion (every process) would take %.1f cores",
		rate, s.allCPU, rate*s.allCPU/1000)
}

// ratioRow: SafeJob's throughput at least `times` the built-in's (medians).
func ratioRow(target string, w workload, sj, bi summary, times float64) targetRow {
	if bi.perSec <= 0 {
		return unjudgedRow(target, where(w), "no built-in throughput")
	}
	ratio := sj.perSec / bi.perSec
	row := targetRow{target: target, where: where(w), measured: fmt.Sprintf("%.1f vs %.1f/s (%.2fx)", sj.perSec,
		bi.perSec, ratio), met: ratio >= times, short: shortBy("%.2fx", times-ratio, 2) + fmt.Sprintf(" (below %gx)", times),
		why: whyCPU}
	if !row.met && sj.allCPU > 0 {
		row.note = coresFor(times*bi.perSec, sj)
	}
	return row
}

// limitRow: SafeJob's throughput at least 90% of the limit's.
func limitRow(w workload, sj, lim, bi summary, okB bool) targetRow {
	if lim.perSec <= 0 {
		return unjudgedRow(targetLimit, where(w), "no limit throughput")
	}
	share := sj.perSec / lim.perSec
	measured := fmt.Sprintf("%.1f vs %.1f/s (%.1f%%", sj.perSec, lim.perSec, 100*share)
	if okB {
		measured += fmt.Sprintf("; the built-in %.1f%%", 100*bi.perSec/lim.perSec)
	}
	row := targetRow{target: targetLimit, where: where(w), measured: measured + ")", met: share >= 0.9,
		short: shortBy("%.1f points", 100*(0.9-share), 1), why: whyCPU}
	if !row.met && sj.allCPU > 0 {
		row.note = coresFor(0.9*lim.perSec, sj) + fmt.Sprintf(" (the limit's %.1f ms)", lim.allCPU)
	}
	return row
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

// quotaRow: a queued workload never had more SafeJob pods at once than its
// quota in any run; the built-in's most beside it.
func quotaRow(w workload, results []result) targetRow {
	peak := map[string]int{}
	ran := map[string]bool{}
	for _, r := range results {
		if r.Workload == w.Name && (r.Mode == modeSafeJob || r.Mode == modeBuiltin) {
			peak[r.Mode], ran[r.Mode] = max(peak[r.Mode], r.PeakActivePods), true
		}
	}
	measured := fmt.Sprintf("at most %d pods (quota %d)", peak[modeSafeJob], w.Quota)
	if ran[modeBuiltin] {
		measured = fmt.Sprintf("at most %d vs %d pods (quota %d)", peak[modeSafeJob], peak[modeBuiltin], w.Quota)
	}
	return targetRow{target: targetQuota, where: where(w), measured: measured, met: peak[modeSafeJob] <= w.Quota,
		short: fmt.Sprintf("%d pods over", peak[modeSafeJob]-w.Quota), why: whyDefect}
}

// repeatsRow: every repeat's SafeJob run at least as fast as the built-in's
// run of the same repeat.
func repeatsRow(w workload, results []result, sj, bi summary) targetRow {
	ratios := repeatRatios(results, w.Name)
	if len(ratios) == 0 {
		return unjudgedRow(targetRepeats, where(w), "no repeat ran both controllers")
	}
	parts := make([]string, len(ratios))
	for i, x := range ratios {
		parts[i] = fmt.Sprintf("%.2fx", x)
	}
	lowest := slices.Min(ratios)
	row := targetRow{target: targetRepeats, where: where(w), measured: strings.Join(parts, ", "), met: lowest >= 1,
		short: shortBy("%.1f%% in the slowest repeat", 100*(1-lowest), 1), why: whyCPU}
	if !row.met && sj.allCPU > 0 {
		row.note = coresFor(bi.perSec, sj)
	}
	return row
}

// repeatRatios is SafeJob's throughput over the built-in's, repeat by repeat
// (the repeats that ran both).
func repeatRatios(results []result, w string) []float64 {
	perSec := map[string]map[int]float64{modeSafeJob: {}, modeBuiltin: {}}
	last := 0
	for _, r := range results {
		if r.Workload == w && perSec[r.Mode] != nil {
			perSec[r.Mode][r.Repeat] = r.PerSecond
			last = max(last, r.Repeat)
		}
	}
	var ratios []float64
	for rep := 1; rep <= last; rep++ {
		sj, ok1 := perSec[modeSafeJob][rep]
		bi, ok2 := perSec[modeBuiltin][rep]
		if ok1 && ok2 && bi > 0 {
			ratios = append(ratios, sj/bi)
		}
	}
	return ratios
}

// halfRow: half the pods succeeded no later than under the built-in; a miss
// gives how long the pods took at the simulated kubelet's two steps, the
// wait that grows when the machine is busy.
func halfRow(w workload, results []result, sj, bi summary) targetRow {
	if sj.half <= 0 || bi.half <= 0 {
		return unjudgedRow(targetHalf, where(w), "no pod success times recorded")
	}
	why := whyHalfInFlight
	switch {
	case cmp.Or(w.Base, w.Name) == "W3":
		why = whyHalfWindow
	case w.Completions == 1:
		why = whyHalfOnePod
	}
	row := targetRow{target: targetHalf, where: where(w), measured: fmt.Sprintf("%.1f s vs %.1f s", sj.half, bi.half),
		met: sj.half <= bi.half, short: fmt.Sprintf("%.1f s (%s)", sj.half-bi.half, growth(bi.half, sj.half)), why: why}
	if row.met {
		return row
	}
	var notes []string
	if s, b := submittedP50(results, w.Name, modeSafeJob), submittedP50(results, w.Name, modeBuiltin); w.Jobs > 1 && s > 0 && b > 0 {
		notes = append(notes, fmt.Sprintf("the last job's create returned at %.1f s against %.1f s", s, b))
	}
	s1, s2 := stepsP50(results, w.Name, modeSafeJob)
	b1, b2 := stepsP50(results, w.Name, modeBuiltin)
	if s1+s2 > 0 && b1+b2 > 0 {
		notes = append(notes, fmt.Sprintf("pods took %.1f and %.1f s from scheduled to running and on to succeeded, "+
			"against %.1f and %.1f", s1, s2, b1, b2))
	}
	row.note = strings.Join(notes, "; ")
	return row
}

// submittedP50 is the median over a mode's runs of when the last job's
// create returned: the bench creates the jobs 32 at a time, so this is how
// long the API server took to take them in.
func submittedP50(results []result, w, m string) float64 {
	return measuredP50(results, w, m, func(r *result) float64 { return r.SubmittedSec })
}

// stepsP50 is the median over a mode's runs of each run's median time from
// scheduled to running and from running to succeeded.
func stepsP50(results []result, w, m string) (toRunning, toSucceeded float64) {
	var a, b []float64
	for _, r := range results {
		if r.Workload == w && r.Mode == m && r.PodStepsP50 != nil {
			a, b = append(a, r.PodStepsP50["scheduled to running"]), append(b, r.PodStepsP50["running to succeeded"])
		}
	}
	return median(a), median(b)
}

// noMoreRow: SafeJob's figure at or below the built-in's.
func noMoreRow(target string, w workload, sj, bi float64, format, why string) targetRow {
	if sj <= 0 || bi <= 0 {
		return unjudgedRow(target, where(w), "not recorded for both controllers")
	}
	format = apart(format, sj, bi)
	return targetRow{target: target, where: where(w), measured: fmt.Sprintf(format+" vs "+format, sj, bi), met: sj <= bi,
		short: fmt.Sprintf(format+" (%s)", sj-bi, finePercent(bi, sj)), why: why}
}

// apart adds decimals to format (one "%.Nf" verb, a unit may follow) until
// a and b print differently, at most four more: a miss never reads as two
// equal figures ("6.05 vs 6.05").
func apart(format string, a, b float64) string {
	for more := 0; more < 4 && a != b && fmt.Sprintf(format, a) == fmt.Sprintf(format, b); more++ {
		format = decimalsVerb.ReplaceAllStringFunc(format, func(v string) string {
			n, _ := strconv.Atoi(v[2 : len(v)-1])
			return fmt.Sprintf("%%.%df", n+1)
		})
	}
	return format
}

var decimalsVerb = regexp.MustCompile(`%\.[0-9]+f`)

// finePercent is b's change from a in percent, with a decimal below 1%.
func finePercent(a, b float64) string {
	if a != 0 && math.Abs(100*(b-a)/a) < 1 {
		return fmt.Sprintf("%+.1f%%", 100*(b-a)/a)
	}
	return growth(a, b)
}

// belowRow: SafeJob's peak RSS below kube-controller-manager's.
func belowRow(w workload, sj, bi float64, why string) targetRow {
	if sj <= 0 || bi <= 0 {
		return unjudgedRow(targetRSS, where(w), "not recorded for both controllers")
	}
	f := apart("%.0f", sj, bi)
	return targetRow{target: targetRSS, where: where(w), measured: fmt.Sprintf(f+" vs "+f+" MiB", sj, bi), met: sj < bi,
		short: fmt.Sprintf(f+" MiB (%s)", sj-bi, finePercent(bi, sj)), why: why}
}

// sizeTargets judges the targets over each workload's sizes: the API
// server's cost growing no more than the limit's, the controller's within
// 10% (W1 and W5), and memory per job added (jobs of one pod). A target
// over sizes is judged only when every mode it compares finished every
// size: a growth over fewer sizes is another figure.
func sizeTargets(ws []workload, results []result) []targetRow {
	bases, groups := sizeGroups(ws)
	var rows []targetRow
	for _, base := range bases {
		g := groups[base]
		series := map[string][]sizedSummary{}
		for _, w := range g {
			for _, m := range []string{modeLimit, modeBuiltin, modeSafeJob} {
				if s, ok := summarise(results, w.Name, m); ok {
					series[m] = append(series[m], sizedSummary{w, s})
				}
			}
		}
		sjs, bis, lims := series[modeSafeJob], series[modeBuiltin], series[modeLimit]
		if len(g) < 2 || len(sjs) == 0 {
			continue
		}
		span := fmt.Sprintf("%s to %s", where(g[0]), where(g[len(g)-1]))
		if len(sjs) < len(g) {
			rows = append(rows, unjudgedRow(targetOverSizes, span, "SafeJob did not finish every size"))
			continue
		}
		if len(lims) == len(g) {
			rows = append(rows, apiGrowthRow(sjs, lims, span))
		}
		switch base {
		case "W1":
			rows = append(rows, growthRow(sjs[0], sjs[len(sjs)-1], span, bis, len(g), whyControllerJobs))
		case "W5":
			rows = append(rows, growthRow(sjs[0], sjs[len(sjs)-1], span, bis, len(g), whyControllerPass))
		}
		if len(bis) == len(g) && g[len(g)-1].Jobs > g[0].Jobs {
			rows = append(rows, rssPerJobRow(sjs, bis, span))
		}
	}
	return rows
}

// apiGrowthRow: kube-apiserver's CPU per completion growing from the
// smallest size to the largest no more than the limit's did.
func apiGrowthRow(sjs, lims []sizedSummary, span string) targetRow {
	a, z, la, lz := sjs[0].s.apiCPU, sjs[len(sjs)-1].s.apiCPU, lims[0].s.apiCPU, lims[len(lims)-1].s.apiCPU
	if a <= 0 || la <= 0 {
		return unjudgedRow(targetAPIGrowth, span, "kube-apiserver CPU not recorded")
	}
	sg, lg := (z-a)/a, (lz-la)/la
	return targetRow{target: targetAPIGrowth, where: span, measured: fmt.Sprintf("%+.1f%% vs %+.1f%%", 100*sg, 100*lg),
		met: sg <= lg, short: shortBy("%.1f points", 100*(sg-lg), 1), why: whyAPIServer}
}

// growthRow: the controller's CPU per completion from the smallest size to
// the largest within 10%; kube-controller-manager's growth beside it when
// it finished every size.
func growthRow(a, z sizedSummary, span string, bis []sizedSummary, sizes int, why string) targetRow {
	ca, cz := a.s.controllerMS(a.w.total()), z.s.controllerMS(z.w.total())
	if ca <= 0 {
		return unjudgedRow(targetControllerGrowth, span, "the controller's CPU not recorded")
	}
	g := (cz - ca) / ca
	measured := fmt.Sprintf("%.2f to %.2f ms (%+.1f%%)", ca, cz, 100*g)
	if len(bis) == sizes {
		ba, bz := bis[0], bis[len(bis)-1]
		measured += "; kube-controller-manager " + growth(ba.s.controllerMS(ba.w.total()), bz.s.controllerMS(bz.w.total()))
	}
	return targetRow{target: targetControllerGrowth, where: span, measured: measured, met: g <= 0.1,
		short: shortBy("%.1f points", 100*(g-0.1), 1), why: why}
}

// rssPerJobRow: the controller's peak RSS per job added from the smallest
// size to the largest at most half kube-controller-manager's.
func rssPerJobRow(sjs, bis []sizedSummary, span string) targetRow {
	sjPer, biPer := rssPerJobKiB(sjs), rssPerJobKiB(bis)
	return targetRow{target: targetRSSPerJob, where: span, measured: fmt.Sprintf("%.1f KiB vs %.1f KiB", sjPer, biPer),
		met: sjPer <= biPer/2, short: fmt.Sprintf("%.1f KiB per job", sjPer-biPer/2), why: whyMemory}
}

// statusTargets judges the largest status of the Indexed job (W5) at the
// largest size run: the target names 100,000 completions, and a smaller
// size's figure is shown, not judged.
func statusTargets(ws []workload, results []result) []targetRow {
	var largest *workload
	for i, w := range ws {
		if cmp.Or(w.Base, w.Name) == "W5" && (largest == nil || w.total() > largest.total()) {
			if _, ok := summarise(results, w.Name, modeSafeJob); ok {
				largest = &ws[i]
			}
		}
	}
	if largest == nil {
		return nil
	}
	bytes := largestStatus(results, largest.Name, modeSafeJob)
	if largest.total() < 100000 {
		return []targetRow{{target: targetStatus, where: where(*largest), measured: kib(bytes), unjudged: "100,000 " +
			"completions not run (`make bench-ledger` drives the decision there)"}}
	}
	return []targetRow{{target: targetStatus, where: where(*largest), measured: kib(bytes), met: bytes <= 256*1024,
		short: kib(bytes - 256*1024), why: whyStatus}}
}

// w1AndW4 finds W1 at its smallest size and W4 among the workloads (nil
// when not run).
func w1AndW4(ws []workload) (w1, w4 *workload) {
	for i, w := range ws {
		switch {
		case w.Name == "W4" || w.Base == "W4":
			w4 = cmp.Or(w4, &ws[i])
		case (w.Name == "W1" || w.Base == "W1") && (w1 == nil || w.Size < w1.Size):
			w1 = &ws[i]
		}
	}
	return w1, w4
}

// acrossTargets judges the targets that compare two workloads: W4 (10,000
// jobs created at once) against W1 at its smallest size.
func acrossTargets(ws []workload, results []result) []targetRow {
	w1, w4 := w1AndW4(ws)
	if w1 == nil || w4 == nil {
		return nil
	}
	s1, ok1 := summarise(results, w1.Name, modeSafeJob)
	s4, ok4 := summarise(results, w4.Name, modeSafeJob)
	if !ok1 || !ok4 {
		return nil
	}
	span := fmt.Sprintf("%s against %s", where(*w4), where(*w1))
	rows := []targetRow{firstPodRow(*w1, *w4, s1, s4, results, span)}
	c1, c4 := s1.controllerMS(w1.total()), s4.controllerMS(w4.total())
	if c1 <= 0 {
		return append(rows, unjudgedRow(targetControllerGrowth, span, "the controller's CPU not recorded"))
	}
	g := (c4 - c1) / c1
	return append(rows, targetRow{target: targetControllerGrowth, where: span,
		measured: fmt.Sprintf("%.2f vs %.2f ms (%+.1f%%)", c4, c1, 100*g), met: g <= 0.1,
		short: shortBy("%.1f points", 100*(g-0.1), 1), why: whyControllerJobs})
}

// firstPodRow: W4's first-pod p99 at most twice W1's; the built-in's ratio
// beside it says whether the cluster or SafeJob sets it.
func firstPodRow(w1, w4 workload, s1, s4 summary, results []result, span string) targetRow {
	if s1.p99 <= 0 {
		return unjudgedRow(targetFirstPod, span, "W1's first-pod latency not recorded")
	}
	ratio := s4.p99 / s1.p99
	row := targetRow{target: targetFirstPod, where: span, measured: fmt.Sprintf("%.1f s vs %.1f s (%.1fx)", s4.p99, s1.p99,
		ratio), met: ratio <= 2, short: shortBy("%.1fx", ratio-2, 1) + " (above 2x)", why: whyWindow}
	b1, okb1 := summarise(results, w1.Name, modeBuiltin)
	b4, okb4 := summarise(results, w4.Name, modeBuiltin)
	if okb1 && okb4 && b1.p99 > 0 {
		bRatio := b4.p99 / b1.p99
		row.measured += fmt.Sprintf("; the built-in %.1f s vs %.1f s (%.1fx)", b4.p99, b1.p99, bRatio)
		if bRatio > 2 {
			row.why = whyQueued
		}
	}
	return row
}
