package jobs

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// completionIndexLabel is the label batch/v1 and SafeJob put on the pods of
// an Indexed job: Kueue ranks them by it when it places them in a topology.
const completionIndexLabel = "batch.kubernetes.io/job-completion-index"

// TopologyRequest is the topology the pod set asks Kueue's topology-aware
// scheduling for, read as Kueue reads a batch/v1 Job's: the annotations
// kueue.x-k8s.io/podset-required-topology, -preferred-topology or
// -unconstrained-topology on the pod template, and, for Indexed pods, the
// completion index label to rank them by. nil when none is set (Kueue may
// still place the pods, as it does a Job's, when the flavor has a topology).
func TopologyRequest(meta *metav1.ObjectMeta, mode batchv1alpha1.CompletionMode) *kueue.PodSetTopologyRequest {
	req := &kueue.PodSetTopologyRequest{}
	if v, ok := meta.Annotations[kueue.PodSetRequiredTopologyAnnotation]; ok {
		req.Required = &v
	} else if v, ok := meta.Annotations[kueue.PodSetPreferredTopologyAnnotation]; ok {
		req.Preferred = &v
	} else if v, ok := meta.Annotations[kueue.PodSetUnconstrainedTopologyAnnotation]; ok {
		if b, err := strconv.ParseBool(v); err == nil {
			req.Unconstrained = &b
		}
	}
	if mode == batchv1alpha1.IndexedCompletion {
		label := completionIndexLabel
		req.PodIndexLabel = &label
	}
	if req.Required == nil && req.Preferred == nil && req.Unconstrained == nil && req.PodIndexLabel == nil {
		return nil
	}
	return req
}
