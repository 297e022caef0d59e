// Command bench measures SafeJob against the built-in Job controller of
// kube-controller-manager, and against the limit of the cluster (a client
// creating the same pods directly), on the local cluster of test/cluster.
//
// Each run gets a fresh cluster. Results go to BENCHMARKS.md, a chart and a
// JSON file; `make bench` runs it with the defaults.
//
// Its files, by concern:
//   - main.go: the flags and main; the operator build under test, and the outputs written at the end
//   - workload.go: the workloads (W1-W6), their sizes (-scale, -sizes), and the modes that run them
//   - run.go: running every workload in every mode, each run on a fresh cluster, and waiting for a run's end
//   - controller.go: the controller under test (kube-controller-manager, or the operator started) and the operator's counts
//   - submit.go: creating a workload's jobs, or the limit's pods directly
//   - queue.go: the Kueue queue a queued workload (W6) goes through
//   - recorder.go: the bench's watch of pods and jobs, which times every pod's steps and every job's end
//   - result.go: a run's result: its figures, measured from the watch and the API server's counts, and its checks
//   - proc.go: the CPU, memory and context switches of the processes and the machine, from /proc
//   - metrics.go: the API server's request counts and the operator's own counts, scraped from their metrics
//   - profile.go: CPU and heap profiles of the operator and kube-apiserver, and perf samples of KWOK (-profile)
//   - resume.go: the results so far, written after every run, and resuming an interrupted set (-resume)
//   - merge.go: the raw results of earlier runs reported beside this one's (-merge)
//   - summary.go: the medians of a workload's runs in one mode, which every section reports
//   - report.go: the Markdown report: its header, and each workload's table and breakdowns
//   - verdict.go: the lines under each workload's table: the ratios the goals are about, and what else the runs saw
//   - targets.go: the targets, their section of the report, and how a row is judged and written
//   - targets_workload.go: the targets judged on one workload at one size
//   - targets_sizes.go: the targets judged over a workload's sizes, and across workloads (W4 against W1)
//   - sizes.go: the report's section on each workload run at several sizes
//   - chart.go: the charts (PNG and SVG): pods succeeded over time, and cost against size
package main

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

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
	all := allWorkloads()
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

func gitRev() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// operatorRev names the commit the operator binary was built from, as its
// build information records it, and says so when that is not the tree's
// (a binary left from an earlier build measures other code).
func operatorRev(binary, head string) string {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fmt.Sprintf("(operator binary %s unreadable: %v)", binary, err)
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return fmt.Sprintf("(operator binary %s records no commit)", binary)
	case modified == "true":
		return fmt.Sprintf("commit %.7s with uncommitted changes", rev)
	case head != "" && rev != head:
		return fmt.Sprintf("commit %.7s (the operator binary's; the tree is at %.7s: rebuild it to measure the tree)", rev, head)
	}
	return fmt.Sprintf("commit %.7s", rev)
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
