package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/batchjob"
	"github.com/safejob/safejob/test/cluster"
)

// fate is what one pod does once it runs: end after duration, Succeeded
// or Failed with exit, or (hold) run until it is stopped.
type fate struct {
	exit     int32
	duration time.Duration
	hold     bool
}

// script gives the fate of the attempt-th pod (in creation order, from 0)
// of an index; NonIndexed pods all share the index "".
type script func(index string, attempt int) fate

// parityCase is one spec run as a batch/v1 Job and as a SafeJob at once.
type parityCase struct {
	spec   batchv1.JobSpec
	script script
	// steps change both objects while they run, each once its condition
	// holds for that object.
	steps []step
}

// step is a change made to the Job and to the SafeJob alike: once running
// of the object's pods run and at least ended have ended (or, with running
// 0, once none is left that has not ended), the merge patch is applied to
// the object, or, with evict, one running pod is evicted through the
// Eviction API.
type step struct {
	running int
	ended   int
	patch   string
	evict   bool
}

// parityOutcome is what is compared between the two controllers.
type parityOutcome struct {
	Finished         string // the True Complete or Failed condition, with its reason
	Succeeded        int32
	Failed           int32
	CompletedIndexes string
	FailedIndexes    string
	Active           int32
	Terminating      int32
	PodsPerIndex     map[string]int
}

func succeedAfter(d time.Duration) script { return func(string, int) fate { return fate{duration: d} } }

// failFirst fails the first n attempts of the indexes listed (every index
// when none is) with exit, and succeeds the rest.
func failFirst(n int, exit int32, indexes ...string) script {
	return func(index string, attempt int) fate {
		if attempt < n && (len(indexes) == 0 || strings.Contains(","+strings.Join(indexes, ",")+",", ","+index+",")) {
			return fate{exit: exit, duration: 200 * time.Millisecond}
		}
		return fate{duration: 200 * time.Millisecond}
	}
}

func parityTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{holdAnnotation: ""}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

func jobSpec(completions *int32, parallelism int32, mutate ...func(*batchv1.JobSpec)) batchv1.JobSpec {
	s := batchv1.JobSpec{Completions: completions, Parallelism: ptr.To(parallelism), BackoffLimit: ptr.To[int32](6),
		Template: parityTemplate()}
	for _, m := range mutate {
		m(&s)
	}
	return s
}

func indexed(s *batchv1.JobSpec) { s.CompletionMode = ptr.To(batchv1.IndexedCompletion) }

func exitCodeRule(action batchv1.PodFailurePolicyAction, codes ...int32) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{Action: action, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
		Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes}}
}

