package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/batchjob"
	"github.com/safejob/safejob/internal/controller"
	"github.com/safejob/safejob/test/testutil"
)

// managedJob is a batch/v1 Job that names SafeJob in spec.managedBy.
func managedJob(name, ns string, completions, parallelism int32) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: batchv1.JobSpec{
			ManagedBy:    ptr.To(batchv1alpha1.ControllerName),
			Completions:  ptr.To(completions),
			Parallelism:  ptr.To(parallelism),
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}},
		},
	}
}

// runManagedJob starts a controller for h's namespace and creates job in it.
func runManagedJob(t *testing.T, h *harness, job *batchv1.Job) {
	t.Helper()
	startManager(t, h.ns, managerOptions{})
	if err := k8s.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) int {
	return slices.IndexFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == t && c.Status == corev1.ConditionTrue
	})
}

// waitJob waits until the Job holds a condition of type t, True, and
// returns it as it is then.
func waitJob(t *testing.T, key client.ObjectKey, cond batchv1.JobConditionType, timeout time.Duration) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	deadline := time.Now().Add(timeout)
	waitFor(t, timeout+time.Second, "Job "+key.String()+" to be "+string(cond), func() (bool, error) {
		if err := k8s.Get(context.Background(), key, job); err != nil {
			return false, err
		}
		if jobCondition(job, cond) >= 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			ledger := &batchv1alpha1.SafeJob{}
			err := k8s.Get(context.Background(), key, ledger)
			return false, fmt.Errorf("not %s: the Job's status %+v; its ledger (%v): %+v", cond, job.Status, err, ledger.Status)
		}
		return false, nil
	})
	return job
}

// TestManagedJobRunsToComplete: a Job that names SafeJob in managedBy runs
// to Complete from a ledger it controls, exactly once, its pods found by
// its own selector; its status is what batch/v1 writes, in the order it
// writes it, and the API server's Job status validation takes every write.
func TestManagedJobRunsToComplete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	ctx := context.Background()
	job := managedJob("managed", h.ns, 3, 2)
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, client.ObjectKeyFromObject(job), batchv1.JobComplete, time.Minute)
	checkCompleteStatus(t, got, 3)
	sj := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), sj); err != nil {
		t.Fatalf("the Job's ledger: %v", err)
	}
	if ref := batchv1alpha1.ManagedJobOf(sj); ref == nil || ref.UID != got.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("the ledger's controller %+v, want the Job", sj.OwnerReferences)
	}
	checkSelectorFindsPods(t, got, 3)
	h.finalCheck(t, sj)
}

// checkCompleteStatus checks a Complete Job's status as batch/v1 writes it:
// the counts, no pod left, its times, no uncounted pods, and
// SuccessCriteriaMet before Complete.
func checkCompleteStatus(t *testing.T, got *batchv1.Job, succeeded int32) {
	t.Helper()
	st := got.Status
	if st.Succeeded != succeeded || st.Failed != 0 || st.Active != 0 || ptr.Deref(st.Ready, -1) != 0 || ptr.Deref(st.Terminating, -1) != 0 ||
		st.StartTime == nil || st.CompletionTime == nil || st.UncountedTerminatedPods == nil ||
		len(st.UncountedTerminatedPods.Succeeded)+len(st.UncountedTerminatedPods.Failed) != 0 {
		t.Errorf("the Job's status: %+v", st)
	}
	if met, done := jobCondition(got, batchv1.JobSuccessCriteriaMet), jobCondition(got, batchv1.JobComplete); met < 0 || met > done {
		t.Errorf("conditions %+v: want SuccessCriteriaMet before Complete", st.Conditions)
	}
}

