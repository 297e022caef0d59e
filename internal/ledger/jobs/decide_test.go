package jobs

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func spec(par, completions int32) batchv1alpha1.SafeJobSpec {
	return batchv1alpha1.SafeJobSpec{Parallelism: ptr.To(par), Completions: ptr.To(completions), BackoffLimit: ptr.To[int32](6)}
}

// noBackoff: the tests that do not check the backoff delay (TestBackoff
// does) run on a clock that does not move.
var noBackoff = NoBackoff

// queueSpec is a work queue: no completions.
func queueSpec(par int32) batchv1alpha1.SafeJobSpec {
	s := spec(par, 0)
	s.Completions = nil
	return s
}

// indexedSpec is spec(par, completions) in completion mode Indexed.
func indexedSpec(par, completions int32) batchv1alpha1.SafeJobSpec {
	s := spec(par, completions)
	s.CompletionMode = batchv1alpha1.IndexedCompletion
	return s
}

func launched(seq int64, i, a int32) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: batchv1alpha1.EntryLaunched, Pod: PodName("sj", i, a), Index: i, Attempt: a,
		Time: metav1.NewTime(t0)}
}

func outcome(seq int64, typ batchv1alpha1.EntryType, i, a int32, reason string) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: typ, Pod: PodName("sj", i, a), Index: i, Attempt: a, Time: metav1.NewTime(t0),
		Reason: reason}
}

func ledgerOf(entries ...batchv1alpha1.LedgerEntry) batchv1alpha1.Ledger {
	l := batchv1alpha1.Ledger{Entries: entries}
	if len(entries) > 0 {
		l.Seq = entries[len(entries)-1].Seq
	}
	return l
}

func pod(i, a int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName("sj", i, a), Finalizers: []string{batchv1alpha1.LedgerFinalizer},
			Labels: map[string]string{batchv1alpha1.CompletionIndexLabel: itoa(i), batchv1alpha1.AttemptLabel: itoa(a)}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// withRestarts gives the pod's container that many restarts.
func withRestarts(p *corev1.Pod, n int32) *corev1.Pod {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: n}}
	return p
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

func withPhase(p *corev1.Pod, phase corev1.PodPhase, code int32, conds ...corev1.PodConditionType) *corev1.Pod {
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
	for _, c := range conds {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue})
	}
	return p
}