func parityCases() map[string]parityCase {
	quick := 200 * time.Millisecond
	return map[string]parityCase{
		"NonIndexed, all succeed": {spec: jobSpec(ptr.To[int32](3), 2), script: succeedAfter(quick)},
		"zero completions":        {spec: jobSpec(ptr.To[int32](0), 2), script: succeedAfter(quick)},
		"work queue": {spec: jobSpec(nil, 3), script: func(_ string, attempt int) fate {
			if attempt == 0 {
				return fate{duration: quick}
			}
			return fate{duration: 3 * time.Second}
		}},
		"backoffLimit exceeded": {spec: jobSpec(ptr.To[int32](1), 1, func(s *batchv1.JobSpec) { s.BackoffLimit = ptr.To[int32](1) }),
			script: failFirst(5, 1)},
		// Index 1's failing pods run 4 s, the others 200 ms: every other
		// index has succeeded before index 1 fails, in both controllers' runs.
		// A success recorded after a failure resets batch/v1's backoff, so
		// failures and successes that finish together would make the
		// delays (compared below) depend on which was seen first.
		"Indexed, one index fails twice": {spec: jobSpec(ptr.To[int32](4), 2, indexed), script: func(index string, attempt int) fate {
			if index == "1" && attempt < 2 {
				return fate{exit: 1, duration: 4 * time.Second}
			}
			return fate{duration: quick}
		}},
		"per-index backoff": {spec: jobSpec(ptr.To[int32](3), 3, indexed, func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex = ptr.To[int32](2)
		}), script: failFirst(2, 1, "0")},
		"two adjacent indexes": {spec: jobSpec(ptr.To[int32](2), 2, indexed), script: succeedAfter(quick)},
		"podFailurePolicy FailJob": {spec: jobSpec(ptr.To[int32](2), 2, indexed, func(s *batchv1.JobSpec) {
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				exitCodeRule(batchv1.PodFailurePolicyActionFailJob, 42)}}
		}), script: func(index string, _ int) fate {
			if index == "0" {
				return fate{exit: 42, duration: quick}
			}
			return fate{hold: true}
		}},
		"podFailurePolicy Ignore": {spec: jobSpec(ptr.To[int32](2), 1, func(s *batchv1.JobSpec) {
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				exitCodeRule(batchv1.PodFailurePolicyActionIgnore, 3)}}
		}), script: failFirst(1, 3)},
		"per-index limit and maxFailedIndexes": {spec: jobSpec(ptr.To[int32](3), 3, indexed, func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex, s.MaxFailedIndexes = ptr.To[int32](0), ptr.To[int32](0)
		}), script: func(index string, _ int) fate {
			if index == "1" {
				return fate{exit: 1, duration: quick}
			}
			return fate{hold: true}
		}},
		"successPolicy": {spec: jobSpec(ptr.To[int32](4), 4, indexed, func(s *batchv1.JobSpec) {
			s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0,1")}}}
		}), script: func(index string, _ int) fate {
			if index == "0" || index == "1" {
				return fate{duration: quick}
			}
			return fate{hold: true}
		}},
		"activeDeadlineSeconds": {spec: jobSpec(ptr.To[int32](2), 2, func(s *batchv1.JobSpec) {
			s.ActiveDeadlineSeconds = ptr.To[int64](2)
		}), script: func(string, int) fate { return fate{hold: true} }},
		"neither completions nor parallelism": {spec: jobSpec(nil, 0, func(s *batchv1.JobSpec) { s.Parallelism = nil }),
			script: failFirst(1, 1)},
		"Indexed, zero completions": {spec: jobSpec(ptr.To[int32](0), 2, indexed), script: succeedAfter(quick)},
		"podFailurePolicy Count and NotIn": {spec: jobSpec(ptr.To[int32](2), 2, func(s *batchv1.JobSpec) {
			s.BackoffLimit = ptr.To[int32](1)
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				exitCodeRule(batchv1.PodFailurePolicyActionIgnore, 5),
				{Action: batchv1.PodFailurePolicyActionCount, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0, 7}}},
				exitCodeRule(batchv1.PodFailurePolicyActionFailJob, 7)}}
			s.PodReplacementPolicy = ptr.To(batchv1.Failed)
		}), script: func(_ string, attempt int) fate {
			// exit 5 is ignored, exit 3 counted, the second count (exit 4)
			// exceeds backoffLimit 1.
			return fate{exit: []int32{5, 3, 4, 0, 0, 0}[min(attempt, 5)], duration: quick}
		}},
		"podFailurePolicy FailIndex": {spec: jobSpec(ptr.To[int32](3), 3, indexed, func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex = ptr.To[int32](3)
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				exitCodeRule(batchv1.PodFailurePolicyActionFailIndex, 9)}}
		}), script: func(index string, _ int) fate {
			if index == "2" {
				return fate{exit: 9, duration: quick}
			}
			return fate{duration: quick}
		}},
		"DisruptionTarget ignored": {spec: jobSpec(ptr.To[int32](1), 1, func(s *batchv1.JobSpec) {
			s.BackoffLimit = ptr.To[int32](0)
			s.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}}}
		}), script: func(_ string, attempt int) fate {
			if attempt == 0 {
				return fate{hold: true}
			}
			return fate{duration: quick}
		}, steps: []step{{running: 1, evict: true}}},
		"suspended while running, then resumed": {spec: jobSpec(ptr.To[int32](3), 2), script: func(_ string, attempt int) fate {
			if attempt < 2 {
				return fate{hold: true}
			}
			return fate{duration: quick}
		}, steps: []step{{running: 2, patch: `{"spec":{"suspend":true}}`}, {running: 0, patch: `{"spec":{"suspend":false}}`}}},
		"elastic Indexed scaled down": {spec: jobSpec(ptr.To[int32](4), 4, indexed), script: func(index string, _ int) fate {
			if index == "3" {
				return fate{duration: quick} // succeeds before the scale-down: no longer counted after it
			}
			return fate{duration: 6 * time.Second}
		}, steps: []step{{running: 3, ended: 1, patch: `{"spec":{"completions":2,"parallelism":2}}`}}},
		"elastic Indexed scaled up": {spec: jobSpec(ptr.To[int32](2), 2, indexed), script: succeedAfter(3 * time.Second),
			steps: []step{{running: 2, patch: `{"spec":{"completions":4,"parallelism":4}}`}}},
		"parallelism lowered while running": {spec: jobSpec(ptr.To[int32](4), 3), script: func(_ string, attempt int) fate {
			if attempt < 3 {
				return fate{duration: 8 * time.Second}
			}
			return fate{duration: quick}
		}, steps: []step{{running: 3, patch: `{"spec":{"parallelism":1}}`}, {running: 1, patch: `{"spec":{"parallelism":2}}`}}},
	}
}

