package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

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

// perCompletion formats counts divided by completions, sorted by name.
func perCompletion(counts map[string]int64, completions int) string {
	names := slices.Sorted(maps.Keys(counts))
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", name, float64(counts[name])/float64(max(completions, 1))))
	}
	return strings.Join(parts, ", ")
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
