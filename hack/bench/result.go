package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

type result struct {
	Workload, Mode string
	// Base and Size: see workload (empty and 0 for a workload at one size).
	Base        string  `json:",omitempty"`
	Size        float64 `json:",omitempty"`
	Repeat      int
	Completions int
	PodsCreated int
	ExtraPods   int
	// Reported is the sum of the jobs' status.succeeded at the end, and
	// PodsSucceeded the number of distinct pods the bench's own watch saw
	// succeed (see noPod).
	Reported      int
	PodsSucceeded int
	// Inexact says how the run broke exactness ("" when it did not): pods
	// created beyond the completions, a completion counted without a pod
	// that succeeded, fewer successes than completions, or a pod created
	// that no watch or list ever showed.
	Inexact string `json:",omitempty"`
	// Recovered counts the pods, successes and releases the watch had not
	// delivered by the end and a final list of every pod found
	// (recoverMissed); Unseen the pods the API server created that neither
	// ever showed (created and deleted between the two).
	Recovered, Unseen int
	// LargestStatusBytes is the largest status of a job the watch showed,
	// as JSON: a SafeJob's ledger is in it.
	LargestStatusBytes int
	// PeakActivePods is the most pods that had been created and not ended
	// at once; Quota the queue's, for a queued workload (0 otherwise).
	PeakActivePods int
	Quota          int `json:",omitempty"`
	MakespanSec    float64
	// LastReleasedSec is when the last pod let go of its controller's
	// tracking finalizer (ended and released, or deleted), seconds since
	// the first create: the built-in controller releases every pod before
	// it marks its Job Complete, SafeJob after, so MakespanSec alone ends
	// the two at different points. 0 in results from before it was
	// measured.
	LastReleasedSec float64 `json:",omitempty"`
	// SubmittedSec is when the last job's create returned.
	SubmittedSec   float64
	PerSecond      float64
	FirstPodP50Sec float64
	FirstPodP99Sec float64
	Writes         int
	WritesPerCompl float64
	WritesByRes    map[string]int
	ReadsByRes     map[string]int
	// WatchersClosed counts, by resource, the watches kube-apiserver closed
	// because their client fell behind.
	WatchersClosed map[string]int `json:",omitempty"`
	// PodWatchesEnded counts, by client, the pod watches that ended during
	// the run (audit log): each is followed by a new watch, and KWOK's starts
	// over from resourceVersion 0, so every pod is sent to it again.
	PodWatchesEnded map[string]int `json:",omitempty"`
	// WatchEvents and WatchBytes count, by resource, the watch events
	// kube-apiserver sent during the run: one per event and watcher, so a
	// controller that adds a watcher of pods adds one per pod event.
	WatchEvents map[string]int `json:",omitempty"`
	WatchBytes  map[string]int `json:",omitempty"`
	// Conflicts counts, by resource[/subresource], the writes kube-apiserver
	// refused for a stale resourceVersion (409): work done for nothing,
	// already counted in WritesByRes.
	Conflicts map[string]int `json:",omitempty"`
	// ExtraPodWatchers is -extra-pod-watchers: informers of pods the bench
	// ran beside the controller.
	ExtraPodWatchers int `json:",omitempty"`
	CPUSec           float64
	// ClusterCPUSec is the CPU time of each other component during the run,
	// and MachineBusy the fraction of all cores busy (from /proc/stat).
	ClusterCPUSec map[string]float64
	MachineBusy   float64
	// ContextSwitches is how often the machine's CPUs switched between
	// threads during the run (/proc/stat ctxt): on a busy machine, work that
	// wakes processes one event at a time costs switches beside its CPU.
	ContextSwitches int64 `json:",omitempty"`
	// SwitchesByProcess is the context switches of each of the processes
	// whose CPU is counted (the controller as "controller"), every thread's,
	// voluntary and not, during the run.
	SwitchesByProcess map[string]int64 `json:",omitempty"`
	PeakRSSMiB        float64
	// Reconciles counts the operator's reconcile passes during the run
	// (SafeJob modes only).
	Reconciles int `json:",omitempty"`
	// StatusWrites counts the operator's SafeJob status writes during the
	// run by kind: ledger, counts (only active, ready and terminating
	// changed) and other (SafeJob modes only).
	StatusWrites    map[string]int `json:",omitempty"`
	CompletionTimes []float64      // seconds since the first create, sorted
	// PodTimes is when each pod was first seen, seconds since the first
	// create, sorted: beside CompletionTimes it shows how long pods took
	// from their create to their success.
	PodTimes []float64
	// PodStepsP50 is the median time, in seconds, of each step of a pod's
	// life as the watch saw it: created to scheduled (nodeName set),
	// scheduled to Running, Running to Succeeded (the pods run
	// -pod-duration: the rest is the cluster's delay).
	PodStepsP50 map[string]float64
	// Run names the command and operator build that measured this result,
	// and Spec its workload, so a report can merge the raw results of
	// runs made apart (-merge).
	Run  string    `json:",omitempty"`
	Spec *workload `json:",omitempty"`
	// Failed says why the run has no figures (it passed -timeout or could
	// not start); such a result is listed, never summarised.
	Failed string `json:",omitempty"`
}

