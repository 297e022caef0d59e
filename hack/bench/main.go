// Command bench measures SafeJob against the built-in Job controller of
// kube-controller-manager, and against the limit of the cluster (a client
// creating the same pods directly), on the local cluster of test/cluster.
//
// Each run gets a fresh cluster. Results go to BENCHMARKS.md, a chart and a
// JSON file; `make bench` runs it with the defaults.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

const ns = "bench"

// workload is the same work for every mode.
type workload struct {
	Name, Desc               string
	Jobs                     int
	Completions, Parallelism int32
	Indexed                  bool
	// Base and Size name a workload run at several sizes (-sizes): W1×3 is
	// W1 at three times its size.
	Base string
	Size float64
	// Quota, when set, queues every job through one Kueue LocalQueue that
	// admits Quota pods at a time (queue.go).
	Quota int
}

func (w workload) total() int { return w.Jobs * int(w.Completions) }

// mode is who runs the work: the built-in Job controller, SafeJob or
// nobody (the limit), at a client rate (0: the controller's default).
type mode struct {
	Name       string
	Controller string // builtin, safejob, limit
	QPS        int
}

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

type options struct {
	root, manager, podDuration, profileDir string
	// podDurationMax, if set, spreads pod run times uniformly between
	// podDuration and it, each pod's drawn by the simulated node.
	podDurationMax               string
	repeats                      int
	scale                        float64
	raisedQPS                    int
	defaults                     bool
	timeout                      time.Duration
	only                         string
	keepLogs                     bool
	kcmVerbosity, kwokPodWorkers int
	profileSeconds               int
	profileAfter                 time.Duration
	operatorArgs                 []string
	// extraPodWatchers runs that many more informers of pods in the bench,
	// to measure what a watcher of pods costs kube-apiserver.
	extraPodWatchers int
	// rev is the commit the runs start from (the tree may move on while
	// they run).
	rev string
	// args are the command's arguments, for the report.
	args []string
	// earlier names the runs whose raw results were merged (-merge), and
	// jsonOut is where this run's are written; reportOnly says this run
	// ran nothing (-workloads none) and reports those alone.
	earlier    []string
	jsonOut    string
	reportOnly bool
	// checkpoint is where the results so far are written after every run,
	// and done holds the runs an interrupted set finished (-resume), by
	// runKey: kept, not run again.
	checkpoint string
	done       map[string]result
}

func main() {
	var o options
	var workloads, sizes, out, chart, jsonOut string
	flag.StringVar(&workloads, "workloads", "W1,W2,W3", "workloads to run (W1-W6; none: only report the raw results of -merge)")
	flag.StringVar(&sizes, "sizes", "", "run each workload at each of these sizes, comma separated multiples of -scale "+
		"(e.g. 1,3,10), or one workload at its own (W5:0.01,0.1,1), space separated; the report adds a section by size "+
		"and a chart of cost against size")
	flag.IntVar(&o.repeats, "repeats", 3, "repetitions of each pair (alternating order)")
	flag.Float64Var(&o.scale, "scale", 1, "fraction of each workload's size (1 = as specified)")
	flag.IntVar(&o.raisedQPS, "qps", 200, "the equal, raised client rate (QPS; burst is twice it) of both controllers")
	flag.BoolVar(&o.defaults, "defaults", true, "also run both controllers once at their default client rates")
	flag.StringVar(&o.podDuration, "pod-duration", "1s", "how long every pod runs on the simulated nodes")
	flag.StringVar(&o.podDurationMax, "pod-duration-max", "",
		"if set, each pod runs a time drawn uniformly between -pod-duration and this, so pods end out of their creation order")
	flag.StringVar(&o.manager, "manager", "bin/manager", "the operator binary")
	flag.StringVar(&o.profileDir, "profile", "",
		"directory for CPU profiles of the operator and kube-apiserver, and perf samples of KWOK where Linux perf is installed "+
			"(first repeat of each workload at the raised rate)")
	flag.IntVar(&o.profileSeconds, "profile-seconds", 20, "length of each CPU profile")
	flag.DurationVar(&o.profileAfter, "profile-after", 0,
		"start the CPU profiles this long after the run's first create (a cost that grows as a run goes on shows late)")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "longest a single run may take")
	flag.StringVar(&o.only, "only", "", "run only the modes whose name contains this (for experiments)")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "keep each run's directory (component logs, audit log) and print where")
	flag.IntVar(&o.kwokPodWorkers, "kwok-pod-workers", 0, "pod stages KWOK plays at once across its nodes "+
		"(0: KWOK's default, 4; where every earlier figure came from); a real cluster has a kubelet per node")
	flag.IntVar(&o.kcmVerbosity, "kcm-v", 0, "kube-controller-manager's log verbosity (with -keep-logs: the built-in controller's log)")
	var opArgs string
	flag.StringVar(&opArgs, "operator-args", "", "extra flags for the operator, space separated")
	flag.IntVar(&o.extraPodWatchers, "extra-pod-watchers", 0, "run this many more informers of pods in every run, "+
		"as another controller would (for experiments: what a watcher of pods costs kube-apiserver)")
	flag.StringVar(&out, "out", "BENCHMARKS.md", "the Markdown report")
	flag.StringVar(&chart, "chart", "docs/benchmarks.png", "the chart (PNG; an SVG of it is written beside it)")
	flag.StringVar(&jsonOut, "json", "bench-results.json", "every run's raw results")
	resume := flag.Bool("resume", false, "continue an interrupted set, run with the same command and operator: "+
		"keep the runs it finished (recorded in the -json file's .partial beside it, after every run) and run the rest")
	redraw := flag.Bool("redraw", false, "only redraw the chart from the raw results in -json (no runs)")
	var merge string
	flag.StringVar(&merge, "merge", "", "raw results (-json files of earlier runs, comma separated) to report beside this run's: "+
		"a set too long for one sitting, run in parts")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	o.operatorArgs = strings.Fields(opArgs)
	root, err := os.Getwd()
	if o.root = root; err != nil {
		fail(err)
	}
	all := map[string]workload{
		"W1": {Name: "W1", Desc: "1,000 jobs of one pod", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W2": {Name: "W2", Desc: "1 job, 5,000 completions, parallelism 200", Jobs: 1, Completions: 5000, Parallelism: 200},
		"W3": {Name: "W3", Desc: "200 Indexed jobs, 20 completions, parallelism 5", Jobs: 200, Completions: 20, Parallelism: 5, Indexed: true},
		"W4": {Name: "W4", Desc: "10,000 jobs of one pod, created at once", Jobs: 10000, Completions: 1, Parallelism: 1},
		"W5": {Name: "W5", Desc: "1 Indexed job, 100,000 completions, parallelism 2,000", Jobs: 1, Completions: 100000,
			Parallelism: 2000, Indexed: true},
		"W6": {Name: "W6", Desc: "5,000 jobs of one pod through one Kueue LocalQueue, 500 pods admitted at a time", Jobs: 5000,
			Completions: 1, Parallelism: 1, Quota: 500},
	}
	ws, err := selectWorkloads(all, workloads, sizes, o.scale)
	if err != nil {
		fail(err)
	}
	if err := checkPodDurations(o.podDuration, o.podDurationMax); err != nil {
		fail(err)
	}
	if *redraw {
		if err := redrawChart(jsonOut, chart, ws); err != nil {
			fail(err)
		}
		return
	}
	started := time.Now()
	o.args, o.reportOnly = withoutResume(os.Args[1:]), len(ws) == 0
	if o.reportOnly && merge == "" {
		fail(fmt.Errorf("-workloads none runs nothing: give -merge the raw results to report"))
	}
	if !o.reportOnly {
		if err := o.prepareRuns(jsonOut, *resume); err != nil {
			fail(err)
		}
	}
	results, failedRuns := runAll(o, ws)
	if merge != "" {
		var err error
		if ws, results, failedRuns, err = mergeEarlier(strings.Split(merge, ","), all, ws, results, failedRuns); err != nil {
			fail(err)
		}
	}
	if err := writeOutputs(o, ws, results, failedRuns, out, chart, jsonOut, time.Since(started)); err != nil {
		fail(err)
	}
	fmt.Printf("==> Wrote %s, %s and %s\n", out, chart, jsonOut)
}

