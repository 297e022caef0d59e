package runs

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// writeStatus derives the parent's status from the ledger and folds it if long.
func (d *decision) writeStatus() error {
	written := ledger.Append(&d.in.Status.Ledger, d.plan.Append)
	if len(written.Entries) > FoldAbove {
		// A closed run stays listed while a create of it may still land, so
		// that its finalizer is held until then (fenceClosed).
		grace := d.fence.LostGrace()
		var err error
		if written, err = fold(&written, KeepAfterFold, func(r Ref) bool { return d.in.Now.Before(r.Time.Add(grace)) }); err != nil {
			return err
		}
	}
	st, err := Replay(&written)
	if err != nil {
		return fmt.Errorf("ledger after this plan: %w", err)
	}
	status := &d.status
	status.Ledger = written
	if !st.LastScheduled.IsZero() {
		status.LastScheduleTime = ptr.To(metav1.NewTime(st.LastScheduled))
	}
	if !d.lastSuccess.IsZero() && (status.LastSuccessfulTime == nil || d.lastSuccess.After(status.LastSuccessfulTime.Time)) {
		status.LastSuccessfulTime = ptr.To(metav1.NewTime(d.lastSuccess))
	}
	status.ActiveRuns = nil
	for _, r := range Sorted(st.Open) {
		ref := corev1.ObjectReference{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: r.Name}
		if run := d.in.Runs[r.Name]; run != nil {
			ref.Namespace, ref.UID = run.Namespace, run.UID
		} else if uid := d.runUID(r.Name); uid != "" {
			// Not observed now: the UID once learned stays known.
			ref.Namespace, ref.UID = d.in.Namespace, uid
		}
		status.ActiveRuns = append(status.ActiveRuns, ref)
	}
	status.MissedRuns = st.Missed
	ledger.MarkLedgerValid(&status.Conditions, d.in.Now)
	d.plan.Status = *status
	return nil
}