// checkSelectorFindsPods: the Job's selector, which the API server
// generated, finds its n pods, labelled with its name as batch/v1 labels them.
func checkSelectorFindsPods(t *testing.T, job *batchv1.Job, n int) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(job.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		t.Fatal(err)
	}
	named := labels.SelectorFromSet(labels.Set{batchv1alpha1.JobNameLabel: job.Name})
	if len(pods.Items) != n || !named.Matches(labels.Set(pods.Items[0].Labels)) {
		t.Errorf("%d pods match the Job's selector %s, want %d labelled %s=%s", len(pods.Items), sel, n, batchv1alpha1.JobNameLabel, job.Name)
	}
}

// TestManagedJobFails: a Job whose pod fails past its backoffLimit is
// Failed, after FailureTarget, as batch/v1 sets them.
func TestManagedJobFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(*corev1.Pod) testutil.Fate { return testutil.Fate{Fail: true, ExitCode: 1} }, false)
	startManager(t, h.ns, managerOptions{})
	job := managedJob("failing", h.ns, 1, 1)
	if err := k8s.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, client.ObjectKeyFromObject(job), batchv1.JobFailed, time.Minute)
	if target, failed := jobCondition(got, batchv1.JobFailureTarget), jobCondition(got, batchv1.JobFailed); target < 0 || target > failed ||
		got.Status.Conditions[failed].Reason != batchv1.JobReasonBackoffLimitExceeded || got.Status.Failed != 1 || got.Status.CompletionTime != nil {
		t.Errorf("the Job's status: %+v", got.Status)
	}
}

// TestManagedJobReadmittedToAnotherFlavor: a managed Job that ran is
// suspended (as Kueue preempts it), given another flavor's node selector
// while suspended (as Kueue re-admits it: the Job's own validation allows
// the change since v1.36) and resumed in the same write. Its later pods
// carry the new node selector, as batch/v1's would; those before kept the
// old one. The change of anything else in a running Job's template stays
// refused by the API server.
func TestManagedJobReadmittedToAnotherFlavor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	ctx := context.Background()
	job := managedJob("readmitted", h.ns, 2, 1)
	job.Spec.Template.Spec.NodeSelector = map[string]string{"flavor": "a"}
	runManagedJob(t, h, job)
	key := client.ObjectKeyFromObject(job)
	first := waitRunningPods(t, h.ns, 1)[0]
	suspended := job.DeepCopy()
	if err := k8s.Get(ctx, key, suspended); err != nil {
		t.Fatal(err)
	}
	patched := suspended.DeepCopy()
	patched.Spec.Suspend = ptr.To(true)
	if err := k8s.Patch(ctx, patched, client.MergeFrom(suspended)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the Job suspended with no active pod", func() (bool, error) {
		err := k8s.Get(ctx, key, suspended)
		return err == nil && jobCondition(suspended, batchv1.JobSuspended) >= 0 && suspended.Status.Active == 0, err
	})
	// Kueue's re-admission: the flavor's node selector and the resume in one write.
	h.kubelet.SetFate(succeed)
	readmitted := suspended.DeepCopy()
	readmitted.Spec.Template.Spec.NodeSelector = map[string]string{"flavor": "b"}
	readmitted.Spec.Suspend = ptr.To(false)
	if err := k8s.Patch(ctx, readmitted, client.MergeFrom(suspended)); err != nil {
		t.Fatalf("re-admitting the suspended Job to another flavor: %v", err)
	}
	got := waitJob(t, key, batchv1.JobComplete, time.Minute)
	if got.Status.Succeeded != 2 {
		t.Errorf("the Job's status after the re-admission: %+v", got.Status)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(h.ns), client.MatchingLabels{batchv1alpha1.JobNameLabel: job.Name}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		want := "b"
		if p.UID == first.UID {
			want = "a"
		}
		if p.Spec.NodeSelector["flavor"] != want {
			t.Errorf("pod %s runs on flavor %q, want %q", p.Name, p.Spec.NodeSelector["flavor"], want)
		}
	}
	if len(pods.Items) < 2 {
		t.Errorf("%d pods, want the first and those after the re-admission", len(pods.Items))
	}
	ledger := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(ctx, key, ledger); err != nil {
		t.Fatal(err)
	}
	if ledger.Spec.Template.Spec.NodeSelector["flavor"] != "b" {
		t.Errorf("the ledger's node selector %v, want the Job's", ledger.Spec.Template.Spec.NodeSelector)
	}
}