// writeOutputs writes the raw results, the charts and the report, and then
// drops the results so far that an interrupted set would have resumed from.
func writeOutputs(o options, ws []workload, results, failedRuns []result, out, chart, jsonOut string, took time.Duration) error {
	if err := writeRaw(jsonOut, results, failedRuns); err != nil {
		return err
	}
	o.earlier, o.jsonOut = earlierRuns(o, results, failedRuns), jsonOut
	if err := writeChart(chart, ws, results); err != nil {
		return err
	}
	if err := writeSizeChart(sizeChartPath(chart), results); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(report(o, ws, results, failedRuns, chart, took)+keptSection(out)), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if o.checkpoint != "" {
		if err := os.Remove(o.checkpoint); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the results so far, now in %s: %w", jsonOut, err)
		}
	}
	return nil
}

// prepareRuns names the operator build under test and where the results so
// far are kept, and, resuming, which runs an interrupted set finished.
func (o *options) prepareRuns(jsonOut string, resume bool) error {
	o.rev = operatorRev(o.manager, gitRev())
	fmt.Fprintf(os.Stderr, "operator under test: %s\n", o.rev)
	o.checkpoint = partialPath(jsonOut)
	if !resume {
		return nil
	}
	var err error
	o.done, err = loadCheckpoint(o.checkpoint, o.runName())
	return err
}

// redrawChart draws the chart again from saved raw results.
func redrawChart(jsonPath, chart string, ws []workload) error {
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		return fmt.Errorf("reading raw results: %w", err)
	}
	var results []result
	if err := json.Unmarshal(raw, &results); err != nil {
		return fmt.Errorf("decoding raw results %s: %w", jsonPath, err)
	}
	return writeChart(chart, ws, results)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// selectWorkloads returns the named workloads at -scale, or, with sizes,
// each at each of its sizes (multiples of scale), named W1×3 and so on
// (a workload at one size other than 1 too, so that a set run in parts
// keeps its names).
// sizes holds space-separated lists: "1,3,10" for every workload,
// "W5:0.01,0.1,1" for one.
func selectWorkloads(all map[string]workload, names, sizes string, scale float64) ([]workload, error) {
	factors := map[string][]float64{"": {1}}
	for _, list := range strings.Fields(sizes) {
		name, values, ok := strings.Cut(list, ":")
		if !ok {
			name, values = "", list
		}
		factors[name] = nil
		for _, f := range strings.Split(values, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("-sizes: %q is not a positive number", f)
			}
			factors[name] = append(factors[name], v)
		}
	}
	var ws []workload
	if names == "none" {
		return nil, nil // a report of merged results alone
	}
	for _, n := range strings.Split(names, ",") {
		w, ok := all[n]
		if !ok {
			return nil, fmt.Errorf("unknown workload %q", n)
		}
		fw, own := factors[n]
		if !own {
			fw = factors[""]
		}
		for _, f := range fw {
			s := scaled(w, scale*f)
			if len(fw) > 1 || f != 1 { // one of several sizes, or a size apart (-merge joins it to the rest)
				s.Name, s.Base, s.Size = fmt.Sprintf("%s×%g", w.Name, f), w.Name, f
			}
			ws = append(ws, s)
		}
	}
	return ws, nil
}

func scaled(w workload, f float64) workload {
	if f == 1 {
		return w
	}
	if w.Jobs > 1 {
		w.Jobs = max(1, int(float64(w.Jobs)*f))
	} else {
		w.Completions = max(1, int32(float64(w.Completions)*f))
		w.Parallelism = min(w.Parallelism, w.Completions)
	}
	if w.Quota > 0 {
		w.Quota = max(1, int(float64(w.Quota)*f))
	}
	w.Desc += fmt.Sprintf(" (scaled %.2f: %d jobs × %d)", f, w.Jobs, w.Completions)
	return w
}