func TestDecide(t *testing.T) {
	cases := map[string]struct {
		spec        batchv1alpha1.SafeJobSpec
		ledger      batchv1alpha1.Ledger
		conditions  []metav1.Condition
		pods        []*corev1.Pod
		lastSeen    []*corev1.Pod
		gone        []string
		uncreated   []string
		wantAppend  []batchv1alpha1.LedgerEntry
		wantCreate  []string
		wantRelease []string
		wantDelete  []string
		wantConds   []string
		wantActive  int32
	}{
		"elastic Indexed scaled down: indexes above completions stop and no longer count": {
			spec: indexedSpec(2, 2),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0), launched(4, 3, 0),
				outcome(5, batchv1alpha1.EntrySucceeded, 3, 0, "")),
			pods:        []*corev1.Pod{pod(0, 0), pod(1, 0), pod(2, 0), withPhase(pod(3, 0), corev1.PodSucceeded, 0)},
			wantAppend:  []batchv1alpha1.LedgerEntry{outcome(6, batchv1alpha1.EntryStopping, 2, 0, EvictReasonScaledDown)},
			wantRelease: []string{"sj-3-0"},
			wantActive:  3,
		},
		"elastic Indexed scaled down: only indexes out of range stop, even when one in range was launched last": {
			spec: indexedSpec(2, 2),
			// Index 0 was launched again last: it is the newest, yet in range.
			ledger: ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryLost, 0, 0, ""), launched(3, 1, 0), launched(4, 2, 0),
				launched(5, 3, 0), launched(6, 0, 1)),
			pods: []*corev1.Pod{pod(1, 0), pod(2, 0), pod(3, 0), pod(0, 1)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(7, batchv1alpha1.EntryStopping, 2, 0, EvictReasonScaledDown),
				outcome(8, batchv1alpha1.EntryStopping, 3, 0, EvictReasonScaledDown)},
			wantActive: 4,
		},
		"elastic Indexed scaled down: completes on the indexes in range": {
			spec:        indexedSpec(1, 1),
			ledger:      ledgerOf(launched(1, 0, 0), launched(2, 3, 0), outcome(3, batchv1alpha1.EntrySucceeded, 3, 0, "")),
			pods:        []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0), withPhase(pod(3, 0), corev1.PodSucceeded, 0)},
			wantAppend:  []batchv1alpha1.LedgerEntry{outcome(4, batchv1alpha1.EntrySucceeded, 0, 0, "")},
			wantConds:   []string{batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ConditionComplete},
			wantRelease: []string{"sj-3-0"},
		},
		"first reconcile launches up to parallelism": {
			spec:       spec(2, 5),
			wantAppend: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0)},
		},
		"launch is created only once observed and uncreated here": {
			spec:       spec(2, 5),
			ledger:     ledgerOf(launched(1, 0, 0), launched(2, 1, 0)),
			uncreated:  []string{"sj-0-0"},
			wantCreate: []string{"sj-0-0"},
		},
		"launch neither seen nor uncreated here waits for a live read": {
			spec:   spec(1, 1),
			ledger: ledgerOf(launched(1, 0, 0)),
		},
		"succeeded pod is recorded, finalizer kept until observed": {
			spec:       spec(1, 2),
			ledger:     ledgerOf(launched(1, 0, 0)),
			pods:       []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, ""), launched(3, 1, 0)},
		},
		"observed outcome releases the finalizer": {
			spec:        spec(1, 2),
			ledger:      ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, ""), launched(3, 1, 0)),
			pods:        []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0)},
			wantRelease: []string{"sj-0-0"},
		},
		"terminal state seen before deletion counts (pod GC)": {
			spec:       spec(1, 1),
			ledger:     ledgerOf(launched(1, 0, 0)),
			lastSeen:   []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, "")},
			wantConds:  []string{batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ConditionComplete},
		},
		"pod confirmed gone is Lost and relaunched as a new attempt": {
			spec:       spec(1, 1),
			ledger:     ledgerOf(launched(1, 0, 0)),
			gone:       []string{"sj-0-0"},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(2, batchv1alpha1.EntryLost, 0, 0, ""), launched(3, 0, 1)},
		},
		"failure past backoffLimit sets FailureTarget and Failed in the outcome's write": {
			spec:   batchv1alpha1.SafeJobSpec{Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](0)},
			ledger: ledgerOf(launched(1, 0, 0)),
			pods:   []*corev1.Pod{withPhase(pod(0, 0), corev1.PodFailed, 1)},
			wantAppend: []batchv1alpha1.LedgerEntry{
				outcome(2, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonCounted)},
			wantConds: []string{batchv1alpha1.ConditionFailureTarget, batchv1alpha1.ConditionFailed},
		},
		"podFailurePolicy Ignore does not count": {
			spec: batchv1alpha1.SafeJobSpec{Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](0),
				PodFailurePolicy: &batchv1alpha1.PodFailurePolicy{Rules: []batchv1alpha1.PodFailurePolicyRule{{
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1alpha1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}},
				}}}},
			ledger: ledgerOf(launched(1, 0, 0)),
			pods:   []*corev1.Pod{withPhase(pod(0, 0), corev1.PodFailed, 137, corev1.DisruptionTarget)},
			wantAppend: []batchv1alpha1.LedgerEntry{
				outcome(2, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonIgnored), launched(3, 0, 1)},
		},
		"suspend commits Stopping for running pods and evicts uncreated launches": {
			spec:      func() batchv1alpha1.SafeJobSpec { s := spec(2, 4); s.Suspend = ptr.To(true); return s }(),
			ledger:    ledgerOf(launched(1, 0, 0), launched(2, 1, 0)),
			pods:      []*corev1.Pod{pod(0, 0)},
			uncreated: []string{"sj-1-0"},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(3, batchv1alpha1.EntryStopping, 0, 0, EvictReasonSuspended),
				outcome(4, batchv1alpha1.EntryEvicted, 1, 0, EvictReasonSuspended)},
			wantConds:  []string{batchv1alpha1.ConditionSuspended},
			wantActive: 1,
		},
		"suspend deletes a pod once its Stopping entry is observed": {
			spec:       func() batchv1alpha1.SafeJobSpec { s := spec(2, 4); s.Suspend = ptr.To(true); return s }(),
			ledger:     ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryStopping, 0, 0, EvictReasonSuspended)),
			pods:       []*corev1.Pod{pod(0, 0)},
			wantDelete: []string{"sj-0-0"},
			wantConds:  []string{batchv1alpha1.ConditionSuspended},
			wantActive: 1,
		},
		"scale-down stops the newest launch beyond parallelism": {
			spec:       spec(1, 4),
			ledger:     ledgerOf(launched(1, 0, 0), launched(2, 1, 0)),
			pods:       []*corev1.Pod{pod(0, 0), pod(1, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(3, batchv1alpha1.EntryStopping, 1, 0, EvictReasonScaledDown)},
			wantActive: 2,
		},
		"scale-down deletes the stopped pod once observed, and stops no other": {
			spec:       spec(1, 4),
			ledger:     ledgerOf(launched(1, 0, 0), launched(2, 1, 0), outcome(3, batchv1alpha1.EntryStopping, 1, 0, EvictReasonScaledDown)),
			pods:       []*corev1.Pod{pod(0, 0), pod(1, 0)},
			wantDelete: []string{"sj-1-0"},
			wantActive: 2,
		},
		"scale-down victim that ends Failed is Evicted, not a failure": {
			spec:   spec(1, 4),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), outcome(3, batchv1alpha1.EntryStopping, 1, 0, EvictReasonScaledDown)),
			pods: []*corev1.Pod{pod(0, 0), func() *corev1.Pod {
				p := withPhase(pod(1, 0), corev1.PodFailed, 143)
				p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
				return p
			}()},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(4, batchv1alpha1.EntryEvicted, 1, 0, EvictReasonScaledDown)},
			wantActive: 1,
		},
		"scaled back up before the stopped pod ended: its exit code is still not a failure": {
			spec:   spec(2, 4),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), outcome(3, batchv1alpha1.EntryStopping, 1, 0, EvictReasonScaledDown)),
			pods: []*corev1.Pod{pod(0, 0), func() *corev1.Pod {
				p := withPhase(pod(1, 0), corev1.PodFailed, 1)
				p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
				return p
			}()},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(4, batchv1alpha1.EntryEvicted, 1, 0, EvictReasonScaledDown), launched(5, 1, 1)},
			wantActive: 1,
		},
		"resumed before the stopped pod ended: a success is not counted either": {
			spec:       spec(1, 4),
			ledger:     ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryStopping, 0, 0, EvictReasonSuspended)),
			pods:       []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(3, batchv1alpha1.EntryEvicted, 0, 0, EvictReasonSuspended), launched(4, 0, 1)},
		},
		"a pod that is stopped while the SafeJob fails counts as failed": {
			spec: spec(2, 4),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), outcome(3, batchv1alpha1.EntryStopping, 0, 0, EvictReasonFailing),
				outcome(4, batchv1alpha1.EntryStopping, 1, 0, EvictReasonFailing)),
			conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionFailureTarget, Status: metav1.ConditionTrue}},
			pods:       []*corev1.Pod{withPhase(pod(0, 0), corev1.PodFailed, 143), withPhase(pod(1, 0), corev1.PodSucceeded, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(5, batchv1alpha1.EntrySucceeded, 1, 0, ""),
				outcome(6, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonCounted)},
			wantConds: []string{batchv1alpha1.ConditionFailureTarget, batchv1alpha1.ConditionFailed},
		},
		"pod of a closed launch that still runs is stopped": {
			spec:        spec(1, 2),
			ledger:      ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntryLost, 0, 0, ""), launched(3, 0, 1)),
			pods:        []*corev1.Pod{pod(0, 0)},
			wantRelease: []string{"sj-0-0"},
			wantDelete:  []string{"sj-0-0"},
		},
		"pod from a newer ledger than the cache is left alone": {
			spec:       spec(1, 2),
			ledger:     ledgerOf(launched(1, 0, 0)),
			pods:       []*corev1.Pod{pod(0, 0), pod(1, 0)},
			wantActive: 1,
		},
		"finished SafeJob does nothing but release": {
			spec:        spec(1, 1),
			ledger:      ledgerOf(launched(1, 0, 0), outcome(2, batchv1alpha1.EntrySucceeded, 0, 0, "")),
			conditions:  []metav1.Condition{{Type: batchv1alpha1.ConditionComplete, Status: metav1.ConditionTrue}},
			pods:        []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0)},
			wantRelease: []string{"sj-0-0"},
			wantConds:   []string{batchv1alpha1.ConditionComplete},
		},
		"OnFailure: container restarts reach backoffLimit": {
			spec: func() batchv1alpha1.SafeJobSpec {
				s := spec(1, 1)
				s.BackoffLimit, s.Template.Spec.RestartPolicy = ptr.To[int32](2), corev1.RestartPolicyOnFailure
				return s
			}(),
			ledger:     ledgerOf(launched(1, 0, 0)),
			pods:       []*corev1.Pod{withRestarts(pod(0, 0), 2)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(2, batchv1alpha1.EntryStopping, 0, 0, EvictReasonFailing)},
			wantConds:  []string{batchv1alpha1.ConditionFailureTarget},
			wantActive: 1,
		},
		"OnFailure: restarts below backoffLimit go on": {
			spec: func() batchv1alpha1.SafeJobSpec {
				s := spec(1, 1)
				s.BackoffLimit, s.Template.Spec.RestartPolicy = ptr.To[int32](2), corev1.RestartPolicyOnFailure
				return s
			}(),
			ledger:     ledgerOf(launched(1, 0, 0)),
			pods:       []*corev1.Pod{withRestarts(pod(0, 0), 1)},
			wantActive: 1,
		},
		"Never: restarts are not counted": {
			spec:       func() batchv1alpha1.SafeJobSpec { s := spec(1, 1); s.BackoffLimit = ptr.To[int32](0); return s }(),
			ledger:     ledgerOf(launched(1, 0, 0)),
			pods:       []*corev1.Pod{withRestarts(pod(0, 0), 5)},
			wantActive: 1,
		},
		"successPolicy met: the other pods stop": {
			spec: func() batchv1alpha1.SafeJobSpec {
				s := spec(2, 4)
				s.CompletionMode = batchv1alpha1.IndexedCompletion
				s.SuccessPolicy = &batchv1alpha1.SuccessPolicy{Rules: []batchv1alpha1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
				return s
			}(),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0)),
			pods:   []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0), pod(1, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(3, batchv1alpha1.EntrySucceeded, 0, 0, ""),
				outcome(4, batchv1alpha1.EntryStopping, 1, 0, EvictReasonStopped)},
			wantConds:  []string{batchv1alpha1.ConditionSuccessCriteriaMet},
			wantActive: 1,
		},
		"work queue launches parallelism pods": {
			spec:       queueSpec(3),
			wantAppend: []batchv1alpha1.LedgerEntry{launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0)},
		},
		"work queue: a failure before any success runs again": {
			spec:   queueSpec(2),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0)),
			pods:   []*corev1.Pod{withPhase(pod(0, 0), corev1.PodFailed, 1), pod(1, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(3, batchv1alpha1.EntryFailed, 0, 0, batchv1alpha1.FailReasonCounted),
				launched(4, 0, 1)},
			wantActive: 1,
		},
		"work queue: after a success nothing starts and the others run on": {
			spec:   queueSpec(3),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0)),
			pods: []*corev1.Pod{withPhase(pod(0, 0), corev1.PodSucceeded, 0), pod(1, 0),
				withPhase(pod(2, 0), corev1.PodFailed, 1)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(4, batchv1alpha1.EntrySucceeded, 0, 0, ""),
				outcome(5, batchv1alpha1.EntryFailed, 2, 0, batchv1alpha1.FailReasonCounted)},
			wantActive: 1,
		},
		"work queue: after a success a lower parallelism stops nothing": {
			spec:       queueSpec(1),
			ledger:     ledgerOf(launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0), outcome(4, batchv1alpha1.EntrySucceeded, 0, 0, "")),
			pods:       []*corev1.Pod{pod(1, 0), pod(2, 0)},
			wantActive: 2,
		},
		"work queue completes once the others have ended": {
			spec:       queueSpec(2),
			ledger:     ledgerOf(launched(1, 0, 0), launched(2, 1, 0), outcome(3, batchv1alpha1.EntrySucceeded, 0, 0, "")),
			pods:       []*corev1.Pod{withPhase(pod(1, 0), corev1.PodSucceeded, 0)},
			wantAppend: []batchv1alpha1.LedgerEntry{outcome(4, batchv1alpha1.EntrySucceeded, 1, 0, "")},
			wantConds:  []string{batchv1alpha1.ConditionSuccessCriteriaMet, batchv1alpha1.ConditionComplete},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := &Input{Name: "sj", Spec: &tc.spec, Pods: tc.pods, Now: t0.Add(time.Second), Backoff: noBackoff,
				Status:   &batchv1alpha1.SafeJobStatus{Ledger: tc.ledger, Conditions: tc.conditions},
				LastSeen: map[string]*corev1.Pod{}, Gone: map[string]bool{}, Uncreated: map[string]bool{}}
			for _, p := range tc.lastSeen {
				in.LastSeen[p.Name] = p
			}
			for _, n := range tc.gone {
				in.Gone[n] = true
			}
			for _, n := range tc.uncreated {
				in.Uncreated[n] = true
			}
			plan, err := Decide(in)
			if err != nil {
				t.Fatal(err)
			}
			ignoreTime := cmpopts.IgnoreFields(batchv1alpha1.LedgerEntry{}, "Time")
			if diff := cmp.Diff(tc.wantAppend, plan.Append, ignoreTime, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("appended (-want,+got):\n%s", diff)
			}
			var creates []string
			for _, c := range plan.Create {
				creates = append(creates, c.Name)
			}
			if diff := cmp.Diff(tc.wantCreate, creates, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("creates (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRelease, plan.Release, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("releases (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDelete, plan.Delete, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("deletes (-want,+got):\n%s", diff)
			}
			var conds []string
			for _, c := range plan.Status.Conditions {
				if c.Status == metav1.ConditionTrue {
					conds = append(conds, c.Type)
				}
			}
			if diff := cmp.Diff(tc.wantConds, conds, cmpopts.EquateEmpty(), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("true conditions (-want,+got):\n%s", diff)
			}
			if plan.Status.Active != tc.wantActive {
				t.Errorf("active %d, want %d", plan.Status.Active, tc.wantActive)
			}
		})
	}
}