// TestLedgerTemplateFixedWhileRunning: the ledger of a managed Job takes a
// template change only while suspended with no active pod; while it runs,
// the API server refuses it, as it refuses a SafeJob's.
func TestLedgerTemplateFixedWhileRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	ctx := context.Background()
	job := managedJob("running", h.ns, 1, 1)
	runManagedJob(t, h, job)
	waitRunningPods(t, h.ns, 1)
	waitFor(t, 30*time.Second, "the API server to refuse a template change of the running ledger", func() (bool, error) {
		ledger := &batchv1alpha1.SafeJob{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), ledger); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		changed := ledger.DeepCopy()
		changed.Spec.Template.Spec.NodeSelector = map[string]string{"flavor": "b"}
		// Accepted only until the API server has loaded the policy: a
		// policy that lets the change through times the wait out.
		err := k8s.Update(ctx, changed, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "spec.template: template is immutable"), nil
	})
}

// TestManagedJobSuspended: a Job created suspended (as Kueue creates the
// Jobs it queues) says Suspended and has no ledger or pod until it is
// resumed; then it runs from its template as it is at that moment.
func TestManagedJobSuspended(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	ctx := context.Background()
	job := managedJob("held", h.ns, 2, 2)
	job.Spec.Suspend = ptr.To(true)
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, client.ObjectKeyFromObject(job), batchv1.JobSuspended, 30*time.Second)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(job), &batchv1alpha1.SafeJob{}); err == nil {
		t.Error("a ledger for a Job that never ran")
	}
	// What Kueue does on admission: a node selector into the template, then resume.
	patched := got.DeepCopy()
	patched.Spec.Template.Spec.NodeSelector = map[string]string{"flavor": "a"}
	patched.Spec.Suspend = ptr.To(false)
	if err := k8s.Patch(ctx, patched, client.MergeFrom(got)); err != nil {
		t.Fatal(err)
	}
	got = waitJob(t, client.ObjectKeyFromObject(job), batchv1.JobComplete, time.Minute)
	if c := got.Status.Conditions[jobCondition(got, batchv1.JobComplete)]; got.Status.Succeeded != 2 || got.Status.StartTime == nil || c.Reason == "" {
		t.Errorf("the resumed Job's status: %+v", got.Status)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(h.ns), client.MatchingLabels{batchv1alpha1.JobNameLabel: "held"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeSelector["flavor"] != "a" {
			t.Errorf("pod %s runs without the node selector set before the Job resumed", p.Name)
		}
	}
	// batch/v1's status and events of a Job created suspended and resumed.
	if c := batchjob.JobCondition(got.Status.Conditions, batchv1.JobSuspended); c == nil || c.Status != corev1.ConditionFalse ||
		c.Reason != "JobResumed" || got.Status.Conditions[0].Type != batchv1.JobSuspended {
		t.Errorf("the resumed Job's conditions: %+v", got.Status.Conditions)
	}
	waitJobEvents(t, got, map[string]int{"Normal/RunAs": 1, "Normal/Suspended": 1, "Normal/Resumed": 1,
		"Normal/SuccessfulCreate": 2, "Normal/Completed": 1})
}