// runAll runs every workload: the limit once per repeat, each controller
// pair at the raised rate per repeat in alternating order, and both at
// their defaults once.
func runAll(o options, ws []workload) (results, failed []result) {
	for _, w := range ws {
		for r := 1; r <= o.repeats; r++ {
			pair := []mode{{modeBuiltin, ctrlBuiltin, o.raisedQPS}, {modeSafeJob, ctrlSafeJob, o.raisedQPS}}
			if r%2 == 0 {
				pair[0], pair[1] = pair[1], pair[0]
			}
			modes := pair
			if w.Quota == 0 { // the limit has no queue
				modes = append([]mode{{modeLimit, ctrlLimit, 0}}, pair...)
			}
			if r == 1 && o.defaults {
				modes = append(modes, mode{modeBuiltinDefault, ctrlBuiltin, 0}, mode{modeSafeJobDefault, ctrlSafeJob, 0})
			}
			for _, m := range modes {
				if o.only != "" && !strings.Contains(m.Name, o.only) {
					continue
				}
				if res, ok := o.done[key(w.Name, m.Name, r)]; ok {
					fmt.Printf("==> %s %-24s repeat %d: kept from the interrupted set (-resume)\n", w.Name, m.Name, r)
					results = append(results, res)
					continue
				}
				res, err := runOne(o, w, m, r)
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s %s repeat %d: %v\n", w.Name, m.Name, r, err)
					failed = append(failed, result{Workload: w.Name, Mode: m.Name, Base: w.Base, Size: w.Size, Repeat: r,
						Run: o.runName(), Spec: &w, Failed: err.Error()})
					o.saveProgress(results, failed)
					continue
				}
				fmt.Printf("==> %s %-24s repeat %d: %d completions in %.1fs (%.1f/s; last pod released at %.1fs), "+
					"first pod p50 %.2fs p99 %.2fs, %.2f writes/completion, CPU %.1fs, RSS %.0f MiB, %d extra pods; "+
					"%d succeeded reported for %d pods seen succeeding\n",
					w.Name, m.Name, r, res.Completions, res.MakespanSec, res.PerSecond, res.LastReleasedSec,
					res.FirstPodP50Sec, res.FirstPodP99Sec, res.WritesPerCompl, res.CPUSec, res.PeakRSSMiB, res.ExtraPods,
					res.Reported, res.PodsSucceeded)
				fmt.Printf("    machine %.0f%% busy, %.0f context switches per completion; "+
					"CPU s: apiserver %.1f, etcd %.1f, scheduler %.1f, kwok %.1f; "+
					"watches closed for falling behind: %v; pod watches ended, by client: %v; "+
					"pod watch events sent: %d (%.0f MiB)\n",
					100*res.MachineBusy, float64(res.ContextSwitches)/float64(max(res.Completions, 1)),
					res.ClusterCPUSec["kube-apiserver"], res.ClusterCPUSec["etcd"],
					res.ClusterCPUSec["kube-scheduler"], res.ClusterCPUSec["kwok"], res.WatchersClosed, res.PodWatchesEnded,
					res.WatchEvents["pods"], float64(res.WatchBytes["pods"])/(1<<20))
				if len(res.SwitchesByProcess) > 0 {
					fmt.Printf("    context switches per completion by process: %s\n", perCompletion(res.SwitchesByProcess, res.Completions))
				}
				res.Spec, res.Run = &w, o.runName()
				results = append(results, res)
				if res.Inexact != "" {
					fmt.Fprintf(os.Stderr, "bench: %s %s repeat %d broke exactness: %s\n", w.Name, m.Name, r, res.Inexact)
				}
				o.saveProgress(results, failed)
			}
		}
	}
	return results, failed
}

// saveProgress writes the results so far to the checkpoint; a set that
// cannot save them goes on, and says so.
func (o options) saveProgress(results, failed []result) {
	if o.checkpoint == "" {
		return
	}
	if err := writeRaw(o.checkpoint, results, failed); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v (an interrupted set cannot be resumed past this run)\n", err)
	}
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

