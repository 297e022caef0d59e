package runs

import (
	"time"

	"github.com/safejob/safejob/internal/ledger"
)

// Unobserved lists the open runs that the cache does not show and that
// were committed at least the fence's LostGrace ago: no create of them can
// land any more. The controller reads each live before Decide; only
// then may a run's absence close it, whether or not it was ever seen. The
// duration is when the next open run becomes due for that check.
func Unobserved(in *Input) ([]Ref, time.Duration, error) {
	st, err := Replay(&in.Status.Ledger)
	if err != nil {
		return nil, 0, err
	}
	var candidates []Ref
	for _, r := range Sorted(st.Open) {
		if in.Runs[r.Name] == nil && !in.Gone[r.Name] && !in.Taken[r.Name] {
			candidates = append(candidates, r)
		}
	}
	due, wait := ledger.DueForLiveRead(in.Fence, candidates, func(r Ref) time.Time { return r.Time }, in.Now)
	return due, wait, nil
}

// create lists the open runs to create now. A run is created only from the
// observed ledger (I8), only within its create window (ledger.Fence), and not
// again by the process that created or saw it; under Forbid and Replace only once
// no earlier run is open or has a pod left, and Replace deletes the earlier
// runs. An open run not observed is due for a live read once no create of
// it can land any more.
func (d *decision) create() {
	grace := d.fence.LostGrace()
	for k, r := range d.open {
		if d.in.Runs[r.Name] != nil || d.closing[r.Name] {
			continue
		}
		// Unobserved, it is read live once its grace has passed; one whose
		// grace passed while this decision's live reads of other runs took
		// their time was not read: the next decision, at once, reads it.
		untilLiveRead := r.Time.Add(grace).Sub(d.in.Now)
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, max(untilLiveRead, time.Millisecond))
		if d.in.Seen[r.Name] != "" || d.in.Issued[r.Name] || !d.fence.MayCreate(r.Time, d.in.Now) {
			continue // it existed: removed by someone, or the cache lags
		}
		if !d.createWaits(r, d.open[:k]) {
			d.plan.Create = append(d.plan.Create, r)
		}
	}
}

// fenceClosed reports whether no create of a run can land any more: its
// create window, create timeout and clock margin have passed since its
// Scheduled entry was committed. A run folded into the checkpoint was held
// listed until then.
func (d *decision) fenceClosed(name string) bool {
	ref, listed := d.st.Closed[name]
	if !listed {
		ref, listed = d.st.Open[name]
	}
	if !listed {
		return true
	}
	untilClosed := ref.Time.Add(d.fence.LostGrace()).Sub(d.in.Now)
	if untilClosed > 0 {
		d.plan.RequeueAfter = ledger.MinPositive(d.plan.RequeueAfter, untilClosed)
	}
	return untilClosed <= 0
}