// TestParity runs each case as a batch/v1 Job under kube-controller-manager's
// Job controller, as a SafeJob with the same spec and as a Job that differs
// from the first only by naming SafeJob in spec.managedBy, at the same time,
// on one local cluster, with the same scripted fate for the n-th pod of
// each index; then compares how each ended with the first. Any difference
// fails the test.
func TestParity(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	d := startFateDriver(t, e)
	for name, tc := range parityCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := "parity-" + strings.NewReplacer(" ", "-", ",", "", "/", "-").Replace(strings.ToLower(name))
			if err := e.cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
			d.setScript(ns, tc.script)
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns}, Spec: tc.spec}
			sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "safejob", Namespace: ns}}
			if err := batchjob.ConvertSpec(tc.spec, &sj.Spec, "spec"); err != nil {
				t.Fatal(err)
			}
			managed := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "managed", Namespace: ns}, Spec: *tc.spec.DeepCopy()}
			managed.Spec.ManagedBy = ptr.To(batchv1alpha1.ControllerName)
			for _, obj := range []client.Object{job, sj, managed} {
				if err := e.cl.Create(context.Background(), obj); err != nil {
					t.Fatalf("creating %T: %v", obj, err)
				}
			}
			// The managed Job's pods are its ledger's.
			owners := map[client.Object]func() types.UID{job: job.GetUID, sj: sj.GetUID, managed: func() types.UID { return e.ledgerUID(managed) }}
			var wg sync.WaitGroup
			for obj, owner := range owners {
				wg.Go(func() { d.runSteps(t, obj, owner, tc.steps) })
			}
			wg.Wait()
			wantJob, gotSJ := e.waitParity(t, job, sj, d, 3*time.Minute)
			gotManaged := e.waitManagedParity(t, managed, d, time.Minute)
			t.Logf("batch/v1: %+v", wantJob)
			if diff := cmp.Diff(wantJob, gotSJ); diff != "" {
				t.Errorf("SafeJob differs from batch/v1 (-batch/v1,+SafeJob):\n%s", diff)
			}
			if diff := cmp.Diff(wantJob, gotManaged); diff != "" {
				t.Errorf("the Job managed by SafeJob differs from batch/v1 (-batch/v1,+managed):\n%s", diff)
			}
			if diff := cmp.Diff(jobConditions(job), jobConditions(managed)); diff != "" {
				t.Errorf("the managed Job's conditions differ from batch/v1's (-batch/v1,+managed):\n%s", diff)
			}
			e.compareJobEvents(t, job, managed)
			// The backoff delay: the gaps between the creates of an index's
			// pods, to the second (creation times have second precision).
			jobGaps := d.createGaps(job.UID)
			for what, uid := range map[string]types.UID{"SafeJob": sj.UID, "managed Job": e.ledgerUID(managed)} {
				gaps := d.createGaps(uid)
				t.Logf("gaps between creates: batch/v1 %v, %s %v", jobGaps, what, gaps)
				for index, want := range jobGaps {
					got := gaps[index]
					for k := range min(len(want), len(got)) {
						if diff := got[k] - want[k]; diff < -3*time.Second || diff > 3*time.Second {
							t.Errorf("%s, index %q: gap %d between creates is %s, batch/v1's %s", what, index, k, got[k], want[k])
						}
					}
				}
			}
		})
	}
}

// ledgerUID is the UID of a managed Job's ledger, "" while it has none.
func (e *env) ledgerUID(job *batchv1.Job) types.UID {
	ledger := &batchv1alpha1.SafeJob{}
	if err := e.cl.Get(context.Background(), client.ObjectKeyFromObject(job), ledger); err != nil {
		return ""
	}
	return ledger.UID
}