// runDir creates the directory of one run (component logs, audit log) and
// returns what removes it; with -keep-logs it is kept and its path printed.
func runDir(o options, w workload, m mode, repeat int) (string, func(), error) {
	dir, err := os.MkdirTemp("", "safejob-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("creating the run's directory: %w", err)
	}
	if o.keepLogs {
		fmt.Fprintf(os.Stderr, "==> %s %s #%d: logs in %s\n", w.Name, m.Name, repeat, dir)
		return dir, func() {}, nil
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// clusterOptions is the local cluster a run gets.
func clusterOptions(o options, w workload, m mode, dir string) cluster.Options {
	copts := cluster.Options{Dir: dir, Root: o.root, Nodes: 4, ControllerManagerVerbosity: o.kcmVerbosity, Kueue: w.Quota > 0,
		KwokPodWorkers: o.kwokPodWorkers}
	switch {
	case m.QPS > 0:
		// kube-controller-manager serves every mode (pod GC, the garbage
		// collector) and is the built-in controller too: at the raised rate
		// it runs at that rate whichever controller is measured, so that
		// both meet the same cluster. At its default 20 QPS pod GC deletes
		// fewer pods a second than a large job finishes, and terminated pods
		// pile up past --terminated-pod-gc-threshold for every watcher to
		// carry. Through a queue, Kueue's Job integration does part of the
		// built-in controller's work (a Workload per Job, the Job
		// unsuspended on admission), and its admissions serve both: it runs
		// at the same raised rate in either mode.
		copts.ControllerManagerQPS, copts.KueueQPS = m.QPS, m.QPS
	case m.Controller == ctrlLimit:
		// The limit is the cluster of the raised runs with no controller.
		copts.ControllerManagerQPS = o.raisedQPS
	}
	return copts
}

// runOne runs one workload under one mode on a fresh cluster.
func runOne(o options, w workload, m mode, repeat int) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	dir, removeDir, err := runDir(o, w, m, repeat)
	if err != nil {
		return result{}, err
	}
	defer removeDir()
	copts := clusterOptions(o, w, m, dir)
	c, err := cluster.Start(ctx, copts)
	if err != nil {
		return result{}, fmt.Errorf("starting the local cluster: %w", err)
	}
	defer c.Stop()
	ctrl, stopCtrl, err := startController(ctx, o, c, dir, m)
	if err != nil {
		return result{}, err
	}
	defer stopCtrl()
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	cl, err := client.New(cfg, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return result{}, err
	}
	if err := prepare(ctx, cl, w); err != nil {
		return result{}, err
	}
	rec, err := startRecorder(ctx, cfg, m.Controller)
	if err != nil {
		return result{}, err
	}
	for range o.extraPodWatchers {
		if err := startPodWatcher(ctx, cfg); err != nil {
			return result{}, err
		}
	}
	before, err := scrapeWrites(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	operator := operatorCounters(ctx, m)
	cpu0 := cpuSeconds(ctrl)
	others0, machine0, switches0 := clusterCPU(c), readMachine(), switchesByProcess(c, ctrl)
	stopProfile := maybeProfile(o, w, m, repeat, cfg, c.Process("kwok"))
	start := time.Now()
	created, err := submit(ctx, cl, w, m, podTemplate(o.podDuration, o.podDurationMax), rec)
	if err != nil {
		return result{}, err
	}
	end, after, err := finish(ctx, w, m, rec, cl, cfg, start, stopProfile)
	if err != nil {
		return result{}, err
	}
	heapProfile(o, w, m, repeat)
	res := measure(w, m, repeat, start, end, created, rec, before, after, cpuSeconds(ctrl)-cpu0, peakRSS(ctrl))
	counted := operator()
	res.Reconciles, res.StatusWrites = counted.reconciles, counted.statusWrites
	res.ExtraPodWatchers = o.extraPodWatchers
	if res.PodWatchesEnded, err = testutil.WatchesEnded(c.AuditLog, "pods", start, end.last()); err != nil {
		return result{}, fmt.Errorf("reading pod watches from the audit log: %w", err)
	}
	res.ClusterCPUSec = clusterCPU(c)
	for k, v := range others0 {
		res.ClusterCPUSec[k] -= v
	}
	machine0.since(&res)
	res.SwitchesByProcess = switchesByProcess(c, ctrl)
	for k, v := range switches0 {
		res.SwitchesByProcess[k] -= v
	}
	return res, nil
}

// prepare creates the bench's namespace and, for a queued workload, its queue.
func prepare(ctx context.Context, cl client.Client, w workload) error {
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return fmt.Errorf("creating the namespace: %w", err)
	}
	if w.Quota > 0 {
		return setUpQueue(ctx, cl, w)
	}
	return nil
}

// finish waits for the end of the run (every job Complete, then every pod
// released), stops the profiles, recovers what the pod watch missed and
// reads the API server's settled write counts.
func finish(ctx context.Context, w workload, m mode, rec *recorder, cl client.Client, cfg *rest.Config,
	start time.Time, stopProfile func()) (runEnd, map[string]int, error) {
	end, err := waitDone(ctx, w, m, rec, start)
	stopProfile()
	if err != nil {
		return runEnd{}, nil, fmt.Errorf("%w; %s", err, stalled(cl, m))
	}
	if err := rec.recoverMissed(ctx, cl); err != nil {
		return runEnd{}, nil, err
	}
	// The final list may have found pods the watch had not shown: released
	// (timed by their finish, maybe the latest) or still held, to wait for.
	if end.released, err = waitReleased(ctx, rec, start); err != nil {
		return runEnd{}, nil, err
	}
	after, err := settledWrites(ctx, cfg)
	return end, after, err
}

// clusterComponents are the processes whose CPU time each run reports.
// kube-controller-manager runs in every mode (garbage collector, pod GC);
// in the built-in modes it is also the controller.
var clusterComponents = []string{"kube-apiserver", "etcd", "kube-scheduler", "kwok", kcmProcess}

// kcmProcess is kube-controller-manager's process name, and benchProcess
// the name the bench's own CPU and context switches are reported under.
const (
	kcmProcess   = "kube-controller-manager"
	benchProcess = "bench"
)

// clusterCPU is the CPU time so far of each cluster component and of the
// bench itself (its client and watches).
func clusterCPU(c *cluster.Cluster) map[string]float64 {
	out := map[string]float64{benchProcess: cluster.CPUSeconds(os.Getpid())}
	for _, name := range clusterComponents {
		out[name] = cpuSeconds(c.Process(name))
	}
	return out
}

// switchesByProcess is the context switches so far of each cluster
// component, of the controller and of the bench itself.
func switchesByProcess(c *cluster.Cluster, ctrl *cluster.Process) map[string]int64 {
	out := map[string]int64{benchProcess: processSwitches(os.Getpid())}
	for _, name := range clusterComponents {
		if p := c.Process(name); p != nil {
			out[name] = processSwitches(p.Pid())
		}
	}
	if ctrl != nil {
		out["controller"] = processSwitches(ctrl.Pid())
	}
	return out
}

// processSwitches sums the voluntary and involuntary context switches of
// every thread of process pid (/proc/PID/task/*/status); 0 if it is gone.
func processSwitches(pid int) int64 {
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil {
		return 0
	}
	var n int64
	for _, task := range tasks {
		raw, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.Lines(string(raw)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				if c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					n += c
				}
			}
		}
	}
	return n
}

// perCompletion formats counts divided by completions, sorted by name.
func perCompletion(counts map[string]int64, completions int) string {
	names := slices.Sorted(maps.Keys(counts))
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", name, float64(counts[name])/float64(max(completions, 1))))
	}
	return strings.Join(parts, ", ")
}

// machineCounters are the whole machine's figures a run is measured by.
type machineCounters struct {
	ticks [2]float64
	ctxt  int64
}

// readMachine reads the machine's counters from one read of /proc/stat:
// busy and total CPU ticks (its first line) and context switches since
// boot (its ctxt line); zero where they cannot be read.
func readMachine() machineCounters {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCounters{}
	}
	var m machineCounters
	for line := range strings.Lines(string(raw)) {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 1 && fields[0] == "cpu":
			for i, f := range fields[1:] {
				var v float64
				_, _ = fmt.Sscan(f, &v)
				m.ticks[1] += v
				if i != 3 && i != 4 { // idle, iowait
					m.ticks[0] += v
				}
			}
		case len(fields) == 2 && fields[0] == "ctxt":
			m.ctxt, _ = strconv.ParseInt(fields[1], 10, 64)
		}
	}
	return m
}

// since sets res's MachineBusy and ContextSwitches: what the machine did
// since m was read.
func (m machineCounters) since(res *result) {
	now := readMachine()
	if total := now.ticks[1] - m.ticks[1]; total > 0 {
		res.MachineBusy = (now.ticks[0] - m.ticks[0]) / total
	}
	if m.ctxt > 0 && now.ctxt >= m.ctxt {
		res.ContextSwitches = now.ctxt - m.ctxt
	}
}

