package jobs

import (
	"cmp"
	"fmt"
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

// failJobMessage is batch/v1's message for a failed pod whose first
// matching podFailurePolicy rule fails the Job: the container, its exit code
// and the rule's index, or the pod condition that matched. "" when no rule
// with the FailJob action is the first to match.
func failJobMessage(policy *batchv1alpha1.PodFailurePolicy, pod *corev1.Pod) string {
	if policy == nil {
		return ""
	}
	for k, rule := range policy.Rules {
		if !ruleMatches(&rule, pod) {
			continue
		}
		if rule.Action != batchv1.PodFailurePolicyActionFailJob {
			return ""
		}
		if rule.OnExitCodes != nil {
			cs := matchingContainer(rule.OnExitCodes, pod)
			return fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d",
				cs.Name, pod.Namespace, pod.Name, cs.State.Terminated.ExitCode, rule.Action, k)
		}
		return fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d",
			pod.Namespace, pod.Name, matchingCondition(rule.OnPodConditions, pod), rule.Action, k)
	}
	return ""
}

// matchingContainer is the container status an exit-code rule matched,
// looked for as batch/v1 looks: the containers, then the init containers.
func matchingContainer(req *batchv1alpha1.PodFailurePolicyOnExitCodesRequirement, pod *corev1.Pod) *corev1.ContainerStatus {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for k := range statuses {
			if containerMatches(req, &statuses[k]) {
				return &statuses[k]
			}
		}
	}
	return nil
}

// matchingCondition is the type of the pod condition a condition rule
// matched.
func matchingCondition(patterns []batchv1alpha1.PodFailurePolicyOnPodConditionsPattern, pod *corev1.Pod) corev1.PodConditionType {
	for _, c := range pod.Status.Conditions {
		for _, pattern := range patterns {
			if c.Type == pattern.Type && c.Status == cmp.Or(pattern.Status, corev1.ConditionTrue) {
				return c.Type
			}
		}
	}
	return ""
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
	return matchingContainer(req, pod) != nil
}

// containerMatches reports whether one container's status matches an
// exit-code requirement.
func containerMatches(req *batchv1alpha1.PodFailurePolicyOnExitCodesRequirement, cs *corev1.ContainerStatus) bool {
	if req.ContainerName != nil && *req.ContainerName != cs.Name {
		return false
	}
	t := cs.State.Terminated
	if t == nil || t.ExitCode == 0 {
		return false
	}
	return slices.Contains(req.Values, t.ExitCode) == (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn)
}