// waitManagedParity waits until a managed Job has finished and returns its
// outcome, its pods counted by its ledger's UID.
func (e *env) waitManagedParity(t *testing.T, job *batchv1.Job, d *fateDriver, timeout time.Duration) parityOutcome {
	t.Helper()
	waitUntil(t, timeout, "the managed Job "+job.Name+" to finish", func() bool {
		return e.cl.Get(context.Background(), client.ObjectKeyFromObject(job), job) == nil && unfinishedJobs([]batchv1.Job{*job}) == 0
	})
	return jobOutcome(job, d.podsPerIndex(e.ledgerUID(job)))
}

// jobConditions are a Job's conditions, in order, as type, status, reason
// and message, the names of its pods written as <pod>.
func jobConditions(job *batchv1.Job) []string {
	var out []string
	for _, c := range job.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, podNamesOf(job).ReplaceAllString(c.Message, "<pod>")))
	}
	return out
}

// podNamesOf matches the names of a Job's pods, for messages compared
// across Jobs whose pods are named apart.
func podNamesOf(job *batchv1.Job) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta(job.Name) + `-[a-z0-9-]+`)
}

// safeJobNotes are the reasons of the events SafeJob adds on a Job it
// manages to say how it runs it (docs/managed-jobs.md); batch/v1 has none.
var safeJobNotes = []string{"RunAs", "SpecNotApplied"}

// compareJobEvents waits until the events recorded on the managed Job are
// those recorded on the built-in Job, by type, reason and message (pod names
// left out), each as many times, and fails saying how they differ if they
// are not within a bound. Both controllers write their events after the
// writes they tell of, so the last ones may come after the Job has finished.
func (e *env) compareJobEvents(t *testing.T, job, managed *batchv1.Job) {
	t.Helper()
	var want, got map[string]int
	deadline := time.Now().Add(30 * time.Second)
	for {
		events := &corev1.EventList{}
		if err := e.cl.List(context.Background(), events, client.InNamespace(job.Namespace)); err != nil {
			t.Fatalf("listing events: %v", err)
		}
		want, got = jobEvents(events.Items, job, nil), jobEvents(events.Items, managed, safeJobNotes)
		if maps.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the managed Job's events differ from batch/v1's (-batch/v1,+managed):\n%s", cmp.Diff(want, got))
			return
		}
		time.Sleep(500 * time.Millisecond) // polling interval of the events
	}
}

// jobEvents counts the events recorded on job by type, reason and message,
// the names of its pods written as <pod>, leaving out the reasons in skip.
// An event that stands for several (its count, or the legacy recorder's
// aggregate of similar events) counts as many times.
func jobEvents(events []corev1.Event, job *batchv1.Job, skip []string) map[string]int {
	pod := podNamesOf(job)
	out := map[string]int{}
	for _, ev := range events {
		if ev.InvolvedObject.Kind != "Job" || ev.InvolvedObject.UID != job.UID || slices.Contains(skip, ev.Reason) {
			continue
		}
		msg := pod.ReplaceAllString(strings.TrimPrefix(ev.Message, "(combined from similar events): "), "<pod>")
		out[ev.Type+"/"+ev.Reason+": "+msg] += max(int(ev.Count), 1)
	}
	return out
}

// jobOutcome is what a finished Job's status says, with its pods per index.
func jobOutcome(job *batchv1.Job, podsPerIndex map[string]int) parityOutcome {
	out := parityOutcome{Succeeded: job.Status.Succeeded, Failed: job.Status.Failed,
		CompletedIndexes: job.Status.CompletedIndexes, FailedIndexes: ptr.Deref(job.Status.FailedIndexes, ""),
		Active: job.Status.Active, Terminating: ptr.Deref(job.Status.Terminating, 0), PodsPerIndex: podsPerIndex}
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			out.Finished = string(c.Type) + "/" + c.Reason
		}
	}
	return out
}

