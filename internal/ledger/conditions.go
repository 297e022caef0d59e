package ledger

import (
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// Finished returns the SafeJob's Complete or Failed condition when it is
// True, nil while it has not finished.
func Finished(conds []metav1.Condition) *metav1.Condition {
	for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed} {
		if c := meta.FindStatusCondition(conds, t); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// SetCondition sets a condition, its transition time now when its status
// changes, and reports whether anything changed. A message is cut to what
// the CRD allows (MaxConditionMessage), or the status would be refused.
func SetCondition(conds *[]metav1.Condition, t string, s metav1.ConditionStatus, reason, msg string, now time.Time) bool {
	return meta.SetStatusCondition(conds, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: Truncate(msg, MaxConditionMessage), LastTransitionTime: metav1.NewTime(now),
	})
}

// MaxConditionMessage is the longest condition message the API server
// takes (metav1.Condition's schema), in bytes.
const MaxConditionMessage = 32768

// Truncate cuts s to at most n bytes, at a rune boundary, ending it with
// "..." when it cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "..."
	cut := max(n-len(more), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// MarkLedgerValid sets LedgerValid back to True when it was reported otherwise.
func MarkLedgerValid(conds *[]metav1.Condition, now time.Time) {
	if c := meta.FindStatusCondition(*conds, batchv1alpha1.ConditionLedgerValid); c != nil && c.Status != metav1.ConditionTrue {
		SetCondition(conds, batchv1alpha1.ConditionLedgerValid, metav1.ConditionTrue, batchv1alpha1.ReasonLedgerOK, "Ledger is valid", now)
	}
}