func measure(w workload, m mode, repeat int, start time.Time, end runEnd, created map[string]time.Time, rec *recorder,
	before, after map[string]int, cpu, rss float64) result {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	res := result{Workload: w.Name, Base: w.Base, Size: w.Size, Mode: m.Name, Repeat: repeat, Completions: w.total(),
		PodsCreated: len(rec.seen), MakespanSec: end.complete.Sub(start).Seconds(), CPUSec: cpu, PeakRSSMiB: rss,
		WritesByRes: map[string]int{}, ReadsByRes: map[string]int{}}
	if !end.released.IsZero() {
		res.LastReleasedSec = max(0, end.released.Sub(start).Seconds())
	}
	res.PerSecond = float64(res.Completions) / res.MakespanSec
	for _, t := range created {
		res.SubmittedSec = max(res.SubmittedSec, t.Sub(start).Seconds())
	}
	var lat []float64
	for name, t := range created {
		if first, ok := rec.firstPod[name]; ok && !t.IsZero() {
			lat = append(lat, max(0, first.Sub(t).Seconds()))
		}
	}
	sort.Float64s(lat)
	res.FirstPodP50Sec, res.FirstPodP99Sec = quantile(lat, 0.5), quantile(lat, 0.99)
	res.addRequests(before, after)
	res.ExtraPods = res.PodsCreated - res.Completions
	res.PodsSucceeded = len(rec.succeeded)
	res.Recovered, res.Unseen = rec.recovered, max(0, res.PodsCreated-len(rec.seen))
	res.PeakActivePods, res.Quota, res.LargestStatusBytes = rec.peakActive, w.Quota, rec.largestStatus
	for _, n := range rec.reported {
		res.Reported += n
	}
	if m.Controller == ctrlLimit {
		res.Reported = res.PodsSucceeded
	}
	res.Inexact = res.exactness() // with every count above in place
	res.WritesPerCompl = float64(res.Writes) / float64(res.Completions)
	for _, t := range rec.succeeded {
		res.CompletionTimes = append(res.CompletionTimes, t.Sub(start).Seconds())
	}
	sort.Float64s(res.CompletionTimes)
	for _, t := range rec.seen {
		res.PodTimes = append(res.PodTimes, t.Sub(start).Seconds())
	}
	sort.Float64s(res.PodTimes)
	res.PodStepsP50 = map[string]float64{
		"created to scheduled": stepP50(rec.seen, rec.scheduled),
		"scheduled to running": stepP50(rec.scheduled, rec.running),
		"running to succeeded": stepP50(rec.running, rec.succeeded),
	}
	return res
}