// waitParity waits until both have finished and returns their outcomes.
func (e *env) waitParity(t *testing.T, job *batchv1.Job, sj *batchv1alpha1.SafeJob, d *fateDriver, timeout time.Duration) (parityOutcome, parityOutcome) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		jobErr := e.cl.Get(ctx, client.ObjectKeyFromObject(job), job)
		sjErr := e.cl.Get(ctx, client.ObjectKeyFromObject(sj), sj)
		if jobErr == nil && sjErr == nil && unfinishedJobs([]batchv1.Job{*job}) == 0 && unfinishedSafeJobs([]batchv1alpha1.SafeJob{*sj}) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not both finished after %s: Job %+v (%v), SafeJob %+v (%v)", timeout,
				job.Status.Conditions, jobErr, sj.Status.Conditions, sjErr)
		}
		time.Sleep(500 * time.Millisecond) // polling interval of the finish check
	}
	jobOut := jobOutcome(job, d.podsPerIndex(job.UID))
	sjOut := parityOutcome{Succeeded: sj.Status.Succeeded, Failed: sj.Status.Failed,
		CompletedIndexes: sj.Status.CompletedIndexes, FailedIndexes: ptr.Deref(sj.Status.FailedIndexes, ""),
		Active: sj.Status.Active, Terminating: ptr.Deref(sj.Status.Terminating, 0), PodsPerIndex: d.podsPerIndex(sj.UID)}
	for _, c := range sj.Status.Conditions {
		if (c.Type == batchv1alpha1.ConditionComplete || c.Type == batchv1alpha1.ConditionFailed) && c.Status == metav1.ConditionTrue {
			sjOut.Finished = c.Type + "/" + c.Reason
		}
	}
	return jobOut, sjOut
}

const holdAnnotation = "kwok.safejob.dev/hold"

// fateDriver gives every pod of a Job or SafeJob in a scripted namespace
// its fate: pods start held (the template's hold annotation), and once one
// runs the driver replaces the hold with the scripted duration and exit
// code, which KWOK then carries out.
type fateDriver struct {
	cl      client.Client
	mu      sync.Mutex
	scripts map[string]script
	attempt map[types.UID]int      // by pod: its attempt of its index
	created map[string][]time.Time // by owner UID and index: creation times, in order
	done    map[types.UID]bool     // pods whose fate is set
	last    map[types.UID]seenPod  // every pod's last state seen
}

// seenPod is what the driver last saw of a pod.
type seenPod struct {
	owner   types.UID
	name    string
	running bool // Running and not being deleted
	ended   bool // Succeeded or Failed
}

func startFateDriver(t *testing.T, e *env) *fateDriver {
	t.Helper()
	d := &fateDriver{cl: e.cl, scripts: map[string]script{}, attempt: map[types.UID]int{}, done: map[types.UID]bool{},
		created: map[string][]time.Time{}, last: map[types.UID]seenPod{}}
	watchPods(t, e.c, func(ctx context.Context, pod *corev1.Pod) { d.see(ctx, t, pod) })
	return d
}

func (d *fateDriver) setScript(ns string, s script) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scripts[ns] = s
}

// see numbers a pod among its index's pods when it first appears, and sets
// its fate once it runs.
func (d *fateDriver) see(ctx context.Context, t *testing.T, pod *corev1.Pod) {
	owner := metav1.GetControllerOf(pod)
	d.mu.Lock()
	s := d.scripts[pod.Namespace]
	if s == nil || owner == nil {
		d.mu.Unlock()
		return
	}
	index := pod.Labels[batchv1alpha1.JobCompletionIndexAnnotation]
	attempt := d.note(pod, owner.UID, index)
	_, held := pod.Annotations[holdAnnotation]
	ready := held && !d.done[pod.UID] && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil
	if ready {
		d.done[pod.UID] = true
	}
	d.mu.Unlock()
	if !ready {
		return
	}
	f := s(index, attempt)
	if f.hold {
		return
	}
	annotations := map[string]any{holdAnnotation: nil, "kwok.safejob.dev/duration": f.duration.String()}
	if f.exit != 0 {
		annotations["kwok.safejob.dev/exit-code"] = strconv.Itoa(int(f.exit))
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Error(err)
		return
	}
	if err := d.cl.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil && ctx.Err() == nil {
		t.Errorf("scripting pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// note keeps the pod's state and returns its attempt of its index, numbering
// it when it first appears. Call with d.mu held.
func (d *fateDriver) note(pod *corev1.Pod, owner types.UID, index string) int {
	d.last[pod.UID] = seenPod{owner: owner, name: pod.Name,
		running: pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil,
		ended:   pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed}
	attempt, known := d.attempt[pod.UID]
	if !known {
		key := string(owner) + "/" + index
		attempt = len(d.created[key])
		d.attempt[pod.UID] = attempt
		d.created[key] = append(d.created[key], pod.CreationTimestamp.Time)
	}
	return attempt
}

// podsPerIndex is how many pods the owner created for each index.
func (d *fateDriver) podsPerIndex(owner types.UID) map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for key, times := range d.created {
		if o, index, _ := strings.Cut(key, "/"); types.UID(o) == owner {
			out[index] = len(times)
		}
	}
	return out
}

// createGaps is, by index, the time between consecutive creates of the
// owner's pods.
func (d *fateDriver) createGaps(owner types.UID) map[string][]time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]time.Duration{}
	for key, times := range d.created {
		o, index, _ := strings.Cut(key, "/")
		if types.UID(o) != owner {
			continue
		}
		for k := 1; k < len(times); k++ {
			out[index] = append(out[index], times[k].Sub(times[k-1]))
		}
	}
	return out
}