// startController returns the process of the mode's controller (none for
// the limit), starting the operator for SafeJob modes, and how to stop it.
func startController(ctx context.Context, o options, c *cluster.Cluster, dir string, m mode) (*cluster.Process, func(), error) {
	switch m.Controller {
	case ctrlBuiltin:
		return c.Process(kcmProcess), func() {}, nil
	case ctrlSafeJob:
		p, err := startOperator(ctx, o, c, dir, m)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Stop, nil
	}
	return nil, func() {}, nil
}

// operatorCounters reads the operator's counts (reconcile passes, status
// writes by kind), for a mode that runs the operator, and returns a
// function that gives those made since (none for another mode). The counts
// are diagnostics: a read that fails is reported and counts as none, and
// leaves the run's figures alone.
func operatorCounters(ctx context.Context, m mode) (since func() operatorCounts) {
	if m.Controller != ctrlSafeJob {
		return func() operatorCounts { return operatorCounts{} }
	}
	read := func() (operatorCounts, bool) {
		var c operatorCounts
		// Its metrics server may start a moment after its caches have synced.
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			c, err = scrapeOperator(ctx)
			return err == nil, nil
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: reading the operator's counts from %s: %v\n", operatorMetrics, err)
		}
		return c, err == nil
	}
	before, ok := read()
	return func() operatorCounts {
		if after, ok2 := read(); ok && ok2 {
			return after.since(before)
		}
		return operatorCounts{}
	}
}

func startOperator(ctx context.Context, o options, c *cluster.Cluster, dir string, m mode) (*cluster.Process, error) {
	args := []string{"--kubeconfig=" + c.Kubeconfig, "--metrics-bind-address=" + operatorMetricsAddr,
		"--health-probe-bind-address=0", "--zap-log-level=error"}
	if m.QPS > 0 {
		args = append(args, fmt.Sprintf("--kube-api-qps=%d", m.QPS), fmt.Sprintf("--kube-api-burst=%d", 2*m.QPS))
	}
	if o.profileDir != "" {
		args = append(args, "--pprof-bind-address="+operatorPprofAddr)
	}
	args = append(args, o.operatorArgs...)
	p, err := cluster.StartProcess("manager", filepath.Join(dir, "manager.log"), o.manager, args...)
	if err != nil {
		return nil, fmt.Errorf("starting the operator: %w", err)
	}
	// The operator's caches sync in well under a second on an empty cluster.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	if err := p.Exited(); err != nil {
		return nil, fmt.Errorf("operator exited: %w\n%s", err, p.Tail(20))
	}
	return p, nil
}

// maybeProfile takes CPU profiles of kube-apiserver and of the operator
// (for either controller, the operator in SafeJob's runs), and samples the
// process kwok (KWOK, which plays every pod's stages) with Linux perf where
// perf is installed, -profile-seconds long, starting -profile-after the
// run's start; the returned function waits for them, or abandons those not
// yet started.
func maybeProfile(o options, w workload, m mode, repeat int, cfg *rest.Config, kwok *cluster.Process) func() {
	if o.profileDir == "" || m.Controller == ctrlLimit || repeat != 1 || m.QPS == 0 {
		return func() {}
	}
	_ = os.MkdirAll(o.profileDir, 0o755)
	abandon := make(chan struct{})
	var wg sync.WaitGroup
	take := func(what string, f func() error) {
		wg.Go(func() {
			select {
			case <-time.After(o.profileAfter):
			case <-abandon:
				return
			}
			if err := f(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", what, err)
			}
		})
	}
	seconds := o.profileSeconds
	timeout := time.Duration(seconds)*time.Second + time.Minute
	out := func(format string) string {
		return filepath.Join(o.profileDir, fmt.Sprintf(format, m.Controller, w.Name))
	}
	if m.Controller == ctrlSafeJob {
		take("profiling the operator", func() error {
			return saveProfile(fmt.Sprintf("%s/profile?seconds=%d", operatorPprof, seconds), out("%s-%s.pprof"), timeout)
		})
	}
	if kwok != nil {
		take("sampling KWOK", func() error { return perfRecord(kwok.Pid(), seconds, out("kwok-%s-%s.perf.data")) })
	}
	take("profiling kube-apiserver", func() error {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("creating a client: %w", err)
		}
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).
			Timeout(timeout).DoRaw(context.Background())
		if err != nil {
			return fmt.Errorf("requesting /debug/pprof/profile: %w", err)
		}
		if err := os.WriteFile(out("apiserver-%s-%s.pprof"), raw, 0o644); err != nil {
			return fmt.Errorf("writing the profile: %w", err)
		}
		return nil
	})
	return func() {
		close(abandon)
		wg.Wait()
	}
}

// perfRecord samples process pid's CPU for seconds with Linux perf into out
// (`perf report -i out`): KWOK's /debug/pprof serves no CPU profile.
func perfRecord(pid, seconds int, out string) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return errors.New("perf not found (Debian: apt-get install linux-perf), not sampled")
	}
	cmd := exec.Command(perf, "record", "-F", "199", "-e", "cpu-clock", "-g", "-p", strconv.Itoa(pid), "-o", out,
		"--", "sleep", strconv.Itoa(seconds))
	if raw, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %w: %s", err, raw)
	}
	return nil
}

// The operator serves /debug/pprof, with -profile, at operatorPprof.
const (
	operatorPprofAddr = "127.0.0.1:6065"
	operatorPprof     = "http://" + operatorPprofAddr + "/debug/pprof"
)