// TestStatusWriteSequence drives one SafeJob through its life and checks the
// sequence of status writes, not only the final state.
func TestStatusWriteSequence(t *testing.T) {
	s := spec(1, 2)
	s.CompletionMode = batchv1alpha1.IndexedCompletion
	dr := newDriver(s)
	step := func(now time.Time) *Plan { return dr.step(t, now) }
	type write struct {
		Seq       int64
		Types     []batchv1alpha1.EntryType
		Completed string
		Active    int32
		Create    int
		Release   int
		Complete  bool
	}
	summarise := func(p *Plan) write {
		w := write{Seq: p.Status.Ledger.Seq, Completed: p.Status.CompletedIndexes, Active: p.Status.Active,
			Create: len(p.Create), Release: len(p.Release),
			Complete: findTrue(p.Status.Conditions, batchv1alpha1.ConditionComplete)}
		for _, e := range p.Append {
			w.Types = append(w.Types, e.Type)
		}
		return w
	}
	var got []write
	got = append(got, summarise(step(t0)))                     // launch index 0
	got = append(got, summarise(step(t0)))                     // create it
	got = append(got, summarise(step(t0)))                     // it runs: active
	dr.pods[0] = withPhase(dr.pods[0], corev1.PodSucceeded, 0) // kubelet
	got = append(got, summarise(step(t0)))                     // record success, launch index 1
	got = append(got, summarise(step(t0)))                     // release pod 0, create pod 1
	got = append(got, summarise(step(t0)))                     // it runs: active
	dr.pods[1] = withPhase(dr.pods[1], corev1.PodSucceeded, 0) // kubelet
	got = append(got, summarise(step(t0)))                     // record success and complete in one write
	got = append(got, summarise(step(t0)))                     // then release pod 1
	got = append(got, summarise(step(t0)))                     // nothing left to do
	want := []write{
		{Seq: 1, Types: []batchv1alpha1.EntryType{"Launched"}},
		{Seq: 1, Create: 1},
		{Seq: 1, Active: 1},
		{Seq: 3, Types: []batchv1alpha1.EntryType{"Succeeded", "Launched"}, Completed: "0"},
		{Seq: 3, Completed: "0", Create: 1, Release: 1},
		{Seq: 3, Completed: "0", Active: 1},
		{Seq: 4, Types: []batchv1alpha1.EntryType{"Succeeded"}, Completed: "0,1", Complete: true},
		{Seq: 4, Completed: "0,1", Release: 1, Complete: true},
		{Seq: 4, Completed: "0,1", Complete: true},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("status writes (-want,+got):\n%s", diff)
	}
}

func findTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

func TestDeadlineAndTTL(t *testing.T) {
	s := spec(1, 1)
	s.ActiveDeadlineSeconds = ptr.To[int64](10)
	s.TTLSecondsAfterFinished = ptr.To[int32](30)
	status := &batchv1alpha1.SafeJobStatus{StartTime: ptr.To(metav1.NewTime(t0)), Ledger: ledgerOf(launched(1, 0, 0))}
	in := &Input{Name: "sj", Spec: &s, Status: status, Pods: []*corev1.Pod{pod(0, 0)}, Now: t0.Add(4 * time.Second)}
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	if plan.RequeueAfter != 6*time.Second {
		t.Errorf("requeue after %s, want 6s until the deadline", plan.RequeueAfter)
	}
	in.Now = t0.Add(11 * time.Second)
	if plan, err = Decide(in); err != nil {
		t.Fatal(err)
	}
	if !findTrue(plan.Status.Conditions, batchv1alpha1.ConditionFailureTarget) || len(plan.Append) != 1 ||
		plan.Append[0].Type != batchv1alpha1.EntryStopping || plan.Append[0].Reason != EvictReasonFailing {
		t.Fatalf("past the deadline: want FailureTarget and the pod stopping (JobFailing), got %+v, appended %v",
			plan.Status.Conditions, plan.Append)
	}
	// Once the Stopping entry is observed, the pod is deleted; when it ends
	// Failed it counts as failed, as batch/v1 counts the pods it stops then.
	in.Status = &plan.Status
	if plan, err = Decide(in); err != nil || len(plan.Delete) != 1 {
		t.Fatalf("Stopping observed: delete %v, err %v; want the pod deleted", plan.Delete, err)
	}
	in.Status = &plan.Status
	in.Pods = []*corev1.Pod{withPhase(pod(0, 0), corev1.PodFailed, 143)}
	if plan, err = Decide(in); err != nil || plan.Status.Failed != 1 || !findTrue(plan.Status.Conditions, batchv1alpha1.ConditionFailed) {
		t.Fatalf("stopped pod ended: failed %d, conditions %+v, err %v; want failed 1 and Failed", plan.Status.Failed, plan.Status.Conditions, err)
	}
	finished := &batchv1alpha1.SafeJobStatus{Conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionFailed,
		Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}}}
	if left, ok := TTLLeft(&s, finished, t0.Add(20*time.Second)); !ok || left != 10*time.Second {
		t.Errorf("TTL left %s %v, want 10s", left, ok)
	}
}

// TestLedgerKeepsNewestOutcomes drives a SafeJob to completion and checks
// that every status write lists the open launches and at most the newest
// KeepOutcomes outcomes, that a pod whose outcome was folded in the write
// that recorded it is still released, and that the fold loses no count.
func TestLedgerKeepsNewestOutcomes(t *testing.T) {
	for _, mode := range []batchv1alpha1.CompletionMode{batchv1alpha1.NonIndexedCompletion, batchv1alpha1.IndexedCompletion} {
		t.Run(string(mode), func(t *testing.T) {
			s := spec(3, 20)
			s.CompletionMode, s.BackoffLimit = mode, ptr.To[int32](100)
			dr := newDriver(s)
			failed := map[int32]bool{}
			for step := 0; !findTrue(dr.status.Conditions, batchv1alpha1.ConditionComplete) || hasHeldPod(dr.pods); step++ {
				if step > 200 {
					t.Fatalf("not complete after %d steps: %+v", step, dr.status)
				}
				prev := dr.status
				dr.step(t, t0)
				checkListed(t, step, prev, dr.status, int(*s.Parallelism))
				finishRunning(dr.pods, failed)
			}
			status := dr.status
			if status.Succeeded != 20 || status.Ledger.Checkpoint == nil {
				t.Fatalf("succeeded %d, checkpoint %+v", status.Succeeded, status.Ledger.Checkpoint)
			}
			if mode == batchv1alpha1.IndexedCompletion && status.CompletedIndexes != "0-19" || status.Failed != int32(len(failed)) {
				t.Errorf("completedIndexes %q, failed %d, want 0-19 and %d", status.CompletedIndexes, status.Failed, len(failed))
			}
		})
	}
}

