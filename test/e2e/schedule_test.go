package e2e

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/runs"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// TestScheduleUnderKills runs an `@every 5s` SafeJob for two minutes while
// the operator is SIGKILLed at random, sometimes staying down for a few
// seconds. From the audit log: every run was created once; from the ledger:
// every scheduled time either ran or is counted as missed, and exactly the
// times between two runs are counted. Then the parent is deleted: no run is
// created after it is gone, and its runs and their pods go.
func TestScheduleUnderKills(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	ctx := context.Background()
	e.startOperator()
	parent := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Name: "every5", Namespace: nsSafeJob},
		Spec: batchv1alpha1.SafeJobSpec{
			Schedule: ptr.To("@every 5s"),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": "1s"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
			},
			SuccessfulRunsHistoryLimit: ptr.To[int32](100),
		},
	}
	if err := e.cl.Create(ctx, parent); err != nil {
		t.Fatal(err)
	}
	soakFor := 2 * time.Minute
	kills := killAtRandom(e, soakFor)
	stopAt := time.Now()
	// Let the runs started before the stop finish.
	key := client.ObjectKeyFromObject(parent)
	var final batchv1alpha1.SafeJob
	waitUntil(t, time.Minute, "the runs scheduled before the stop to finish", func() bool {
		if err := e.cl.Get(ctx, key, &final); err != nil {
			return false
		}
		return final.Status.LastScheduleTime != nil && final.Status.LastScheduleTime.After(stopAt) && len(final.Status.ActiveRuns) == 0
	})
	gone := tearDown(e, &final)
	ran, missed := checkRuns(t, e, &final, gone)
	t.Logf("%d operator kills in %s: %d runs, each created once; %d times missed while no operator ran, all reported",
		kills, soakFor, ran, missed)
	if ran < 10 {
		t.Errorf("only %d runs in %s", ran, soakFor)
	}
}

// killAtRandom SIGKILLs the operator every 1-6 s for d; one time in three it
// stays down 2-10 s, long enough to miss scheduled times.
func killAtRandom(e *env, d time.Duration) int {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Duration(1000+rng.IntN(5000)) * time.Millisecond) // the fault's random period
		e.mu.Lock()
		victim := e.ops[len(e.ops)-1]
		e.mu.Unlock()
		victim.Kill()
		kills++
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(2000+rng.IntN(8000)) * time.Millisecond) // the random downtime
		}
		e.startOperator()
	}
	return kills
}

// tearDown deletes the parent, waits until it and its runs are gone, then
// until their pods are gone too. It returns when the parent was gone.
func tearDown(e *env, parent *batchv1alpha1.SafeJob) time.Time {
	gone := tearDownParent(e.t, e, parent)
	waitUntil(e.t, 2*time.Minute, "the runs' pods to be gone", func() bool {
		var pods corev1.PodList
		if e.cl.List(context.Background(), &pods, client.InNamespace(parent.Namespace)) != nil {
			return false
		}
		return len(pods.Items) == 0
	})
	return gone
}

// checkRuns holds the final ledger against the audit log and the schedule:
// every run created once and none after the parent was gone, every
// scheduled time run or counted as missed, one pod per run. A run committed
// by an operator killed before it created it, and not created by the next
// one within its create window, is recorded Lost (NotCreated) and never
// created.
func checkRuns(t *testing.T, e *env, final *batchv1alpha1.SafeJob, gone time.Time) (ran, missed int64) {
	t.Helper()
	st, err := runs.Replay(&final.Status.Ledger)
	if err != nil {
		t.Fatalf("final ledger: %v", err)
	}
	if final.Status.Ledger.Checkpoint != nil {
		t.Fatalf("ledger folded (%d entries): this test reads every entry", len(final.Status.Ledger.Entries))
	}
	created := runCreates(t, e, final.Name, gone)
	sched, err := runs.ParseSchedule(*final.Spec.Schedule, "")
	if err != nil {
		t.Fatal(err)
	}
	notCreated := notCreatedRuns(final)
	prev := final.CreationTimestamp.Time
	for _, entry := range final.Status.Ledger.Entries {
		if entry.Type != batchv1alpha1.EntryScheduled {
			continue
		}
		at := entry.ScheduledTime.Time
		var between int64
		for tt := sched.Next(prev); tt.Before(at); tt = sched.Next(tt) {
			between++
		}
		if sched.Next(prev).After(at) || between != entry.Missed {
			t.Errorf("run %s at %s: %d scheduled times since %s, entry says %d missed", entry.Run, at, between, prev, entry.Missed)
		}
		if want := map[bool]int{false: 1, true: 0}[notCreated[entry.Run]]; created[entry.Run] != want {
			t.Errorf("run %s created %d times (audit log), want %d", entry.Run, created[entry.Run], want)
		}
		if entry.Run != runs.Name(final.Name, at) {
			t.Errorf("run %s is not named for its time %s", entry.Run, at)
		}
		prev = at
		ran++
		missed += entry.Missed
	}
	if int64(len(created)+len(notCreated)) != ran || st.Runs != ran || len(st.Open) != 0 {
		t.Errorf("%d runs created and %d recorded not created, %d in the ledger, %d outcomes recorded, %d open",
			len(created), len(notCreated), ran, st.Runs, len(st.Open))
	}
	if final.Status.MissedRuns != missed {
		t.Errorf("status.missedRuns %d, ledger says %d", final.Status.MissedRuns, missed)
	}
	checkOnePodPerRun(t, e, created)
	return ran, missed
}

// checkOnePodPerRun holds the pods created in the namespace (audit log)
// against the runs created: one each, named for its run, and no other.
func checkOnePodPerRun(t *testing.T, e *env, created map[string]int) {
	t.Helper()
	creates, err := testutil.CreatesByNamespace(e.c.AuditLog, "pods")
	if err != nil {
		t.Fatal(err)
	}
	pods := creates[nsSafeJob]
	for run := range created {
		of := map[string]int{} // the run's pods, and the creates of each
		total := 0
		for pod, n := range pods {
			if strings.HasPrefix(pod, run+"-") {
				of[pod] = n
				total += n
			}
		}
		if total != 1 {
			t.Errorf("run %s: pods created %v, want one created once", run, of)
		}
	}
	if len(pods) != len(created) {
		t.Errorf("%d pods created for %d runs of one completion each: %v", len(pods), len(created), pods)
	}
}

// notCreatedRuns lists the runs recorded Lost because their create window
// passed with no run of theirs created.
func notCreatedRuns(final *batchv1alpha1.SafeJob) map[string]bool {
	out := map[string]bool{}
	for _, entry := range final.Status.Ledger.Entries {
		if entry.Type == batchv1alpha1.EntryLost && entry.Reason == runs.ReasonNotCreated {
			out[entry.Run] = true
		}
	}
	return out
}

// runCreates counts the creates of each run in the audit log, failing on
// any create received after the parent was gone.
func runCreates(t *testing.T, e *env, parent string, gone time.Time) map[string]int {
	t.Helper()
	creates, err := testutil.Creates(e.c.AuditLog, "safejobs")
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]int{}
	for _, c := range creates {
		if c.Namespace != nsSafeJob || c.Name == parent {
			continue
		}
		created[c.Name]++
		if c.Received.After(gone) {
			t.Errorf("run %s created at %s, after its parent was gone (%s)", c.Name, c.Received, gone)
		}
	}
	return created
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the condition
	}
	if took := time.Since(start); took > timeout/2 {
		// A wait that used most of its bound is the next flake: said in
		// the verbose output, and in a failing test's.
		t.Logf("waited %s of %s for %s", took.Round(time.Second), timeout, what)
	}
}
