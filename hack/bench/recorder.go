package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
)

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