// checkListed fails the test unless status keeps every fact of prev and
// lists at most its open launches and the newest KeepOutcomes outcomes with
// their launches, also on the way to Complete.
func checkListed(t *testing.T, step int, prev, status *batchv1alpha1.SafeJobStatus, parallelism int) {
	t.Helper()
	st := mustReplay(t, &status.Ledger)
	if err := st.Covers(mustReplay(t, &prev.Ledger)); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	if n, limit := len(status.Ledger.Entries), len(st.Open)+2*KeepOutcomes; n > limit {
		t.Fatalf("step %d: %d entries listed, want at most %d", step, n, limit)
	}
	if n := len(st.Closed); n > KeepOutcomes+parallelism {
		t.Fatalf("step %d: %d outcomes listed", step, n)
	}
}

// finishRunning plays the kubelet: every running pod ends, the first
// attempt of every third index failing once, the rest succeeding.
func finishRunning(pods []*corev1.Pod, failed map[int32]bool) {
	for k, p := range pods {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		i, _ := strconv.Atoi(p.Labels[batchv1alpha1.CompletionIndexLabel])
		if i%3 == 0 && !failed[int32(i)] {
			failed[int32(i)] = true
			pods[k] = withPhase(p, corev1.PodFailed, 1)
			continue
		}
		pods[k] = withPhase(p, corev1.PodSucceeded, 0)
	}
}

// driver runs Decide the way the controller does: a launch is uncreated until
// its pod is created, created pods are seen, released pods lose the ledger
// finalizer, and each plan's status is the next one observed.
type driver struct {
	spec      batchv1alpha1.SafeJobSpec
	status    *batchv1alpha1.SafeJobStatus
	uncreated map[string]bool
	pods      []*corev1.Pod
	// room is the Input's LaunchRoom.
	room *int32
}

func newDriver(s batchv1alpha1.SafeJobSpec) *driver {
	return &driver{spec: s, status: &batchv1alpha1.SafeJobStatus{}, uncreated: map[string]bool{}}
}

func (d *driver) step(t testing.TB, now time.Time) *Plan {
	t.Helper()
	return d.decide(t, d.input(now))
}

// input is the Input of the driver's SafeJob as it stands.
func (d *driver) input(now time.Time) *Input {
	return &Input{Name: "sj", Spec: &d.spec, Status: d.status, Pods: d.pods, Now: now, Uncreated: d.uncreated, Backoff: noBackoff,
		Gone: map[string]bool{}, LastSeen: map[string]*corev1.Pod{}, LaunchRoom: d.room}
}

// decide decides in and carries the plan out as the controller would.
func (d *driver) decide(t testing.TB, in *Input) *Plan {
	t.Helper()
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	return d.carryOut(plan)
}

// carryOut carries a plan out as the controller would.
func (d *driver) carryOut(plan *Plan) *Plan {
	for _, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched {
			d.uncreated[e.Pod] = true
		}
	}
	for _, c := range plan.Create {
		delete(d.uncreated, c.Name)
		d.pods = append(d.pods, pod(c.Index, c.Attempt))
	}
	for _, p := range d.pods {
		if slices.Contains(plan.Release, p.Name) {
			p.Finalizers = nil
		}
	}
	d.status = &plan.Status
	return plan
}

func hasHeldPod(pods []*corev1.Pod) bool {
	return slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return len(p.Finalizers) > 0 })
}

func mustReplay(t testing.TB, l *batchv1alpha1.Ledger) *State {
	t.Helper()
	st, err := Replay(l)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestUncreatedPastWindowExpires checks that a launch this process
// committed and never planned to create before its create window passed
// gets no create and is listed expired, for the controller to stop
// creating it and ask for the decision at its grace (act): no pod event
// would ever bring it back, and only a decision after the grace records the
// launch Lost.
func TestUncreatedPastWindowExpires(t *testing.T) {
	start := time.Unix(1000, 0)
	d := newDriver(batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)})
	if plan := d.step(t, start); len(plan.Append) != 1 || len(d.uncreated) != 1 {
		t.Fatalf("first decision appended %v; want one launch, uncreated here", plan.Append)
	}
	late := start.Add(ledger.DefaultFence.CreateWindow + 5*time.Second)
	plan := d.step(t, late)
	if len(plan.Create) != 0 || len(plan.Expired) != 1 || plan.Expired[0].Name != "sj-0-0" {
		t.Errorf("planned creates %v, expired %v; want no create and the launch expired", plan.Create, plan.Expired)
	}

	// Suspended meanwhile, the launch is closed Evicted at once (never
	// created anywhere), not given up to be read live at its grace.
	d.spec.Suspend = ptr.To(true)
	plan = d.decide(t, d.input(late))
	if len(plan.Expired) != 0 || !slices.ContainsFunc(plan.Append, func(e batchv1alpha1.LedgerEntry) bool {
		return e.Type == batchv1alpha1.EntryEvicted && e.Pod == "sj-0-0"
	}) {
		t.Errorf("suspended: appended %v, expired %v; want the launch Evicted and not expired", plan.Append, plan.Expired)
	}
}

