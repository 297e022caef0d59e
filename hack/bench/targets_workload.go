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
