package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

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
