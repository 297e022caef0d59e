package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// releasePod is a pod of the bench in phase, holding finalizers.
func releasePod(uid string, phase corev1.PodPhase, finalizers ...string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Finalizers: finalizers},
		Status: corev1.PodStatus{Phase: phase}}
}

// TestRecorderRelease: a pod is released once it has ended and no longer
// holds its controller's tracking finalizer, or once it is deleted; an
// ended pod that still holds the finalizer is not.
func TestRecorderRelease(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		controller, finalizer string
	}{
		{ctrlSafeJob, batchv1alpha1.LedgerFinalizer},
		{ctrlBuiltin, batchv1.JobTrackingFinalizer},
	} {
		r := newRecorder(tc.controller)
		r.seeAt(releasePod("a", corev1.PodRunning, tc.finalizer), at(1), watched)
		r.seeAt(releasePod("a", corev1.PodSucceeded, tc.finalizer), at(2), watched)
		r.seeAt(releasePod("b", corev1.PodFailed, tc.finalizer), at(2), watched)
		r.seeAt(releasePod("c", corev1.PodRunning, tc.finalizer), at(2), watched)
		if held, _ := r.unreleased(); held != 3 {
			t.Errorf("%s: %d pods unreleased, want 3: ended or not, each still holds %s", tc.controller, held, tc.finalizer)
		}
		// Another controller's finalizer holds nothing.
		r.seeAt(releasePod("a", corev1.PodSucceeded, "example.com/other"), at(5), watched)
		r.seeAt(releasePod("a", corev1.PodSucceeded), at(6), watched) // seen again: released at 5
		r.seeAt(releasePod("b", corev1.PodFailed, tc.finalizer), at(7), deleted)
		if held, last := r.unreleased(); held != 1 || !last.Equal(at(7)) {
			t.Errorf("%s: %d unreleased, last released at %v; want 1 (the running pod) and %v", tc.controller, held, last, at(7))
		}
		if !r.released["a"].Equal(at(5)) {
			t.Errorf("%s: a released at %v, want %v: when first seen without the finalizer", tc.controller, r.released["a"], at(5))
		}
		r.seeAt(releasePod("c", corev1.PodRunning, tc.finalizer), at(8), deleted) // deleted before it ended
		if held, last := r.unreleased(); held != 0 || !last.Equal(at(8)) {
			t.Errorf("%s: %d unreleased, last released at %v; want 0 and %v", tc.controller, held, last, at(8))
		}
		if r.recovered != 0 {
			t.Errorf("%s: the watch's releases counted %d as recovered", tc.controller, r.recovered)
		}
	}
	// The limit's pods carry no finalizer: released when they end.
	r := newRecorder(ctrlLimit)
	r.seeAt(releasePod("a", corev1.PodRunning), at(1), watched)
	r.seeAt(releasePod("a", corev1.PodSucceeded), at(3), watched)
	if held, last := r.unreleased(); held != 0 || !last.Equal(at(3)) {
		t.Errorf("limit: %d unreleased, last released at %v; want 0 and %v", held, last, at(3))
	}
}

// TestRecorderRecoversReleases: the final list records a release the watch
// missed, timed by the pod's finish, counting the pod once.
func TestRecorderRecoversReleases(t *testing.T) {
	finished := time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)
	listedPod := func(uid string, finalizers ...string) *corev1.Pod {
		p := releasePod(uid, corev1.PodSucceeded, finalizers...)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(finished)}}}}
		return p
	}
	r := newRecorder(ctrlSafeJob)
	r.see(listedPod("a", batchv1alpha1.LedgerFinalizer)) // its release is missed
	r.see(listedPod("b"))                                // seen whole
	for _, p := range []*corev1.Pod{listedPod("a"), listedPod("b"), listedPod("c"), listedPod("d", batchv1alpha1.LedgerFinalizer)} {
		r.seeAt(p, finishedAt(p), listed)
	}
	if r.recovered != 3 {
		t.Errorf("recovered %d, want 3: a's release, c and d, each once", r.recovered)
	}
	if !r.released["a"].Equal(finished) || !r.released["c"].Equal(finished) || r.released["b"].Equal(finished) {
		t.Errorf("release times %v: recovered ones from the finish time, the watched one from the watch", r.released)
	}
	if held, _ := r.unreleased(); held != 1 {
		t.Errorf("%d unreleased, want 1: d still holds the ledger finalizer", held)
	}
}

// TestWaitDoneWaitsForRelease: once every job is Complete the run goes on
// until every pod is released, and a timeout then names the pods held.
func TestWaitDoneWaitsForRelease(t *testing.T) {
	start := time.Now()
	r := newRecorder(ctrlSafeJob)
	r.complete = map[string]time.Time{"j-0": start.Add(time.Second)}
	r.seeAt(releasePod("a", corev1.PodSucceeded, batchv1alpha1.LedgerFinalizer), start, watched)
	r.seeAt(releasePod("b", corev1.PodSucceeded), start.Add(500*time.Millisecond), watched)
	w := workload{Name: "W", Jobs: 1, Completions: 2, Parallelism: 2}
	m := mode{Name: modeSafeJob, Controller: ctrlSafeJob}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := waitDone(ctx, w, m, r, start)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 pods seen still holding the finalizer "+batchv1alpha1.LedgerFinalizer) {
		t.Fatalf("waitDone with a pod held: %v", err)
	}
	r.seeAt(releasePod("a", corev1.PodSucceeded), start.Add(3*time.Second), watched)
	end, err := waitDone(context.Background(), w, m, r, start)
	if err != nil || !end.complete.Equal(start.Add(time.Second)) || !end.released.Equal(start.Add(3*time.Second)) {
		t.Errorf("waitDone = %+v, %v; want Complete at 1 s and released at 3 s", end, err)
	}
}

// TestReportShowsLastPodReleased: the table gives the median release of
// each mode beside its makespan, and "-" for results from before it was
// measured, which still load.
func TestReportShowsLastPodReleased(t *testing.T) {
	w := workload{Name: "W9", Desc: "test", Jobs: 1, Completions: 100}
	var old []result
	if err := json.Unmarshal([]byte(`[{"Workload":"W9","Mode":"built-in","Repeat":1,"Completions":100,`+
		`"MakespanSec":10,"PerSecond":10}]`), &old); err != nil {
		t.Fatal(err)
	}
	results := old
	for i, released := range []float64{14, 12, 13} {
		results = append(results, result{Workload: "W9", Mode: modeSafeJob, Repeat: i + 1, Completions: 100, MakespanSec: 8,
			LastReleasedSec: released, PerSecond: 12.5})
	}
	o := options{repeats: 3, scale: 1, raisedQPS: 200, podDuration: "1s"}
	out := report(o, []workload{w}, results, nil, "c.png", time.Minute)
	wantLines(t, out, "| makespan s | last pod released s | completions/s |", "| built-in | 1 | 10.0 | - | 10.0 |",
		"| SafeJob | 3 | 8.0 | 13.0 | 12.5 |", "last pod released from the first\ncreate until the last pod",
		"(`"+batchv1.JobTrackingFinalizer+"`\nfor the built-in, `"+batchv1alpha1.LedgerFinalizer+"` for SafeJob")
	if strings.Contains(out, "the last pod released by its controller") {
		t.Error("the release compared without the built-in's")
	}
	results[0].LastReleasedSec = 9.5
	wantLines(t, report(o, []workload{w}, results, nil, "c.png", time.Minute),
		"- the last pod released by its controller: SafeJob at 13.0 s, built-in at 9.5 s (the last job `Complete`: 8.0 s and 10.0 s)")
}