// TestLaunchAndStopInWaves checks that the largest parallelism starts, and
// stops, in waves of at most WaveSize entries per status write, and that
// every wave is taken up by the next write until all pods run or are
// stopping.
func TestLaunchAndStopInWaves(t *testing.T) {
	const par = 2000
	s := spec(par, 5000)
	dr := newDriver(s)
	countAppended := func(plan *Plan, typ batchv1alpha1.EntryType) int {
		n := 0
		for _, e := range plan.Append {
			if e.Type == typ {
				n++
			}
		}
		return n
	}
	var waves []int
	for len(mustReplay(t, &dr.status.Ledger).Open) < par {
		if len(waves) > par/WaveSize+1 {
			t.Fatalf("%d launch writes and %d open: waves %v", len(waves), len(mustReplay(t, &dr.status.Ledger).Open), waves)
		}
		waves = append(waves, countAppended(dr.step(t, t0), batchv1alpha1.EntryLaunched))
	}
	want := []int{WaveSize, WaveSize, WaveSize, WaveSize}
	if !slices.Equal(waves, want) {
		t.Fatalf("Launched per write %v, want %v", waves, want)
	}
	dr.step(t, t0) // creates the last wave's pods
	if len(dr.pods) != par {
		t.Fatalf("%d pods created, want %d", len(dr.pods), par)
	}

	dr.spec.Suspend = ptr.To(true)
	waves = nil
	for len(mustReplay(t, &dr.status.Ledger).Stopping) < par {
		if len(waves) > par/WaveSize+1 {
			t.Fatalf("stopping waves %v", waves)
		}
		waves = append(waves, countAppended(dr.step(t, t0), batchv1alpha1.EntryStopping))
	}
	if !slices.Equal(waves, want) {
		t.Fatalf("Stopping per write %v, want %v", waves, want)
	}
}

// TestLaunchRoom checks that a LaunchRoom bounds the launches of one
// decision below parallelism, takes the lowest undone indexes as without
// it, and at 0 launches nothing while the rest of the decision goes on.
func TestLaunchRoom(t *testing.T) {
	dr := newDriver(spec(10, 20))
	launched := func(plan *Plan) []string {
		var names []string
		for _, e := range plan.Append {
			if e.Type == batchv1alpha1.EntryLaunched {
				names = append(names, e.Pod)
			}
		}
		return names
	}
	dr.room = ptr.To[int32](0)
	if got := launched(dr.step(t, t0)); len(got) != 0 {
		t.Fatalf("room 0 launched %v", got)
	}
	dr.room = ptr.To[int32](3)
	if got, want := launched(dr.step(t, t0)), []string{PodName("sj", 0, 0), PodName("sj", 1, 0), PodName("sj", 2, 0)}; !slices.Equal(got, want) {
		t.Fatalf("room 3 launched %v, want %v", got, want)
	}
	dr.room = ptr.To[int32](100) // more than parallelism leaves parallelism the bound
	plan := dr.step(t, t0)
	if plan.OpenBefore != 3 {
		t.Fatalf("OpenBefore %d with 3 launches open, want 3", plan.OpenBefore)
	}
	if got := launched(plan); len(got) != 7 || got[0] != PodName("sj", 3, 0) {
		t.Fatalf("room 100 with 3 open of parallelism 10 launched %v, want indexes 3-9", got)
	}
	dr.step(t, t0) // creates them
	dr.room = ptr.To[int32](0)
	dr.pods[0].Status.Phase = corev1.PodSucceeded
	plan = dr.step(t, t0)
	if got := launched(plan); len(got) != 0 {
		t.Fatalf("room 0 after a success launched %v", got)
	}
	if dr.status.Succeeded != 1 {
		t.Fatalf("room 0 held back the outcome: succeeded %d, want 1", dr.status.Succeeded)
	}
}

