package integration

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/test/testutil"
)

// TestPodFailurePolicyValidationAsBatchV1 sends every podFailurePolicy to
// the same API server twice, in a batch/v1 Job and in a SafeJob (dry run),
// and checks that the SafeJob is refused exactly when the Job is, naming
// every field the Job's refusal names. batch/v1's own validation is the
// oracle.
func TestPodFailurePolicyValidationAsBatchV1(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	exitCodes := func(op batchv1.PodFailurePolicyOnExitCodesOperator, values ...int32) *batchv1.PodFailurePolicyOnExitCodesRequirement {
		return &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: values}
	}
	onExit := func(action batchv1.PodFailurePolicyAction, req *batchv1.PodFailurePolicyOnExitCodesRequirement) batchv1.PodFailurePolicyRule {
		return batchv1.PodFailurePolicyRule{Action: action, OnExitCodes: req}
	}
	disruption := []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}
	many := func(n int, f func(i int) batchv1.PodFailurePolicyRule) []batchv1.PodFailurePolicyRule {
		out := make([]batchv1.PodFailurePolicyRule, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	codes := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(i + 1)
		}
		return out
	}
	cases := map[string]struct {
		rules        []batchv1.PodFailurePolicyRule
		onFailure    bool // restartPolicy OnFailure
		perIndex     bool // backoffLimitPerIndex set
		wantAccepted bool
		// atList: where batch/v1 names one element of a list
		// (rules[1].action, values[0]), a CRD rule can only name the list;
		// the README lists these two.
		atList bool
	}{
		"valid, every action": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1, 2, 42)),
			onExit(batchv1.PodFailurePolicyActionFailIndex, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpNotIn, 0, 3)),
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: disruption},
			onExit(batchv1.PodFailurePolicyActionCount, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 255)),
		}, perIndex: true, wantAccepted: true},
		"the largest lists": {rules: many(20, func(int) batchv1.PodFailurePolicyRule {
			return onExit(batchv1.PodFailurePolicyActionCount, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, codes(255)...))
		}), wantAccepted: true},
		"lowercase operator": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes("in", 1))}},
		"empty operator": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes("", 1))}},
		"unknown action": {rules: []batchv1.PodFailurePolicyRule{
			onExit("Restart", exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1))}},
		"empty action": {rules: []batchv1.PodFailurePolicyRule{
			onExit("", exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1))}},
		"both requirements": {rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnExitCodes: exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1), OnPodConditions: disruption}}},
		"no requirement": {rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore}}},
		"FailIndex without backoffLimitPerIndex": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionCount, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1)),
			onExit(batchv1.PodFailurePolicyActionFailIndex, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 2))}, atList: true},
		"restartPolicy OnFailure": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1))}, onFailure: true},
		"0 with In": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 0, 1))}, atList: true},
		"values not ordered": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 3, 1))}},
		"values repeated": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1, 1))}},
		"no values": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn))}},
		"256 values": {rules: []batchv1.PodFailurePolicyRule{
			onExit(batchv1.PodFailurePolicyActionFailJob, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, codes(256)...))}},
		"21 rules": {rules: many(21, func(int) batchv1.PodFailurePolicyRule {
			return onExit(batchv1.PodFailurePolicyActionCount, exitCodes(batchv1.PodFailurePolicyOnExitCodesOpIn, 1))
		})},
		"unknown condition status": {rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: "Maybe"}}}}},
		"bad condition type": {rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: "not a type!", Status: corev1.ConditionTrue}}}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			policy := &batchv1.PodFailurePolicy{Rules: tc.rules}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "pfp", Namespace: ns}, Spec: batchv1.JobSpec{
				Completions: ptr.To[int32](2), CompletionMode: ptr.To(batchv1.IndexedCompletion), PodFailurePolicy: policy,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}}
			sj := testutil.MakeSafeJob("pfp", ns).Indexed().Completions(2).Obj()
			if tc.perIndex {
				job.Spec.BackoffLimitPerIndex, sj.Spec.BackoffLimitPerIndex = ptr.To[int32](1), ptr.To[int32](1)
			}
			if tc.onFailure {
				job.Spec.Template.Spec.RestartPolicy, sj.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure, corev1.RestartPolicyOnFailure
			}
			raw, err := json.Marshal(policy)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &sj.Spec.PodFailurePolicy); err != nil {
				t.Fatal(err)
			}
			jobErr := k8s.Create(context.Background(), job, client.DryRunAll)
			sjErr := k8s.Create(context.Background(), sj, client.DryRunAll)
			checkSameRefusal(t, jobErr, sjErr, tc.wantAccepted, tc.atList)
		})
	}
}

// checkSameRefusal checks a batch/v1 Job's and a SafeJob's answers to the
// same spec: the Job accepted as the case expects, the SafeJob accepted
// exactly when the Job is, and its refusal naming every field the Job's
// names (with atList, the list holding an element will do).
func checkSameRefusal(t *testing.T, jobErr, sjErr error, wantAccepted, atList bool) {
	t.Helper()
	if (jobErr == nil) != wantAccepted {
		t.Fatalf("the batch/v1 Job: %v; the case expects accepted=%v", jobErr, wantAccepted)
	}
	if (sjErr == nil) != (jobErr == nil) {
		t.Fatalf("batch/v1 Job: %v\nSafeJob: %v", jobErr, sjErr)
	}
	for _, field := range causeFields(jobErr) {
		if !namesField(sjErr, field, atList) {
			t.Errorf("the Job's refusal names %s, the SafeJob's does not:\nJob: %v\nSafeJob: %v", field, jobErr, sjErr)
		}
	}
}

// causeFields are the field paths an API refusal names.
func causeFields(err error) []string {
	var status *apierrors.StatusError
	if !errors.As(err, &status) || status.ErrStatus.Details == nil {
		return nil
	}
	var out []string
	for _, c := range status.ErrStatus.Details.Causes {
		out = append(out, c.Field)
	}
	return out
}

// elementOfList cuts a field path at its last list index: the list that
// holds the element ("spec.a.rules[1].action" -> "spec.a.rules").
var elementOfList = regexp.MustCompile(`\[\d+\][^\[]*$`)

// namesField reports whether a refusal names the field as one of its
// causes; with atList, the list holding the element will do.
func namesField(err error, field string, atList bool) bool {
	fields := causeFields(err)
	if slices.Contains(fields, field) {
		return true
	}
	return atList && slices.Contains(fields, elementOfList.ReplaceAllString(field, ""))
}