// runSteps makes the case's changes to one object, each once its
// condition holds for the object's pods.
func (d *fateDriver) runSteps(t *testing.T, obj client.Object, owner func() types.UID, steps []step) {
	ctx := context.Background()
	for k, st := range steps {
		var pod string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			running, unended, ended, name := d.pods(owner())
			pod = name
			if st.running == 0 {
				return unended == 0, nil
			}
			return running == st.running && ended >= st.ended, nil
		})
		if err != nil {
			t.Errorf("%T step %d: waiting for %d pods running: %v", obj, k, st.running, err)
			return
		}
		switch {
		case st.evict:
			eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: obj.GetNamespace()}}
			target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: obj.GetNamespace()}}
			err = d.cl.SubResource("eviction").Create(ctx, target, eviction)
		default:
			err = d.cl.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(st.patch)))
		}
		if err != nil {
			t.Errorf("%T step %d: %v", obj, k, err)
			return
		}
	}
}

// pods counts the owner's pods that run, those that have not ended and
// those that have, and names one that runs.
func (d *fateDriver) pods(owner types.UID) (running, unended, ended int, name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.last {
		if p.owner != owner {
			continue
		}
		if p.running {
			running++
			name = p.name
		}
		if p.ended {
			ended++
		} else {
			unended++
		}
	}
	return running, unended, ended, name
}

// TestParityTTL: ttlSecondsAfterFinished deletes a finished Job and a
// finished SafeJob alike, and their pods with them, no sooner than the TTL
// after they finished.
func TestParityTTL(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	d := startFateDriver(t, e)
	ctx := context.Background()
	const ns, ttl = "parity-ttl", 3
	if err := e.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	d.setScript(ns, succeedAfter(200*time.Millisecond))
	spec := jobSpec(ptr.To[int32](2), 2, func(s *batchv1.JobSpec) { s.TTLSecondsAfterFinished = ptr.To[int32](ttl) })
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns}, Spec: spec}
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "safejob", Namespace: ns}}
	if err := batchjob.ConvertSpec(spec, &sj.Spec, "spec"); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{job, sj} {
		if err := e.cl.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T: %v", obj, err)
		}
	}
	// finishedAt reads when the object finished; gone reports it deleted.
	check := func(obj client.Object, finishedAt func() *metav1.Time) {
		var finished time.Time
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := e.cl.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			switch {
			case apierrors.IsNotFound(err):
				return true, nil
			case err != nil:
				return false, err
			}
			if at := finishedAt(); at != nil {
				finished = at.Time
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("%T not deleted: %v", obj, err)
			return
		}
		if finished.IsZero() {
			t.Errorf("%T deleted before it was seen finished", obj)
		} else if lived := time.Since(finished); lived < ttl*time.Second-time.Second {
			t.Errorf("%T deleted %s after it finished, before its TTL of %ds", obj, lived, ttl)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { check(job, func() *metav1.Time { return job.Status.CompletionTime }) })
	wg.Go(func() { check(sj, func() *metav1.Time { return sj.Status.CompletionTime }) })
	wg.Wait()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		err := e.cl.List(ctx, &pods, client.InNamespace(ns))
		return err == nil && len(pods.Items) == 0, err
	})
	if err != nil {
		t.Errorf("the pods of the deleted Job and SafeJob are not gone: %v", err)
	}
}