// saveProfile writes what url (a /debug/pprof endpoint) answers to out.
func saveProfile(url, out string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := httpGet(ctx, url)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// heapProfile saves, with -profile, the operator's heap at the end of the
// first repeat of a SafeJob run at the raised rate: what its caches hold
// once every job is done.
func heapProfile(o options, w workload, m mode, repeat int) {
	if o.profileDir == "" || m.Controller != ctrlSafeJob || repeat != 1 || m.QPS == 0 {
		return
	}
	out := filepath.Join(o.profileDir, fmt.Sprintf("safejob-heap-%s.pprof", w.Name))
	if err := saveProfile(operatorPprof+"/heap?gc=1", out, time.Minute); err != nil {
		fmt.Fprintf(os.Stderr, "bench: heap profile of the operator: %v\n", err)
	}
}

// checkPodDurations refuses run times the simulated nodes would read
// otherwise than meant: each must parse as a Go duration of at least 0, and
// a maximum below the duration (which KWOK would take as every pod's run
// time) is refused.
func checkPodDurations(duration, durationMax string) error {
	d, err := time.ParseDuration(duration)
	if err != nil || d < 0 {
		return fmt.Errorf("-pod-duration %q: want a duration of at least 0 (1s, 500ms)", duration)
	}
	if durationMax == "" {
		return nil
	}
	dMax, err := time.ParseDuration(durationMax)
	if err != nil || dMax < d {
		return fmt.Errorf("-pod-duration-max %q: want a duration of at least -pod-duration (%s)", durationMax, duration)
	}
	return nil
}

func podTemplate(duration, durationMax string) corev1.PodTemplateSpec {
	annotations := map[string]string{"kwok.safejob.dev/duration": duration}
	if durationMax != "" {
		annotations["kwok.safejob.dev/duration-max"] = durationMax
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

// submit creates the workload as fast as the client can, 32 creates at a
// time, and returns when each job's create returned.
func submit(ctx context.Context, cl client.Client, w workload, m mode, tmpl corev1.PodTemplateSpec,
	rec *recorder) (map[string]time.Time, error) {
	if m.Controller == ctrlLimit {
		return rec.runLimit(ctx, cl, w, tmpl)
	}
	created := map[string]time.Time{}
	var mu sync.Mutex
	var firstErr error
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("j-%d", i)
				if err := cl.Create(ctx, jobObject(name, w, m, tmpl)); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					continue
				}
				mu.Lock()
				created[name] = time.Now()
				mu.Unlock()
			}
		})
	}
	for i := range w.Jobs {
		work <- i
	}
	close(work)
	wg.Wait()
	return created, firstErr
}

func jobObject(name string, w workload, m mode, tmpl corev1.PodTemplateSpec) client.Object {
	if m.Controller == ctrlBuiltin {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1.JobSpec{
			Template: *tmpl.DeepCopy(), Completions: ptr.To(w.Completions), Parallelism: ptr.To(w.Parallelism)}}
		if w.Indexed {
			job.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		if w.Quota > 0 {
			// Created suspended, as Kueue asks where its webhook does not
			// suspend Jobs itself; Kueue resumes each once admitted.
			queueJob(job, &job.Spec.Template)
			job.Spec.Suspend = ptr.To(true)
		}
		return job
	}
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1alpha1.SafeJobSpec{
		Template: *tmpl.DeepCopy(), Completions: ptr.To(w.Completions), Parallelism: ptr.To(w.Parallelism)}}
	if w.Indexed {
		sj.Spec.CompletionMode = batchv1alpha1.IndexedCompletion
	}
	if w.Quota > 0 {
		queueJob(sj, &sj.Spec.Template)
	}
	return sj
}

// runEnd is when a run ended: when its last job became Complete (the
// limit: its last pod succeeded), and when its last pod was let go of by
// its controller. The built-in controller lets go of every pod before it
// marks its Job Complete, SafeJob after: each end alone favours one.
type runEnd struct{ complete, released time.Time }

// last is the later of the two ends.
func (e runEnd) last() time.Time {
	if e.released.After(e.complete) {
		return e.released
	}
	return e.complete
}

