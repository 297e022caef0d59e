package jobs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TestTopologyRequest: the pod template's topology annotations, as Kueue
// reads a batch/v1 Job's.
func TestTopologyRequest(t *testing.T) {
	index := ptr.To(completionIndexLabel)
	cases := map[string]struct {
		annotations map[string]string
		mode        batchv1alpha1.CompletionMode
		want        *kueue.PodSetTopologyRequest
	}{
		"none":               {},
		"none, Indexed":      {mode: batchv1alpha1.IndexedCompletion, want: &kueue.PodSetTopologyRequest{PodIndexLabel: index}},
		"required":           {annotations: map[string]string{kueue.PodSetRequiredTopologyAnnotation: "block"}, want: &kueue.PodSetTopologyRequest{Required: ptr.To("block")}},
		"preferred, Indexed": {annotations: map[string]string{kueue.PodSetPreferredTopologyAnnotation: "rack"}, mode: batchv1alpha1.IndexedCompletion, want: &kueue.PodSetTopologyRequest{Preferred: ptr.To("rack"), PodIndexLabel: index}},
		"required wins": {annotations: map[string]string{kueue.PodSetRequiredTopologyAnnotation: "block", kueue.PodSetPreferredTopologyAnnotation: "rack"},
			want: &kueue.PodSetTopologyRequest{Required: ptr.To("block")}},
		"unconstrained":         {annotations: map[string]string{kueue.PodSetUnconstrainedTopologyAnnotation: "true"}, want: &kueue.PodSetTopologyRequest{Unconstrained: ptr.To(true)}},
		"unconstrained garbled": {annotations: map[string]string{kueue.PodSetUnconstrainedTopologyAnnotation: "yes please"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := TopologyRequest(&metav1.ObjectMeta{Annotations: c.annotations}, c.mode)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}
