package jobs

import (
	"math"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// launch appends Launched entries for the lowest unfinished, idle indexes,
// up to parallelism open launches. While pod creates are refused, one launch
// at a time waits for its pod: a launch whose window passes goes Lost and
// runs again, and one at a time keeps that churn to a single slot.
func (d *decision) launch() {
	if d.stopping {
		return
	}
	slots := min(d.parallelism()-int32(len(d.st.Open)), WaveSize)
	if d.in.LaunchRoom != nil {
		slots = min(slots, *d.in.LaunchRoom)
	}
	if d.isTrue(batchv1alpha1.ConditionPodCreateFailure) {
		slots = min(slots, 1-d.uncreatedOpen())
	}
	indexBusy := map[int32]bool{} // indexes with an open launch, or one launched here
	for _, ref := range d.st.Open {
		indexBusy[ref.Index] = true
	}
	perIndex := d.in.Spec.BackoffLimitPerIndex != nil
	limit, ok := d.launchLimit(perIndex)
	if !ok {
		return
	}
	// With backoffLimitPerIndex an index waiting out its delay is passed
	// over, as in batch/v1. Fresh indexes start only while fewer than
	// parallelism indexes are started and unfinished, so that those (the
	// checkpoint's index list) stay bounded by parallelism (size bounds):
	// freshRoom is how many more may start.
	freshRoom := int32(math.MaxInt32)
	if perIndex {
		freshRoom = d.parallelism() - d.st.unfinishedStarted(limit)
	}
	for i := d.st.nextUndone(0); i < limit && slots > 0; i = d.st.nextUndone(i + 1) {
		if d.st.Attempts[i] == 0 && freshRoom <= 0 {
			break // the rest are fresh, or started ones taken below
		}
		if d.launchIndex(i, indexBusy, perIndex) {
			slots--
			if d.st.Attempts[i] == 0 {
				freshRoom--
			}
		}
	}
	if perIndex { // without it every undone index below limit was visited above
		d.relaunchStarted(limit, slots, indexBusy)
	}
}

// relaunchStarted launches, within slots, the started indexes below limit
// that the scan above did not reach, once their delay has passed.
func (d *decision) relaunchStarted(limit, slots int32, indexBusy map[int32]bool) {
	for _, i := range d.st.startedIndexes() {
		if slots > 0 && i < limit && d.launchIndex(i, indexBusy, true) {
			slots--
		}
	}
}

// launchLimit is the index below which launches may start now; ok is false
// when none may: within the backoff delay after failures (batch/v1, without
// backoffLimitPerIndex), or once a work queue has a success.
func (d *decision) launchLimit(perIndex bool) (limit int32, ok bool) {
	if wait := d.in.Backoff.left(d.st.FailuresSinceSuccess, d.st.LastFailure, d.in.Now); wait > 0 && !perIndex {
		// batch/v1: no pod starts until the delay after the failures since
		// the last success has passed.
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, wait)
		return 0, false
	}
	if workQueue(d.in.Spec) {
		// Work queue: parallelism pods until one succeeds; after that none
		// starts, and those running finish (batch/v1).
		return d.parallelism(), d.st.Succeeded.Len() == 0
	}
	return ptr.Deref(d.in.Spec.Completions, 1), true
}

// launchIndex launches the next attempt of index i unless it runs, or waits
// out its own backoff delay; it reports whether it launched.
func (d *decision) launchIndex(i int32, indexBusy map[int32]bool, perIndex bool) bool {
	if indexBusy[i] {
		return false
	}
	if wait := d.in.Backoff.left(d.st.Failures[i], d.st.LastIndexFailure[i], d.in.Now); wait > 0 && perIndex {
		// With backoffLimitPerIndex the delay is the index's own.
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, wait)
		return false
	}
	indexBusy[i] = true
	attempt := d.st.Attempts[i]
	name := PodName(d.in.Name, i, attempt)
	if d.in.Held[name] {
		name = PodNameApart(d.in.Name, d.in.UID, i, attempt)
	}
	d.add(batchv1alpha1.LedgerEntry{Type: batchv1alpha1.EntryLaunched, Pod: name, Index: i, Attempt: attempt})
	return true
}

// parallelism is the most launches open at once: spec.parallelism, within
// what the queue admitted.
func (d *decision) parallelism() int32 {
	p := ptr.Deref(d.in.Spec.Parallelism, 1)
	if q := d.in.Queue; q != nil && q.MaxActive > 0 {
		p = min(p, q.MaxActive)
	}
	return p
}

// uncreatedOpen counts the open launches whose pod is not observed.
func (d *decision) uncreatedOpen() int32 {
	var n int32
	for name := range d.st.Open {
		if d.observed[name] == nil {
			n++
		}
	}
	return n
}

// decideCreateFailure sets PodCreateFailure while the latest pod create was
// refused, and removes it once one succeeded; without news it stays as is.
func (d *decision) decideCreateFailure() {
	switch r := d.in.CreateRefusal; {
	case r == nil:
	case r.Message != "":
		d.setCond(batchv1alpha1.ConditionPodCreateFailure, metav1.ConditionTrue, ReasonFailedCreate, r.Message)
	default:
		meta.RemoveStatusCondition(&d.status.Conditions, batchv1alpha1.ConditionPodCreateFailure)
	}
}
