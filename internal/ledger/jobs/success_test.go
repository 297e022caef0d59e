package jobs

import (
	"testing"

	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

func TestSuccessPolicyMatch(t *testing.T) {
	rule := func(indexes string, count int32) batchv1alpha1.SuccessPolicyRule {
		r := batchv1alpha1.SuccessPolicyRule{}
		if indexes != "" {
			r.SucceededIndexes = ptr.To(indexes)
		}
		if count >= 0 {
			r.SucceededCount = ptr.To(count)
		}
		return r
	}
	cases := map[string]struct {
		rules     []batchv1alpha1.SuccessPolicyRule
		succeeded string
		wantMsg   string
	}{
		"no success yet":                 {rules: []batchv1alpha1.SuccessPolicyRule{rule("", 0)}},
		"count reached":                  {rules: []batchv1alpha1.SuccessPolicyRule{rule("", 2)}, succeeded: "1,3", wantMsg: "Matched rules at index 0"},
		"count not reached":              {rules: []batchv1alpha1.SuccessPolicyRule{rule("", 3)}, succeeded: "1,3"},
		"every listed index":             {rules: []batchv1alpha1.SuccessPolicyRule{rule("0,2-3", -1)}, succeeded: "0-3", wantMsg: "Matched rules at index 0"},
		"a listed index missing":         {rules: []batchv1alpha1.SuccessPolicyRule{rule("0,2-3", -1)}, succeeded: "0,1,3"},
		"count among the listed":         {rules: []batchv1alpha1.SuccessPolicyRule{rule("0-3", 2)}, succeeded: "1,5-7", wantMsg: ""},
		"count among the listed reached": {rules: []batchv1alpha1.SuccessPolicyRule{rule("0-3", 2)}, succeeded: "1,3,5", wantMsg: "Matched rules at index 0"},
		"the second rule":                {rules: []batchv1alpha1.SuccessPolicyRule{rule("9", -1), rule("", 1)}, succeeded: "4", wantMsg: "Matched rules at index 1"},
		"indexes beyond completions left out": {rules: []batchv1alpha1.SuccessPolicyRule{rule("4-20", -1)}, succeeded: "4-7",
			wantMsg: "Matched rules at index 0"},
		"only indexes beyond completions": {rules: []batchv1alpha1.SuccessPolicyRule{rule("9-20", -1)}, succeeded: "4-7"},
		"unparsable indexes skipped":      {rules: []batchv1alpha1.SuccessPolicyRule{rule("3-1", -1), rule("", 1)}, succeeded: "0", wantMsg: "Matched rules at index 1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			succeeded, err := ledger.ParseIndexSet(tc.succeeded)
			if err != nil {
				t.Fatal(err)
			}
			msg, ok := successPolicyMatch(&batchv1alpha1.SuccessPolicy{Rules: tc.rules}, 8, &succeeded)
			if msg != tc.wantMsg || ok != (tc.wantMsg != "") {
				t.Errorf("match = %q, %v; want %q", msg, ok, tc.wantMsg)
			}
		})
	}
}
