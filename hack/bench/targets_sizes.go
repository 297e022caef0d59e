package main

import (
	"cmp"
	"fmt"
)

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
