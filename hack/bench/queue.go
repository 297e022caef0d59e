package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// A queued workload (W6) goes through one Kueue LocalQueue whose
// ClusterQueue admits Quota pods at a time: each pod asks for podCPU, and
// the ClusterQueue's CPU quota is Quota of them.
const (
	localQueue = "lq"
	podCPU     = "10m"
)

// setUpQueue creates the ResourceFlavor, ClusterQueue and LocalQueue of a
// queued workload and waits until Kueue reports the ClusterQueue active.
func setUpQueue(ctx context.Context, cl client.Client, w workload) error {
	quota := resource.MustParse(podCPU)
	quota.Mul(int64(w.Quota))
	objs := []client.Object{
		&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		&kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "cq"}, Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU},
				Flavors: []kueue.FlavorQuotas{{Name: "default", Resources: []kueue.ResourceQuota{{
					Name: corev1.ResourceCPU, NominalQuota: quota}}}}}},
		}},
		&kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: localQueue, Namespace: ns},
			Spec: kueue.LocalQueueSpec{ClusterQueue: "cq"}},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	for {
		cq := &kueue.ClusterQueue{}
		if err := cl.Get(ctx, client.ObjectKey{Name: "cq"}, cq); err != nil {
			return fmt.Errorf("reading the ClusterQueue: %w", err)
		}
		if meta.IsStatusConditionTrue(cq.Status.Conditions, kueue.ClusterQueueActive) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the ClusterQueue is not active: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond): // polling interval of the set-up
		}
	}
}

// queueJob puts a job of a queued workload in the LocalQueue, its pods
// asking for podCPU each.
func queueJob(obj client.Object, tmpl *corev1.PodTemplateSpec) {
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["kueue.x-k8s.io/queue-name"] = localQueue
	obj.SetLabels(labels)
	for i := range tmpl.Spec.Containers {
		tmpl.Spec.Containers[i].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(podCPU)}
	}
}
