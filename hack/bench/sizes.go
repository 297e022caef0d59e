package main

import (
	"fmt"
	"sort"
	"strings"
)

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

// sizedSummary is one mode's figures at one size.
type sizedSummary struct {
	w workload
	s summary
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

// growth is the change from a to b in percent.
func growth(a, b float64) string {
	if a == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.0f%%", 100*(b-a)/a)
}

// rssPerJobKiB is the peak RSS each job added cost from the first size of
// a series to its last, in KiB: the sizes must differ in jobs.
func rssPerJobKiB(xs []sizedSummary) float64 {
	a, z := xs[0], xs[len(xs)-1]
	return (z.s.rss - a.s.rss) * 1024 / float64(z.w.Jobs-a.w.Jobs)
}
