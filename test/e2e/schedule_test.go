package e2e

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
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
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	for end := time.Now().Add(soakFor); time.Now().Before(end); {
		time.Sleep(time.Duration(1000+rng.IntN(5000)) * time.Millisecond) // the fault's random period
		e.mu.Lock()
		victim := e.ops[len(e.ops)-1]
		e.mu.Unlock()
		victim.Kill()
		kills++
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(2000+rng.IntN(8000)) * time.Millisecond) // down long enough to miss ticks
		}
		e.startOperator()
	}
	stopAt := time.Now()
	// Let the last run started before the stop finish.
	key := client.ObjectKeyFromObject(parent)
	var final batchv1alpha1.SafeJob
	waitUntil(t, time.Minute, "the runs scheduled before the stop to finish", func() bool {
		if err := e.cl.Get(ctx, key, &final); err != nil {
			return false
		}
		return final.Status.LastScheduleTime != nil && final.Status.LastScheduleTime.After(stopAt) && len(final.Status.ActiveRuns) == 0
	})
	// Teardown: the parent goes first (no new run), then its runs.
	if err := e.cl.Delete(ctx, &final); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the parent to be gone", func() bool {
		return apierrors.IsNotFound(e.cl.Get(ctx, key, &batchv1alpha1.SafeJob{}))
	})
	gone := time.Now()
	waitUntil(t, 2*time.Minute, "the runs and their pods to be gone", func() bool {
		var runs batchv1alpha1.SafeJobList
		var pods corev1.PodList
		if e.cl.List(ctx, &runs, client.InNamespace(nsSafeJob)) != nil || e.cl.List(ctx, &pods, client.InNamespace(nsSafeJob)) != nil {
			return false
		}
		return len(runs.Items) == 0 && len(pods.Items) == 0
	})

	st, err := ledger.ReplayRuns(&final.Status.Ledger)
	if err != nil {
		t.Fatalf("final ledger: %v", err)
	}
	if final.Status.Ledger.Checkpoint != nil {
		t.Fatalf("ledger folded (%d entries): this test reads every entry", len(final.Status.Ledger.Entries))
	}
	creates, err := testutil.Creates(e.c.AuditLog, "safejobs")
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]int{}
	for _, c := range creates {
		if c.Namespace != nsSafeJob || c.Name == parent.Name {
			continue
		}
		created[c.Name]++
		if c.Received.After(gone) {
			t.Errorf("run %s created at %s, after its parent was gone (%s)", c.Name, c.Received, gone)
		}
	}
	sched, err := ledger.ParseSchedule("@every 5s", "")
	if err != nil {
		t.Fatal(err)
	}
	// Walk the schedule from the parent's creation: every time is a run or
	// counted as missed on the next run's entry.
	prev := final.CreationTimestamp.Time
	var ran, missed int64
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
		if created[entry.Run] != 1 {
			t.Errorf("run %s created %d times (audit log)", entry.Run, created[entry.Run])
		}
		if entry.Run != ledger.RunName(parent.Name, at) {
			t.Errorf("run %s is not named for its time %s", entry.Run, at)
		}
		prev = at
		ran++
		missed += entry.Missed
	}
	if int64(len(created)) != ran {
		t.Errorf("%d runs created, %d in the ledger", len(created), ran)
	}
	if st.Runs != ran || len(st.Open) != 0 {
		t.Errorf("%d run outcomes recorded and %d open, want %d and 0", st.Runs, len(st.Open), ran)
	}
	if final.Status.MissedRuns != missed {
		t.Errorf("status.missedRuns %d, ledger says %d", final.Status.MissedRuns, missed)
	}
	pods, err := testutil.CreatesByNamespace(e.c.AuditLog, "pods")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pods[nsSafeJob]); int64(n) != ran {
		t.Errorf("%d pods created for %d runs of one completion each", n, ran)
	}
	t.Logf("%d operator kills in %s: %d runs, each created once; %d times missed while no operator ran, all reported",
		kills, soakFor, ran, missed)
	if ran < 10 {
		t.Errorf("only %d runs in %s", ran, soakFor)
	}
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the condition
	}
}