// TestWorkQueueCounts: the COMPLETIONS column reads as kubectl shows a
// batch/v1 Job, and a work queue asks Kueue for parallelism pods, as Kueue
// counts a batch/v1 Job without completions.
func TestWorkQueueCounts(t *testing.T) {
	cases := map[string]struct {
		spec        batchv1alpha1.SafeJobSpec
		succeeded   int32
		wantColumn  string
		wantCount   int32
		wantLimitOK int32 // an index the ledger may hold
	}{
		"completions":             {spec: spec(2, 5), succeeded: 3, wantColumn: "3/5", wantCount: 2, wantLimitOK: 4},
		"work queue":              {spec: queueSpec(4), wantColumn: "0/1 of 4", wantCount: 4, wantLimitOK: MaxParallelism - 1},
		"work queue, one success": {spec: queueSpec(4), succeeded: 1, wantColumn: "1/1 of 4", wantCount: 3, wantLimitOK: MaxParallelism - 1},
		"work queue of one":       {spec: queueSpec(1), wantColumn: "0/1", wantCount: 1, wantLimitOK: MaxParallelism - 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := completionsColumn(&tc.spec, tc.succeeded); got != tc.wantColumn {
				t.Errorf("column %q, want %q", got, tc.wantColumn)
			}
			if got := WorkloadCount(&tc.spec, &batchv1alpha1.SafeJobStatus{Succeeded: tc.succeeded}); got != tc.wantCount {
				t.Errorf("Workload count %d, want %d", got, tc.wantCount)
			}
			if got := indexLimit(&tc.spec); got != tc.wantLimitOK+1 {
				t.Errorf("index limit %d, want %d", got, tc.wantLimitOK+1)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	cases := map[string]struct {
		failures int32
		elapsed  time.Duration
		want     time.Duration
	}{
		"no failure":                 {failures: 0, want: 0},
		"first failure":              {failures: 1, want: 10 * time.Second},
		"first failure, 4s later":    {failures: 1, elapsed: 4 * time.Second, want: 6 * time.Second},
		"first failure, long after":  {failures: 1, elapsed: time.Hour, want: 0},
		"third failure":              {failures: 3, want: 40 * time.Second},
		"at the cap":                 {failures: 7, want: 10 * time.Minute},
		"far past the cap":           {failures: 1000, want: 10 * time.Minute},
		"far past the cap, 1m later": {failures: 1000, elapsed: time.Minute, want: 9 * time.Minute},
		"failure time ahead of now":  {failures: 1, elapsed: -24 * time.Hour, want: 10 * time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := (Backoff{}).left(tc.failures, t0, t0.Add(tc.elapsed)); got != tc.want {
				t.Errorf("left = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestBackoff: a failed pod is replaced only once the backoff delay since
// the last failure has passed (batch/v1: 10s doubling), counting failures
// since the last success; with backoffLimitPerIndex the delay is per index,
// and other indexes start meanwhile. The count and time survive a fold.
func TestBackoff(t *testing.T) {
	failedAt := func(seq int64, i, a int32, at time.Time) batchv1alpha1.LedgerEntry {
		e := outcome(seq, batchv1alpha1.EntryFailed, i, a, batchv1alpha1.FailReasonCounted)
		e.Time = metav1.NewTime(at)
		return e
	}
	succeededAt := func(seq int64, i, a int32, at time.Time) batchv1alpha1.LedgerEntry {
		e := outcome(seq, batchv1alpha1.EntrySucceeded, i, a, "")
		e.Time = metav1.NewTime(at)
		return e
	}
	perIndexWide := spec(2, 10)
	perIndexWide.CompletionMode, perIndexWide.BackoffLimitPerIndex = batchv1alpha1.IndexedCompletion, ptr.To[int32](3)
	perIndex := spec(2, 2)
	perIndex.CompletionMode, perIndex.BackoffLimitPerIndex = batchv1alpha1.IndexedCompletion, ptr.To[int32](3)
	twoFailures := ledgerOf(launched(1, 0, 0), failedAt(2, 0, 0, t0), launched(3, 0, 1), failedAt(4, 0, 1, t0.Add(5*time.Second)))
	cases := map[string]struct {
		spec       batchv1alpha1.SafeJobSpec
		ledger     batchv1alpha1.Ledger
		now        time.Time
		wantLaunch []string
		wantWait   time.Duration
	}{
		"within the delay nothing starts": {spec: spec(2, 2), ledger: ledgerOf(launched(1, 0, 0), failedAt(2, 0, 0, t0)),
			now: t0.Add(4 * time.Second), wantWait: 6 * time.Second},
		"after the delay the index runs again": {spec: spec(2, 2), ledger: ledgerOf(launched(1, 0, 0), failedAt(2, 0, 0, t0)),
			now: t0.Add(10 * time.Second), wantLaunch: []string{"sj-0-1", "sj-1-0"}},
		"two failures double it": {spec: spec(1, 1), ledger: twoFailures, now: t0.Add(15 * time.Second), wantWait: 10 * time.Second},
		"a success resets it": {spec: spec(1, 3), ledger: ledgerOf(launched(1, 0, 0), failedAt(2, 0, 0, t0),
			launched(3, 0, 1), outcome(4, batchv1alpha1.EntrySucceeded, 0, 1, "")),
			now: t0.Add(time.Second), wantLaunch: []string{"sj-1-0"}},
		"a failure that ended with the latest success, recorded after it, does not delay": {spec: spec(2, 4),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), succeededAt(3, 1, 0, t0), failedAt(4, 0, 0, t0)),
			now:    t0.Add(time.Second), wantLaunch: []string{"sj-0-1", "sj-2-0"}},
		"a failure that ended after the latest success delays, whatever the record order": {spec: spec(2, 4),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), succeededAt(3, 1, 0, t0), failedAt(4, 0, 0, t0.Add(time.Second))),
			now:    t0.Add(3 * time.Second), wantWait: 8 * time.Second},
		"an earlier failure that ended before a later-recorded success does not delay": {spec: spec(2, 4),
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), failedAt(3, 0, 0, t0), succeededAt(4, 1, 0, t0.Add(time.Second))),
			now:    t0.Add(2 * time.Second), wantLaunch: []string{"sj-0-1", "sj-2-0"}},
		"per index: indexes waiting their delay hold parallelism's slots for fresh ones": {spec: perIndexWide,
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), failedAt(3, 0, 0, t0), failedAt(4, 1, 0, t0)),
			now:    t0.Add(3 * time.Second), wantWait: 7 * time.Second},
		"per index: after the delay the waiting indexes run again first": {spec: perIndexWide,
			ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), failedAt(3, 0, 0, t0), failedAt(4, 1, 0, t0)),
			now:    t0.Add(10 * time.Second), wantLaunch: []string{"sj-0-1", "sj-1-1"}},
		"per index: the failed index waits, others start": {spec: perIndex,
			ledger: ledgerOf(launched(1, 0, 0), failedAt(2, 0, 0, t0)),
			now:    t0.Add(3 * time.Second), wantLaunch: []string{"sj-1-0"}, wantWait: 7 * time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, folded := range []bool{false, true} {
				l := tc.ledger
				if folded {
					var err error
					if l, err = Fold(&l, 0); err != nil {
						t.Fatal(err)
					}
				}
				plan, err := Decide(&Input{Name: "sj", Spec: &tc.spec, Now: tc.now,
					Status: &batchv1alpha1.SafeJobStatus{Ledger: l}, LastSeen: map[string]*corev1.Pod{}})
				if err != nil {
					t.Fatal(err)
				}
				var launches []string
				for _, e := range plan.Append {
					if e.Type == batchv1alpha1.EntryLaunched {
						launches = append(launches, e.Pod)
					}
				}
				if diff := cmp.Diff(tc.wantLaunch, launches, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("folded %v: launches (-want,+got):\n%s", folded, diff)
				}
				if plan.RequeueAfter != tc.wantWait {
					t.Errorf("folded %v: requeue after %s, want %s", folded, plan.RequeueAfter, tc.wantWait)
				}
			}
		})
	}
}

// TestPodCounters: active counts the pods that exist and have neither ended
// nor begun terminating, terminating those being deleted, as batch/v1 counts
// them; a launch whose pod does not exist yet is neither.
func TestPodCounters(t *testing.T) {
	deleting := func(p *corev1.Pod) *corev1.Pod {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
		return p
	}
	ready := pod(1, 0)
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	s := spec(6, 6)
	s.CompletionMode = batchv1alpha1.IndexedCompletion
	in := &Input{Name: "sj", Spec: &s, Now: t0, Backoff: noBackoff, LastSeen: map[string]*corev1.Pod{},
		Status: &batchv1alpha1.SafeJobStatus{Ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0), launched(3, 2, 0),
			outcome(4, batchv1alpha1.EntryStopping, 2, 0, EvictReasonScaledDown), launched(5, 3, 0), launched(6, 4, 0))},
		Pods: []*corev1.Pod{
			pod(0, 0),           // running
			ready,               // running and ready
			deleting(pod(2, 0)), // being stopped
			withPhase(pod(3, 0), corev1.PodFailed, 1), // ended
			// index 4: launched, not created yet
		}}
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	got := [3]int32{plan.Status.Active, plan.Status.Ready, ptr.Deref(plan.Status.Terminating, -1)}
	if want := [3]int32{2, 1, 1}; got != want {
		t.Errorf("active, ready, terminating = %v, want %v", got, want)
	}
}

