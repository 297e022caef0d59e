package main

import (
	"sort"
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

// controllerMS is a summary's controller CPU ms per completion.
func (s summary) controllerMS(completions int) float64 {
	return 1000 * s.cpu / float64(max(completions, 1))
}
