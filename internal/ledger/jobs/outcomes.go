package jobs

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// recordOutcomes appends the outcome of every open launch whose pod is seen
// terminal or known gone, and lists the observed pods whose finalizer may go
// or that must not run.
func (d *decision) recordOutcomes() {
	failuresRecorded := map[int32]int32{} // counted failures this decision records, by index
	var outcomes []batchv1alpha1.LedgerEntry
	// Only the pods of closed launches and the terminal pods have anything
	// to record (toRecord): taken in name order, without sorting the running
	// ones.
	var toRecord []string
	for name, pod := range d.observed {
		if _, open := d.st.Open[name]; !open || IsTerminal(pod) {
			toRecord = append(toRecord, name)
		}
	}
	slices.Sort(toRecord)
	for _, name := range toRecord {
		pod := d.observed[name]
		ref, open := d.st.Open[name]
		if !open {
			d.closedPod(pod)
			continue
		}
		e := d.outcome(pod, ref, failuresRecorded)
		e.Time = metav1.NewTime(endedAt(pod, ref.Time, d.in.Now))
		outcomes = append(outcomes, e)
	}
	// Successes first: as batch/v1 reads the pods that ended since it last
	// looked, a failure clears with an earlier success but counts after a
	// later one, whichever is recorded first.
	slices.SortStableFunc(outcomes, func(a, b batchv1alpha1.LedgerEntry) int {
		return cmp.Compare(btoi(a.Type != batchv1alpha1.EntrySucceeded), btoi(b.Type != batchv1alpha1.EntrySucceeded))
	})
	for _, e := range outcomes {
		d.addAt(e, e.Time.Time)
	}
	for _, ref := range sortedOpen(d.st) {
		if d.observed[ref.Name] != nil {
			continue
		}
		lost := batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLost, Pod: ref.Name, Index: ref.Index, Attempt: ref.Attempt}
		switch {
		case d.in.Taken[ref.Name]:
			lost.Reason = ledger.ReasonNameTaken
			d.add(lost)
		case d.in.Gone[ref.Name]:
			d.add(lost)
		case d.in.Uncreated[ref.Name] && d.st.Stopping[ref.Name] == "":
			if d.fence.MayCreate(ref.Time, d.in.Now) {
				d.plan.Create = append(d.plan.Create, ref)
				continue
			}
			// Past the window the pod is never created: the launch is
			// recorded Lost once LostGrace has passed, and runs again.
			d.plan.Expired = append(d.plan.Expired, ref)
		}
	}
}

// outcome is the entry that closes the open launch ref of a terminal pod.
// A pod the controller stopped ends as its Stopping entry says, whatever
// its exit code: Evicted, never counted; or, when the SafeJob was failing,
// Failed unless it succeeded, as batch/v1 counts the pods it deletes then.
func (d *decision) outcome(pod *corev1.Pod, ref PodRef, failuresRecorded map[int32]int32) batchv1alpha1.LedgerEntry {
	e := batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntrySucceeded, Pod: ref.Name, Index: ref.Index, Attempt: ref.Attempt}
	succeeded := pod.Status.Phase == corev1.PodSucceeded
	switch reason, stopping := d.st.Stopping[ref.Name]; {
	case stopping && reason != EvictReasonFailing:
		e.Type, e.Reason = batchv1alpha1.EntryEvicted, reason
	case stopping && !succeeded:
		e.Type, e.Reason = batchv1alpha1.EntryFailed, batchv1alpha1.FailReasonCounted
	case !succeeded:
		e.Type, e.Reason = batchv1alpha1.EntryFailed, d.failureReason(pod, ref, failuresRecorded)
	}
	return e
}

// failureReason classifies a failed pod the controller did not stop: the
// podFailurePolicy action, FailIndex once the index has used up
// backoffLimitPerIndex (counting failuresRecorded, those this decision has
// recorded before, which it adds to).
func (d *decision) failureReason(pod *corev1.Pod, ref PodRef, failuresRecorded map[int32]int32) string {
	reason := failureReason(d.in.Spec.PodFailurePolicy, pod)
	if reason == batchv1alpha1.FailReasonFailJob && d.failJobMessage == "" {
		d.failJobMessage = failJobMessage(d.in.Spec.PodFailurePolicy, pod)
	}
	if reason != batchv1alpha1.FailReasonCounted {
		return reason
	}
	if limit := d.in.Spec.BackoffLimitPerIndex; limit != nil {
		failuresRecorded[ref.Index]++
		if d.st.Failures[ref.Index]+failuresRecorded[ref.Index] > *limit {
			return batchv1alpha1.FailReasonFailIndex
		}
	}
	return batchv1alpha1.FailReasonCounted
}

// closedPod handles an observed pod that has no open launch: its outcome is
// committed (release the finalizer, stop it if it still runs), or its launch
// is newer than the observed ledger (leave it alone).
func (d *decision) closedPod(pod *corev1.Pod) {
	ref, ok := RefFromPod(pod)
	if !ok || !d.st.IsClosed(ref) {
		return
	}
	if d.in.LastSeen[pod.Name] == pod {
		d.plan.Forget = append(d.plan.Forget, pod.Name) // gone from the cluster
		return
	}
	if hasFinalizer(pod) {
		d.plan.Release = append(d.plan.Release, pod.Name)
	}
	if !IsTerminal(pod) && pod.DeletionTimestamp == nil {
		d.plan.Delete = append(d.plan.Delete, pod.Name)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
