package plugin

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// TestWorkloadsServed: Workloads count as served only where the API
// server lists them under kueue.x-k8s.io/v1beta2; another version, a
// version without them, or no Kueue at all, is not an error.
func TestWorkloadsServed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		want      bool
	}{
		{"no Kueue", nil, false},
		{"v1beta1 only", []*metav1.APIResourceList{{GroupVersion: "kueue.x-k8s.io/v1beta1",
			APIResources: []metav1.APIResource{{Name: "workloads", Kind: "Workload"}}}}, false},
		{"v1beta2 without Workloads", []*metav1.APIResourceList{{GroupVersion: "kueue.x-k8s.io/v1beta2",
			APIResources: []metav1.APIResource{{Name: "clusterqueues", Kind: "ClusterQueue"}}}}, false},
		{"v1beta2", []*metav1.APIResourceList{{GroupVersion: "kueue.x-k8s.io/v1beta2",
			APIResources: []metav1.APIResource{{Name: "clusterqueues", Kind: "ClusterQueue"}, {Name: "workloads", Kind: "Workload"}}}}, true},
	} {
		d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
		got, err := WorkloadsServed(d)
		if err != nil || got != tc.want {
			t.Errorf("%s: WorkloadsServed = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