// waitJobEvents waits until the events recorded on the Job (not on its
// ledger, of the same name) are, by type and reason, as many as want says,
// and checks that batch/v1's messages are theirs.
func waitJobEvents(t *testing.T, job *batchv1.Job, want map[string]int) {
	t.Helper()
	var got map[string]int
	defer func() {
		if t.Failed() {
			t.Logf("events of Job %s: %v, want %v", job.Name, got, want)
		}
	}()
	waitFor(t, 30*time.Second, "the events of Job "+job.Name, func() (bool, error) {
		events := &corev1.EventList{}
		if err := k8s.List(context.Background(), events, client.InNamespace(job.Namespace)); err != nil {
			return false, err
		}
		got = map[string]int{}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind != "Job" || e.InvolvedObject.UID != job.UID {
				continue
			}
			got[e.Type+"/"+e.Reason] += max(int(e.Count), 1)
			if msg, ok := jobEventMessages[e.Reason]; ok && !strings.HasPrefix(e.Message, msg) {
				t.Errorf("event %s on Job %s says %q, batch/v1's %q", e.Reason, job.Name, e.Message, msg)
			}
		}
		return maps.Equal(got, want), nil
	})
}

// jobEventMessages are the messages (or their starts) of batch/v1's events.
var jobEventMessages = map[string]string{"Suspended": "Job suspended", "Resumed": "Job resumed",
	"Completed": "Job completed", "SuccessfulCreate": "Created pod: ", "SuccessfulDelete": "Deleted pod: "}

// TestManagedJobRefused: the API server refuses a managed Job with a
// selector of its own (the policy safejob-managed-job), naming the field;
// a Job whose name a SafeJob that is not its ledger has says so on the Job
// (condition and event), and no pod runs for it.
func TestManagedJobRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	ctx := context.Background()
	manual := managedJob("manual", h.ns, 1, 1)
	manual.Spec.ManualSelector = ptr.To(true)
	manual.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "manual"}}
	manual.Spec.Template.Labels = map[string]string{"app": "manual"}
	// The API server loads policies asynchronously: wait until it bites.
	waitFor(t, 30*time.Second, "the API server to refuse a managed Job with manualSelector", func() (bool, error) {
		err := k8s.Create(ctx, manual.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "spec.manualSelector") && strings.Contains(err.Error(), "managed by SafeJob"), nil
	})
	// A built-in Job may have one.
	builtIn := manual.DeepCopy()
	builtIn.Spec.ManagedBy = nil
	if err := k8s.Create(ctx, builtIn, client.DryRunAll); err != nil {
		t.Errorf("a built-in Job with manualSelector: %v", err)
	}
	stranger := testutil.MakeSafeJob("taken", h.ns).Suspend(true).Obj()
	if err := k8s.Create(ctx, stranger); err != nil {
		t.Fatal(err)
	}
	taken := managedJob("taken", h.ns, 1, 1)
	if err := k8s.Create(ctx, taken); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, client.ObjectKeyFromObject(taken), batchv1alpha1.JobConditionRefused, 30*time.Second)
	if c := got.Status.Conditions[jobCondition(got, batchv1alpha1.JobConditionRefused)]; c.Reason != "NameTaken" {
		t.Errorf("Job taken: %+v, want reason NameTaken", c)
	}
	waitForEvent(t, h.ns, taken.Name, "NameTaken")
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods for a Job SafeJob refuses", len(pods.Items))
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(stranger), stranger); err != nil || batchv1alpha1.ManagedJobOf(stranger) != nil ||
		stranger.Labels[batchv1alpha1.ManagedJobLabel] != "" {
		t.Errorf("the stranger's SafeJob was taken: %v %+v", err, stranger.ObjectMeta)
	}
	// Once the stranger's SafeJob is gone, the Job runs, as it never ran.
	if err := k8s.Delete(ctx, stranger); err != nil {
		t.Fatal(err)
	}
	waitJob(t, client.ObjectKeyFromObject(taken), batchv1.JobComplete, time.Minute)
}

