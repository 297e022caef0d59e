package jobs

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestFailureReason(t *testing.T) {
	exit := func(op batchv1.PodFailurePolicyOnExitCodesOperator, action batchv1.PodFailurePolicyAction, values ...int32) batchv1alpha1.PodFailurePolicyRule {
		return batchv1alpha1.PodFailurePolicyRule{Action: action,
			OnExitCodes: &batchv1alpha1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: values}}
	}
	cases := map[string]struct {
		rules []batchv1alpha1.PodFailurePolicyRule
		pod   *corev1.Pod
		want  string
	}{
		"no policy counts": {pod: withPhase(pod(0, 0), corev1.PodFailed, 1), want: batchv1alpha1.FailReasonCounted},
		"In matches": {rules: []batchv1alpha1.PodFailurePolicyRule{exit(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionFailJob, 42)},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 42), want: batchv1alpha1.FailReasonFailJob},
		"In misses": {rules: []batchv1alpha1.PodFailurePolicyRule{exit(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionFailJob, 42)},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 1), want: batchv1alpha1.FailReasonCounted},
		"NotIn matches": {rules: []batchv1alpha1.PodFailurePolicyRule{exit(batchv1.PodFailurePolicyOnExitCodesOpNotIn, batchv1.PodFailurePolicyActionFailIndex, 1)},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 2), want: batchv1alpha1.FailReasonFailIndex},
		"exit code 0 never matches": {rules: []batchv1alpha1.PodFailurePolicyRule{exit(batchv1.PodFailurePolicyOnExitCodesOpNotIn, batchv1.PodFailurePolicyActionFailJob, 1)},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 0), want: batchv1alpha1.FailReasonCounted},
		"condition Ignore": {rules: []batchv1alpha1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
			OnPodConditions: []batchv1alpha1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 137, corev1.DisruptionTarget), want: batchv1alpha1.FailReasonIgnored},
		"first matching rule wins": {rules: []batchv1alpha1.PodFailurePolicyRule{
			exit(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionCount, 3),
			exit(batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyActionFailJob, 3)},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 3), want: batchv1alpha1.FailReasonCounted},
		"container name filter": {rules: []batchv1alpha1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1alpha1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To("sidecar"),
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}}},
			pod: withPhase(pod(0, 0), corev1.PodFailed, 42), want: batchv1alpha1.FailReasonCounted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var policy *batchv1alpha1.PodFailurePolicy
			if tc.rules != nil {
				policy = &batchv1alpha1.PodFailurePolicy{Rules: tc.rules}
			}
			if got := failureReason(policy, tc.pod); got != tc.want {
				t.Errorf("failureReason = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestFailJobMessage: the message of a Job failed by a FailJob rule is
// batch/v1's (pod_failure_policy.go): the container, its exit code and the
// index of the rule that matched first, or the pod condition.
func TestFailJobMessage(t *testing.T) {
	p := withPhase(pod(0, 0), corev1.PodFailed, 42, corev1.DisruptionTarget)
	p.Namespace = "ns"
	exit := func(action batchv1.PodFailurePolicyAction, code int32) batchv1alpha1.PodFailurePolicyRule {
		return batchv1alpha1.PodFailurePolicyRule{Action: action, OnExitCodes: &batchv1alpha1.PodFailurePolicyOnExitCodesRequirement{
			Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{code}}}
	}
	onDisruption := batchv1alpha1.PodFailurePolicyRule{Action: batchv1.PodFailurePolicyActionFailJob,
		OnPodConditions: []batchv1alpha1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}
	for name, tc := range map[string]struct {
		rules []batchv1alpha1.PodFailurePolicyRule
		want  string
	}{
		"exit code, second rule": {rules: []batchv1alpha1.PodFailurePolicyRule{exit(batchv1.PodFailurePolicyActionFailJob, 7),
			exit(batchv1.PodFailurePolicyActionFailJob, 42)},
			want: "Container main for pod ns/sj-0-0 failed with exit code 42 matching FailJob rule at index 1"},
		"pod condition": {rules: []batchv1alpha1.PodFailurePolicyRule{onDisruption},
			want: "Pod ns/sj-0-0 has condition DisruptionTarget matching FailJob rule at index 0"},
		"first match ignores": {rules: []batchv1alpha1.PodFailurePolicyRule{exit(batchv1.PodFailurePolicyActionIgnore, 42), onDisruption}},
	} {
		if got := failJobMessage(&batchv1alpha1.PodFailurePolicy{Rules: tc.rules}, p); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}
