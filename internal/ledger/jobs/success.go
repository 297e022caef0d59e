package jobs

import (
	"fmt"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// successPolicyMatch applies a successPolicy to the succeeded indexes, as
// batch/v1 does: the first rule that matches decides, and the message names
// it. A rule's indexes at or beyond completions are left out, and a rule
// whose indexes do not parse is skipped.
func successPolicyMatch(policy *batchv1alpha1.SuccessPolicy, completions int32, succeeded *ledger.IndexSet) (string, bool) {
	if policy == nil || succeeded.Len() == 0 {
		return "", false
	}
	for k, rule := range policy.Rules {
		if rule.SucceededIndexes == nil {
			if rule.SucceededCount != nil && int32(succeeded.Len()) >= *rule.SucceededCount {
				return fmt.Sprintf("Matched rules at index %d", k), true
			}
			continue
		}
		required, err := ledger.ParseIndexSet(*rule.SucceededIndexes)
		if err != nil {
			continue
		}
		total, done := required.CountBelow(completions), required.CountCommon(succeeded, completions)
		if total > 0 && (done == total || (rule.SucceededCount != nil && done >= *rule.SucceededCount)) {
			return fmt.Sprintf("Matched rules at index %d", k), true
		}
	}
	return "", false
}