// waitDone waits until every job reports itself complete (the limit: until
// every pod succeeded), and then, within the same ctx, until the controller
// has let go of every pod seen; it returns when each happened.
func waitDone(ctx context.Context, w workload, m mode, rec *recorder, start time.Time) (runEnd, error) {
	var end runEnd
	for {
		var done int
		if m.Controller == ctrlLimit {
			done, end.complete = rec.succeededCount()/int(w.Completions), time.Now()
		} else {
			done, end.complete = rec.completeJobs()
		}
		if done >= w.Jobs {
			break
		}
		select {
		case <-ctx.Done():
			return runEnd{}, fmt.Errorf("%d of %d jobs complete, %s: %w", done, w.Jobs, rec.progress(start), ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling interval of the in-memory count
		}
	}
	var err error
	if end.released, err = waitReleased(ctx, rec, start); err != nil {
		return runEnd{}, err
	}
	return end, nil
}

// waitReleased waits until the controller has let go of every pod seen,
// and returns when it let go of the last.
func waitReleased(ctx context.Context, rec *recorder, start time.Time) (time.Time, error) {
	for {
		held, last := rec.unreleased()
		if held == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("every job complete, but %d of %d pods seen %s, %s: %w",
				held, rec.seenCount(), rec.holding(), rec.progress(start), ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling interval of the in-memory count
		}
	}
}

// recorder watches the pods: when each job's first pod appeared, every pod
// created and every success.
type recorder struct {
	mu         sync.Mutex
	ownerLabel string
	firstPod   map[string]time.Time
	seen       map[string]time.Time
	succeeded  map[string]time.Time
	onSuccess  func(pod *corev1.Pod)
	// complete holds when each job was first seen Complete; the jobs are
	// watched, not listed, so that measuring costs the API server little.
	complete map[string]time.Time
	// reported is the succeeded count each job's status last showed.
	reported map[string]int
	// recovered counts what the final list found that the watch missed.
	recovered int
	// largestStatus is the largest job status the watch showed, in bytes
	// of JSON.
	largestStatus int
	// scheduled and running hold when each pod was first seen bound to a
	// node and Running.
	scheduled, running map[string]time.Time
	// finalizer is the one the controller keeps on each pod until it has
	// counted the pod's end ("" for the limit: none), and released holds
	// when each pod was first seen let go of: ended without it, or deleted.
	finalizer string
	released  map[string]time.Time
	// active counts the pods the watch showed that it has not shown to end
	// (counted), and peakActive its most: under a queue, never above its
	// quota.
	counted            map[string]bool
	active, peakActive int
}

// startPodWatcher runs an informer of the bench's pods that does nothing
// with them, until ctx ends: one more watcher, as another controller is.
func startPodWatcher(ctx context.Context, cfg *rest.Config) error {
	informers, err := cache.New(cfg, cache.Options{Scheme: cluster.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return fmt.Errorf("creating an extra pod watcher: %w", err)
	}
	if _, err := informers.GetInformer(ctx, &corev1.Pod{}); err != nil {
		return fmt.Errorf("creating an extra pod watcher: %w", err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return fmt.Errorf("the extra pod watcher did not sync")
	}
	return nil
}

// newRecorder is a recorder of the pods of controller's jobs.
func newRecorder(controller string) *recorder {
	r := &recorder{firstPod: map[string]time.Time{}, seen: map[string]time.Time{}, succeeded: map[string]time.Time{},
		scheduled: map[string]time.Time{}, running: map[string]time.Time{}, counted: map[string]bool{},
		released: map[string]time.Time{}}
	r.ownerLabel = map[string]string{ctrlBuiltin: "batch.kubernetes.io/job-name", ctrlSafeJob: batchv1alpha1.SafeJobNameLabel,
		ctrlLimit: "bench/job"}[controller]
	r.finalizer = map[string]string{ctrlBuiltin: batchv1.JobTrackingFinalizer, ctrlSafeJob: batchv1alpha1.LedgerFinalizer}[controller]
	return r
}

func startRecorder(ctx context.Context, cfg *rest.Config, controller string) (*recorder, error) {
	r := newRecorder(controller)
	informers, err := cache.New(cfg, cache.Options{Scheme: cluster.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, fmt.Errorf("creating the watch cache: %w", err)
	}
	inf, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.see(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { r.see(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r.seeAt(pod, time.Now(), deleted)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	if err := r.watchJobs(ctx, informers, controller); err != nil {
		return nil, err
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("pod watch did not sync")
	}
	return r, nil
}

// watchJobs records when each Job or SafeJob becomes Complete.
func (r *recorder) watchJobs(ctx context.Context, informers cache.Cache, controller string) error {
	r.complete = map[string]time.Time{}
	var obj client.Object
	r.reported = map[string]int{}
	// state reports a job's name, whether it is Complete and the number
	// of succeeded pods its status reports.
	var state func(obj any) (string, bool, int)
	switch controller {
	case ctrlBuiltin:
		obj = &batchv1.Job{}
		state = func(obj any) (string, bool, int) {
			j, ok := obj.(*batchv1.Job)
			if !ok {
				return "", false, 0
			}
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					return j.Name, true, int(j.Status.Succeeded)
				}
			}
			return j.Name, false, int(j.Status.Succeeded)
		}
	case ctrlSafeJob:
		obj = &batchv1alpha1.SafeJob{}
		state = func(obj any) (string, bool, int) {
			sj, ok := obj.(*batchv1alpha1.SafeJob)
			if !ok {
				return "", false, 0
			}
			return sj.Name, meta.IsStatusConditionTrue(sj.Status.Conditions, batchv1alpha1.ConditionComplete), int(sj.Status.Succeeded)
		}
	default:
		return nil
	}
	inf, err := informers.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("watching jobs: %w", err)
	}
	see := func(obj any) {
		name, ok, succeeded := state(obj)
		size := statusBytes(obj)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reported[name] = succeeded
		r.largestStatus = max(r.largestStatus, size)
		if _, seen := r.complete[name]; ok && !seen {
			r.complete[name] = time.Now()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) },
	}); err != nil {
		return fmt.Errorf("watching jobs: %w", err)
	}
	return nil
}

// statusBytes is the size of a Job's or SafeJob's status as JSON.
func statusBytes(obj any) int {
	var status any
	switch o := obj.(type) {
	case *batchv1.Job:
		status = &o.Status
	case *batchv1alpha1.SafeJob:
		status = &o.Status
	default:
		return 0
	}
	raw, err := json.Marshal(status)
	if err != nil {
		return 0
	}
	return len(raw)
}

// completeJobs is the number of complete jobs and when the last became so.
func (r *recorder) completeJobs() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.complete), latest(r.complete)
}

func (r *recorder) see(pod *corev1.Pod) {
	r.seeAt(pod, time.Now(), watched)
}

// sighting is how the recorder came to see a pod.
type sighting int

const (
	watched sighting = iota // a watch event: added or updated
	deleted                 // a watch event: deleted
	listed                  // the final list of every pod (recoverMissed)
)

// recoverMissed lists every pod once the run is over, page by page from
// the API server (not a cache), and records what the watch had not
// delivered: a pod it never showed, or a success or release it missed. A
// watch the API server closes under load re-lists, and events may still be
// on their way at the end; either would count a success the controller saw
// as missing. A recovered success or release is timed by the pod's
// containers' finish time.
func (r *recorder) recoverMissed(ctx context.Context, cl client.Client) error {
	cont := ""
	for {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.Limit(500), client.Continue(cont)); err != nil {
			return fmt.Errorf("listing pods at the end: %w", err)
		}
		for i := range pods.Items {
			r.seeAt(&pods.Items[i], finishedAt(&pods.Items[i]), listed)
		}
		if cont = pods.Continue; cont == "" {
			return nil
		}
	}
}

// finishedAt is when a pod's last container finished, or now.
func finishedAt(pod *corev1.Pod) time.Time {
	var last time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
	}
	if last.IsZero() {
		return time.Now()
	}
	return last
}

// seeAt records a pod seen at now, as how says; the final list's finds
// are counted once per pod.
func (r *recorder) seeAt(pod *corev1.Pod, now time.Time, how sighting) {
	r.mu.Lock()
	uid := string(pod.UID)
	recovered := how == listed
	ended := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	missed := r.release(pod, now, ended, how)
	if _, ok := r.seen[uid]; !ok {
		r.seen[uid], missed = now, missed || recovered
		r.first(pod, now, recovered || ended)
	}
	r.steps(pod, now, recovered)
	if r.counted[uid] && ended {
		delete(r.counted, uid)
		r.active--
	}
	newSuccess := false
	if _, done := r.succeeded[uid]; !done && pod.Status.Phase == corev1.PodSucceeded {
		r.succeeded[uid] = now
		newSuccess, missed = !recovered, missed || recovered
	}
	if missed {
		r.recovered++
	}
	cb := r.onSuccess
	r.mu.Unlock()
	if newSuccess && cb != nil {
		cb(pod)
	}
}

// release records when a pod was first seen let go of by its controller:
// ended and no longer holding the controller's finalizer, or deleted. It
// reports whether the final list found what the watch had not shown.
func (r *recorder) release(pod *corev1.Pod, now time.Time, ended bool, how sighting) bool {
	uid := string(pod.UID)
	if _, done := r.released[uid]; done {
		return false
	}
	if how != deleted && (!ended || slices.Contains(pod.Finalizers, r.finalizer)) {
		return false
	}
	r.released[uid] = now
	return how == listed
}

// unreleased is the number of pods seen that their controller has not let
// go of, and when it let go of the last of the others.
func (r *recorder) unreleased() (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen) - len(r.released), latest(r.released)
}

