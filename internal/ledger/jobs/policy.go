package jobs

import (
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// failureReason applies a podFailurePolicy to a failed pod, as batch/v1
// does: the first matching rule decides; with no match the failure counts.
// The reason is what the Failed entry records.
func failureReason(policy *batchv1alpha1.PodFailurePolicy, pod *corev1.Pod) string {
	if policy == nil {
		return batchv1alpha1.FailReasonCounted
	}
	for _, rule := range policy.Rules {
		if !ruleMatches(&rule, pod) {
			continue
		}
		switch rule.Action {
		case batchv1.PodFailurePolicyActionFailJob:
			return batchv1alpha1.FailReasonFailJob
		case batchv1.PodFailurePolicyActionFailIndex:
			return batchv1alpha1.FailReasonFailIndex
		case batchv1.PodFailurePolicyActionIgnore:
			return batchv1alpha1.FailReasonIgnored
		default:
			return batchv1alpha1.FailReasonCounted
		}
	}
	return batchv1alpha1.FailReasonCounted
}

func ruleMatches(rule *batchv1alpha1.PodFailurePolicyRule, pod *corev1.Pod) bool {
	if req := rule.OnExitCodes; req != nil {
		return exitCodesMatch(req, pod)
	}
	for _, pattern := range rule.OnPodConditions {
		status := pattern.Status
		if status == "" {
			status = corev1.ConditionTrue
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == pattern.Type && c.Status == status {
				return true
			}
		}
	}
	return false
}

// exitCodesMatch follows batch/v1: containers that exited 0 are left out;
// In matches when any other exit code is listed, NotIn when any is not.
func exitCodesMatch(req *batchv1alpha1.PodFailurePolicyOnExitCodesRequirement, pod *corev1.Pod) bool {
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if req.ContainerName != nil && *req.ContainerName != cs.Name {
			continue
		}
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		in := slices.Contains(req.Values, t.ExitCode)
		if in == (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) {
			return true
		}
	}
	return false
}
