package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

func TestPacerDefersReadyOnlyWrites(t *testing.T) {
	tr := newPacer(Pacing{}, nil, nil)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Unix(100, 0)
	if left, _ := tr.deferReady(key, "u1", now, time.Second, false, 0); left != time.Second {
		t.Fatalf("first ready-only change held %s, want 1s", left)
	}
	if left, _ := tr.deferReady(key, "u1", now.Add(400*time.Millisecond), time.Second, false, 0); left != 600*time.Millisecond {
		t.Errorf("held %s after 400ms, want 600ms", left)
	}
	if left, _ := tr.deferReady(key, "u1", now.Add(time.Second), time.Second, false, 0); left != 0 {
		t.Errorf("held %s after the period, want 0 (write now)", left)
	}
	// A write in between restarts the period.
	tr.deferReady(key, "u1", now.Add(2*time.Second), time.Second, false, 0)
	tr.wrote(key, "u1", now.Add(2500*time.Millisecond))
	if left, _ := tr.deferReady(key, "u1", now.Add(2600*time.Millisecond), time.Second, false, 0); left != time.Second {
		t.Errorf("after a write the hold is %s, want a fresh 1s", left)
	}
}

func TestPacerSpacesWrites(t *testing.T) {
	tr := newPacer(Pacing{}, nil, nil)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Unix(100, 0)
	if left := tr.spacingLeft(key, "u1", now, 500*time.Millisecond); left != 0 {
		t.Fatalf("before any write the hold is %s, want 0", left)
	}
	tr.wrote(key, "u1", now)
	if left := tr.spacingLeft(key, "u1", now.Add(200*time.Millisecond), 500*time.Millisecond); left != 300*time.Millisecond {
		t.Errorf("200ms after a write the hold is %s, want 300ms", left)
	}
	if left := tr.spacingLeft(key, "u1", now.Add(time.Second), 500*time.Millisecond); left != 0 {
		t.Errorf("after the period the hold is %s, want 0", left)
	}
	if left := tr.spacingLeft(key, "u2", now.Add(100*time.Millisecond), 500*time.Millisecond); left != 0 {
		t.Errorf("a recreated SafeJob inherited the hold: %s", left)
	}
}

// TestZeroPacingWritesEveryDecision: with every pacing decision off (the
// zero Pacing, or no pacer at all) each decided plan is written at once, as
// decided, whatever it holds, however often the SafeJob was just written and
// however long the queue is.
func TestZeroPacingWritesEveryDecision(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	q := &workQueue{waiting: func() int { return 100 }}
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1"},
		Spec: batchv1alpha1.SafeJobSpec{Parallelism: ptr.To[int32](4)}}
	plans := map[string]*jobs.Plan{
		"ready count only": {Status: batchv1alpha1.SafeJobStatus{Ready: 2}},
		"launches":         {Append: []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched, Pod: "a-0-0"}}},
		"successes only":   {Append: []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntrySucceeded, Pod: "a-0-0"}}},
	}
	for name, p := range map[string]*pacer{"zero Pacing": newPacer(Pacing{}, clk, q), "no pacer": nil} {
		p.wrote(client.ObjectKeyFromObject(sj), sj.UID, clk.Now()) // written just now
		for what, plan := range plans {
			got, err := p.pace(sj, jobs.Observe(&jobs.Input{Spec: &sj.Spec, Status: &sj.Status}), plan)
			if err != nil || got.deferred || got.wait != 0 || got.room != 0 || got.plan != plan || got.heard(sj) != plan {
				t.Errorf("%s, %s: paced %+v, %v; want written at once as decided", name, what, got, err)
			}
		}
	}
}