// holding says what an unreleased pod is still doing, for an error.
func (r *recorder) holding() string {
	if r.finalizer == "" {
		return "not ended"
	}
	return "still holding the finalizer " + r.finalizer
}

func (r *recorder) seenCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// latest is the latest of times (zero for none).
func latest(times map[string]time.Time) time.Time {
	var last time.Time
	for _, t := range times {
		if t.After(last) {
			last = t
		}
	}
	return last
}

// first records a pod seen for the first time: its job's first pod, and
// a pod counted as active unless its life is not known (seen only once it
// had ended, or only by the final list).
func (r *recorder) first(pod *corev1.Pod, now time.Time, lifeUnknown bool) {
	if !lifeUnknown {
		r.counted[string(pod.UID)] = true
		r.active++
		r.peakActive = max(r.peakActive, r.active)
	}
	owner := pod.Labels[r.ownerLabel]
	if t, ok := r.firstPod[owner]; !ok || now.Before(t) {
		r.firstPod[owner] = now
	}
}

// steps records when a pod was first seen scheduled and Running.
func (r *recorder) steps(pod *corev1.Pod, now time.Time, recovered bool) {
	uid := string(pod.UID)
	if _, ok := r.scheduled[uid]; !ok && pod.Spec.NodeName != "" && !recovered {
		r.scheduled[uid] = now
	}
	if _, ok := r.running[uid]; !ok && pod.Status.Phase == corev1.PodRunning {
		r.running[uid] = now
	}
}

// progress says how far a run got, for one that did not finish: a run that
// times out keeps no row in the report, but its rate and status size so far
// still say where the limit of a size lies.
func (r *recorder) progress(start time.Time) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var reported int
	for _, n := range r.reported {
		reported += n
	}
	elapsed := time.Since(start)
	return fmt.Sprintf("after %s %d pods seen succeeding (%.1f/s; %s), %d completions reported, largest status %.1f KiB",
		elapsed.Round(time.Second), len(r.succeeded), float64(len(r.succeeded))/elapsed.Seconds(),
		perMinute(r.succeeded, start), reported, float64(r.largestStatus)/1024)
}

// perMinute lists how many of the times fall in each whole minute after
// start: a run's rate as it went on, so that a slowdown shows where it began.
func perMinute(times map[string]time.Time, start time.Time) string {
	var counts []int
	for _, t := range times {
		k := max(0, int(t.Sub(start)/time.Minute))
		for len(counts) <= k {
			counts = append(counts, 0)
		}
		counts[k]++
	}
	parts := make([]string, len(counts))
	for k, n := range counts {
		parts[k] = strconv.Itoa(n)
	}
	return "per minute " + strings.Join(parts, " ")
}

func (r *recorder) succeededCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.succeeded)
}

// runLimit creates the workload's pods directly, keeping parallelism pods
// of each job in flight: the most the cluster itself allows.
func (r *recorder) runLimit(ctx context.Context, cl client.Client, w workload, tmpl corev1.PodTemplateSpec) (map[string]time.Time, error) {
	type job struct{ next int32 }
	jobs := make([]*job, w.Jobs)
	var mu sync.Mutex
	queue := make(chan string, w.total())
	created := map[string]time.Time{}
	take := func(j int) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if jobs[j].next >= w.Completions {
			return "", false
		}
		jobs[j].next++
		return fmt.Sprintf("j-%d-%d", j, jobs[j].next-1), true
	}
	for j := range jobs {
		jobs[j] = &job{}
	}
	r.mu.Lock()
	r.onSuccess = func(pod *corev1.Pod) {
		var j int
		if _, err := fmt.Sscanf(pod.Labels["bench/job"], "j-%d", &j); err == nil {
			if name, ok := take(j); ok {
				queue <- name
			}
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for name := range queue {
				var j int
				_, _ = fmt.Sscanf(name, "j-%d-", &j)
				owner := fmt.Sprintf("j-%d", j)
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
					Labels: map[string]string{"bench/job": owner}, Annotations: tmpl.Annotations}, Spec: tmpl.Spec}
				if err := cl.Create(ctx, pod); err == nil {
					mu.Lock()
					if _, ok := created[owner]; !ok {
						created[owner] = time.Now()
					}
					mu.Unlock()
				}
			}
		})
	}
	for j := range jobs {
		for range w.Parallelism {
			if name, ok := take(j); ok {
				queue <- name
			}
		}
	}
	// Creates continue from success events; the caller waits for the end.
	go func() {
		for r.succeededCount() < w.total() && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond) // polling interval of the end check
		}
		close(queue)
	}()
	mu.Lock()
	defer mu.Unlock()
	out := map[string]time.Time{}
	for k := range jobs {
		out[fmt.Sprintf("j-%d", k)] = time.Time{} // first-pod latency of the limit is ~0 by construction
	}
	return out, nil
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

// cpuSeconds is the user+system CPU time of a process, from /proc.
func cpuSeconds(p *cluster.Process) float64 {
	if p == nil {
		return 0
	}
	return cluster.CPUSeconds(p.Pid())
}

// peakRSS is a process's peak resident set (VmHWM) in MiB.
func peakRSS(p *cluster.Process) float64 {
	if p == nil {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb float64
			_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "VmHWM:"), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}

// keptSection returns the section of the report at path that
// hack/benchledger writes (between its markers, with a blank line before),
// or "" when there is none: the cluster benchmark rewrites the rest.
func keptSection(path string) string {
	const begin, end = "<!-- ledger-bench begin -->", "<!-- ledger-bench end -->"
	old, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	doc := string(old)
	b, e := strings.Index(doc, begin), strings.Index(doc, end)
	if b < 0 || e < b {
		return ""
	}
	return "\n" + doc[b:e+len(end)] + "\n"
}

// stallShown is how many incomplete jobs a run that timed out describes.
const stallShown = 5

// stalled describes the first incomplete jobs of a run that timed out. It
// reads with a context of its own: the run's has ended.
func stalled(cl client.Client, m mode) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch m.Controller {
	case ctrlSafeJob:
		return testutil.IncompleteSafeJobs(ctx, cl, ns, stallShown)
	case ctrlBuiltin:
		return testutil.IncompleteJobs(ctx, cl, ns, stallShown)
	}
	return "no controller"
}