// TestManagedJobLedgerDeleted: a running managed Job whose ledger is
// deleted is not given a new one, which would run its work again: it says
// so (SafeJobRefused, LedgerDeleted), and no pod is created after.
func TestManagedJobLedgerDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, hold, false)
	ctx := context.Background()
	job := managedJob("deleted", h.ns, 2, 2)
	runManagedJob(t, h, job)
	waitFor(t, 30*time.Second, "the Job to start", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(job), job)
		return err == nil && job.Status.Active == 2 && job.Status.StartTime != nil, err
	})
	ledger := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: h.ns}}
	if err := k8s.Delete(ctx, ledger); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, client.ObjectKeyFromObject(job), batchv1alpha1.JobConditionRefused, 30*time.Second)
	if c := got.Status.Conditions[jobCondition(got, batchv1alpha1.JobConditionRefused)]; c.Reason != "LedgerDeleted" {
		t.Errorf("the Job's condition %+v, want reason LedgerDeleted", c)
	}
	creates, err := testutil.PodCreates(auditLog, h.ns)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(creates); n != 2 {
		t.Errorf("%d pods created, want the first ledger's 2 only", n)
	}
}

// TestManagedJobBeyondSafeJobBounds: a Job the API server takes but whose
// ledger it refuses (a parallelism above SafeJob's bound) is reported on
// the Job, naming the field, and no pod runs.
func TestManagedJobBeyondSafeJobBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	ctx := context.Background()
	job := managedJob("wide", h.ns, 3000, 3000)
	if err := k8s.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, client.ObjectKeyFromObject(job), batchv1alpha1.JobConditionRefused, 30*time.Second)
	if c := got.Status.Conditions[jobCondition(got, batchv1alpha1.JobConditionRefused)]; c.Reason != "UnsupportedField" ||
		!strings.Contains(c.Message, "spec.parallelism") {
		t.Errorf("the Job's condition %+v, want UnsupportedField naming spec.parallelism", c)
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(h.ns)); err != nil || len(pods.Items) != 0 {
		t.Errorf("%d pods (%v) for a Job SafeJob refuses", len(pods.Items), err)
	}
}

// TestLedgerTemplateRuleNeedsItsJob: a SafeJob that only carries the
// managed-job label, with no Job as its controller (someone else's object
// posing as a ledger), keeps its template immutable while suspended, as
// does a ledger with a queue name, whose Workload holds the template's
// requests. A ledger with neither flaw takes the change.
func TestLedgerTemplateRuleNeedsItsJob(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	ctx := context.Background()
	byJob := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "0a1b2c3d",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	// In order: the refusals show the policy in force before the last.
	for _, tc := range []struct {
		name   string
		labels map[string]string
		owners []metav1.OwnerReference
		takes  bool
	}{
		{name: "posing", labels: map[string]string{batchv1alpha1.ManagedJobLabel: "0a1b2c3d"}},
		{name: "queued", labels: map[string]string{batchv1alpha1.ManagedJobLabel: "0a1b2c3d", controller.QueueNameLabel: "lq"}, owners: byJob},
		{name: "ledger", labels: map[string]string{batchv1alpha1.ManagedJobLabel: "0a1b2c3d"}, owners: byJob, takes: true},
	} {
		name := tc.name
		sj := testutil.MakeSafeJob(name, ns).Suspend(true).Obj()
		sj.Labels, sj.OwnerReferences = tc.labels, tc.owners
		if err := k8s.Create(ctx, sj); err != nil {
			t.Fatal(err)
		}
		changed := sj.DeepCopy()
		changed.Spec.Template.Spec.NodeSelector = map[string]string{"flavor": "b"}
		if tc.takes {
			if err := k8s.Update(ctx, changed, client.DryRunAll); err != nil {
				t.Errorf("%s: a suspended ledger's template change: %v", name, err)
			}
			continue
		}
		// Accepted only until the API server has loaded the policy.
		waitFor(t, 30*time.Second, "the API server to refuse a template change of "+name, func() (bool, error) {
			err := k8s.Update(ctx, changed.DeepCopy(), client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "spec.template: template is immutable"), nil
		})
	}
}