// TestOutcomeTimes: a pod's outcome carries when it ended, as batch/v1 reads
// it, within its launch and the commit; in one pass successes are recorded
// first, so a failure that ended after a success still delays the next pod.
func TestOutcomeTimes(t *testing.T) {
	finished := func(p *corev1.Pod, at time.Time) *corev1.Pod {
		p.Status.ContainerStatuses[0].State.Terminated.FinishedAt = metav1.NewTime(at)
		return p
	}
	now := t0.Add(30 * time.Second)
	cases := map[string]struct {
		pod  *corev1.Pod
		want time.Time
	}{
		"containers' finish": {pod: finished(withPhase(pod(0, 0), corev1.PodFailed, 1), t0.Add(12*time.Second)),
			want: t0.Add(12 * time.Second)},
		"not before the launch": {pod: finished(withPhase(pod(0, 0), corev1.PodFailed, 1), t0.Add(-time.Hour)), want: t0},
		"not after the commit":  {pod: finished(withPhase(pod(0, 0), corev1.PodFailed, 1), now.Add(time.Hour)), want: now},
		"no finish: now":        {pod: withPhase(pod(0, 0), corev1.PodFailed, 1), want: now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := endedAt(tc.pod, t0, now); !got.Equal(tc.want) {
				t.Errorf("endedAt = %s, want %s", got, tc.want)
			}
		})
	}
	t.Run("one pass: successes first", func(t *testing.T) {
		sp := spec(2, 4)
		pods := []*corev1.Pod{finished(withPhase(pod(0, 0), corev1.PodFailed, 1), t0.Add(11*time.Second)),
			finished(withPhase(pod(1, 0), corev1.PodSucceeded, 0), t0.Add(10*time.Second))}
		plan, err := Decide(&Input{Name: "sj", Spec: &sp, Pods: pods, Now: t0.Add(12 * time.Second),
			Status: &batchv1alpha1.SafeJobStatus{Ledger: ledgerOf(launched(1, 0, 0), launched(2, 1, 0))}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range plan.Append {
			got = append(got, fmt.Sprintf("%s %s %s", e.Type, e.Pod, e.Time.Sub(t0)))
		}
		want := []string{"Succeeded sj-1-0 10s", "Failed sj-0-0 11s"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("appended (-want,+got):\n%s", diff)
		}
		if plan.RequeueAfter != 9*time.Second {
			t.Errorf("requeue after %s, want the 10s delay from the failure's end, 9s", plan.RequeueAfter)
		}
	})
}

// TestElasticIndexedCounts: after completions shrink, status counts only the
// indexes below them, as batch/v1 does; the ledger keeps the others (I4),
// and they count again once completions grow back.
func TestElasticIndexedCounts(t *testing.T) {
	l := ledgerOf(launched(1, 0, 0), launched(2, 3, 0), outcome(3, batchv1alpha1.EntrySucceeded, 0, 0, ""),
		outcome(4, batchv1alpha1.EntrySucceeded, 3, 0, ""))
	for _, tc := range []struct {
		completions   int32
		wantSucceeded int32
		wantIndexes   string
	}{{completions: 2, wantSucceeded: 1, wantIndexes: "0"}, {completions: 5, wantSucceeded: 2, wantIndexes: "0,3"}} {
		sp := indexedSpec(tc.completions, tc.completions)
		plan, err := Decide(&Input{Name: "sj", Spec: &sp, Now: t0, Backoff: noBackoff, Status: &batchv1alpha1.SafeJobStatus{Ledger: l}})
		if err != nil {
			t.Fatal(err)
		}
		if plan.Status.Succeeded != tc.wantSucceeded || plan.Status.CompletedIndexes != tc.wantIndexes {
			t.Errorf("completions %d: succeeded %d, completedIndexes %q; want %d, %q", tc.completions,
				plan.Status.Succeeded, plan.Status.CompletedIndexes, tc.wantSucceeded, tc.wantIndexes)
		}
		if st, err := Replay(&plan.Status.Ledger); err != nil || !st.Succeeded.Has(3) {
			t.Errorf("completions %d: the ledger lost index 3 (%v)", tc.completions, err)
		}
	}
}

// TestDecideAfterUnaccounted checks that Decide, which takes the ledger
// Unaccounted replayed on the same Input instead of replaying it again,
// plans exactly as on an Input of its own: once after Unaccounted, again on
// that Input (the first decision changed the replayed State, so it must not
// be taken twice), and after the Input's ledger was replaced or rewritten
// in place since Unaccounted read it.
func TestDecideAfterUnaccounted(t *testing.T) {
	dr := newDriver(spec(3, 10))
	dr.step(t, t0) // commits three launches
	dr.step(t, t0) // creates their pods
	dr.pods[0] = withPhase(dr.pods[0], corev1.PodSucceeded, 0)
	decide := func(in *Input) *Plan {
		t.Helper()
		plan, err := Decide(in)
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	same := func(what string, want, got *Plan) {
		t.Helper()
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: plan differs from a decision on an Input of its own (-want +got):\n%s", what, diff)
		}
	}
	unaccounted := func(in *Input) {
		t.Helper()
		if _, _, err := Unaccounted(in); err != nil {
			t.Fatal(err)
		}
	}
	want := decide(dr.input(t0))
	if len(want.Append) < 2 {
		t.Fatalf("the scenario should record an outcome and launch again, got %d entries", len(want.Append))
	}

	in := dr.input(t0)
	unaccounted(in)
	same("after Unaccounted", want, decide(in))
	same("deciding the same Input again", want, decide(in))

	// The next ledger (the plan's status written), as another Input sees it.
	next := dr.input(t0)
	next.Status = want.Status.DeepCopy()
	wantNext := decide(next)

	in = dr.input(t0)
	unaccounted(in)
	in.Status = want.Status.DeepCopy()
	same("ledger replaced after Unaccounted", wantNext, decide(in))

	status := *dr.status.DeepCopy()
	in = dr.input(t0)
	in.Status = &status
	unaccounted(in)
	*in.Status = *want.Status.DeepCopy() // the same status, rewritten in place
	same("ledger rewritten in place after Unaccounted", wantNext, decide(in))

	// A pod the live reads add after Unaccounted mapped the pods by name
	// (gather appends the terminal ones it finds) is seen by the decision.
	dr.pods[1] = withPhase(dr.pods[1], corev1.PodSucceeded, 0)
	wantMore := decide(dr.input(t0))
	in = dr.input(t0)
	ended := in.Pods[1]
	in.Pods = slices.Delete(slices.Clone(in.Pods), 1, 2)
	unaccounted(in)
	in.Pods = append(in.Pods, ended)
	same("pod added after Unaccounted", wantMore, decide(in))
}
