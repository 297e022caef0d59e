package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

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

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }

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