// addRequests adds the API server's request counts during the run (the
// difference of two scrapeWrites).
func (res *result) addRequests(before, after map[string]int) {
	for k, v := range after {
		d := v - before[k]
		switch {
		case d <= 0:
		case k == "created:pods":
			// The API server's own count: a pod created and deleted before
			// the watch saw it still counts.
			res.PodsCreated = d
		case strings.HasPrefix(k, "created:"):
		case strings.HasPrefix(k, "read:"):
			res.ReadsByRes[strings.TrimPrefix(k, "read:")] = d
		case strings.HasPrefix(k, "closed:"):
			res.WatchersClosed = addTo(res.WatchersClosed, strings.TrimPrefix(k, "closed:"), d)
		case strings.HasPrefix(k, "watchEvents:"):
			res.WatchEvents = addTo(res.WatchEvents, strings.TrimPrefix(k, "watchEvents:"), d)
		case strings.HasPrefix(k, "watchBytes:"):
			res.WatchBytes = addTo(res.WatchBytes, strings.TrimPrefix(k, "watchBytes:"), d)
		case strings.HasPrefix(k, "conflicts:"):
			res.Conflicts = addTo(res.Conflicts, strings.TrimPrefix(k, "conflicts:"), d)
		default:
			res.WritesByRes[k] = d
			res.Writes += d
		}
	}
}

// addTo adds n under key to m, making m if it is nil.
func addTo(m map[string]int, key string, n int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[key] += n
	return m
}

// stepP50 is the median time from one step of a pod's life to the next,
// over the pods seen at both.
func stepP50(from, to map[string]time.Time) float64 {
	var d []float64
	for uid, t0 := range from {
		if t1, ok := to[uid]; ok {
			d = append(d, t1.Sub(t0).Seconds())
		}
	}
	return median(d)
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// exactness checks a run against the completions it was asked for: every
// completion a pod that succeeded, no pod beyond them, every pod accounted.
func (r result) exactness() string {
	var broke []string
	if r.ExtraPods > 0 {
		broke = append(broke, fmt.Sprintf("%d extra pods", r.ExtraPods))
	}
	if n := r.noPod(); n > 0 {
		broke = append(broke, fmt.Sprintf("%d completions counted without a pod that succeeded", n))
	}
	if r.PodsSucceeded < r.Completions {
		broke = append(broke, fmt.Sprintf("%d of %d completions lost", r.Completions-r.PodsSucceeded, r.Completions))
	}
	if r.Unseen > 0 {
		broke = append(broke, fmt.Sprintf("%d pods created that no watch or list showed", r.Unseen))
	}
	if r.Quota > 0 && r.PeakActivePods > r.Quota {
		broke = append(broke, fmt.Sprintf("%d pods at once under a quota of %d", r.PeakActivePods, r.Quota))
	}
	return strings.Join(broke, ", ")
}

// noPod is the number of completions the controller counted without a pod
// that succeeded.
func (r result) noPod() int { return max(0, r.Reported-r.PodsSucceeded) }

// cpuByProcess is the CPU milliseconds per completion of every process the
// run measured: the controller (for the built-in modes the whole
// kube-controller-manager, counted once), the cluster's other components
// and the bench itself. On a busy machine their sum sets the throughput.
func (r result) cpuByProcess() map[string]float64 {
	per := func(sec float64) float64 { return 1000 * sec / float64(max(r.Completions, 1)) }
	out := map[string]float64{}
	if !strings.HasPrefix(r.Mode, modeLimit) {
		out["controller"] = per(r.CPUSec)
	}
	for name, sec := range r.ClusterCPUSec {
		if name == kcmProcess && strings.HasPrefix(r.Mode, modeBuiltin) {
			continue // the controller
		}
		out[name] = per(sec)
	}
	return out
}

// allCPU is the sum of cpuByProcess.
func (r result) allCPU() float64 {
	var total float64
	for _, ms := range r.cpuByProcess() {
		total += ms
	}
	return total
}
