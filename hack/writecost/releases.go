package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	podrelease "github.com/safejob/safejob/internal/release"
)

// release is a way to remove the ledger finalizer of a pod, and what it
// cost in each round: kube-apiserver's and etcd's CPU ms per release.
type release struct {
	name, label string
	patch       func(pod *corev1.Pod) client.Patch
	bytes       int // the pod's JSON size
	samples
}

// releaseKinds are the two patches that can remove the ledger finalizer
// without clobbering another's edit of the list: a JSON patch that tests
// the entry at its index before removing it, and the strategic merge patch
// the operator sends, which deletes the value wherever it is (as the Job
// controller does) from the pod of its UID.
func releaseKinds() []release {
	return []release{
		{name: "json", label: "pod release, JSON patch", patch: func(pod *corev1.Pod) client.Patch {
			k := slices.Index(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
			return client.RawPatch(types.JSONPatchType, fmt.Appendf(nil,
				`[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`,
				k, batchv1alpha1.LedgerFinalizer, k))
		}},
		{name: "smp", label: "pod release, merge patch", patch: func(pod *corev1.Pod) client.Patch {
			return client.RawPatch(types.StrategicMergePatchType, podrelease.PodPatch(pod.UID))
		}},
	}
}

// measure creates n finished pods that hold the ledger finalizer (not
// measured), releases each (measured) and deletes them again.
func (rk *release) measure(ctx context.Context, c client.Client, pids pids, n, round int) error {
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod, err := finishedPod(ctx, c, fmt.Sprintf("%s-%d-%d", rk.name, round, i), rk.label)
		if err != nil {
			return err
		}
		pods = append(pods, pod)
	}
	if raw, err := json.Marshal(pods[0]); err == nil {
		rk.bytes = len(raw)
	}
	err := rk.sample(pids, n, func() error {
		for _, pod := range pods {
			if err := c.Patch(ctx, pod, rk.patch(pod)); err != nil {
				return fmt.Errorf("%s of %s: %w", rk.label, pod.Name, err)
			}
			if slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) || !slices.Contains(pod.Finalizers, otherFinalizer) {
				return fmt.Errorf("%s of %s left finalizers %v", rk.label, pod.Name, pod.Finalizers)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	done := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	for _, pod := range pods {
		if err := c.Patch(ctx, pod, done); err != nil {
			return fmt.Errorf("releasing %s: %w", pod.Name, err)
		}
		if err := c.Delete(ctx, pod); err != nil {
			return fmt.Errorf("deleting %s: %w", pod.Name, err)
		}
	}
	return nil
}

// otherFinalizer is a finalizer of someone else's, listed before the
// ledger's, that every release must leave in place.
const otherFinalizer = "example.com/keep"

// finishedPod creates a pod like one the operator creates for a W3 SafeJob,
// holding the ledger finalizer, and gives it the status of a pod that
// succeeded.
func finishedPod(ctx context.Context, c client.Client, name, label string) (*corev1.Pod, error) {
	tpl := template()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + name, Namespace: metav1.NamespaceDefault,
		Labels:      map[string]string{batchv1alpha1.SafeJobNameLabel: "sj", batchv1alpha1.CompletionIndexLabel: "3"},
		Annotations: tpl.Annotations, Finalizers: []string{otherFinalizer, batchv1alpha1.LedgerFinalizer},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: "sj",
			UID: "0e7d4c1a-5f2b-4b8e-9d3c-2a1f6e8b7c90", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: tpl.Spec}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("%s: creating pod: %w", label, err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, StartTime: &now, HostIP: "10.0.0.1", PodIP: "10.0.0.2",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted",
			LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Image: "busybox", ImageID: "docker://busybox", Ready: false,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: now, FinishedAt: now}}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("%s: writing pod status: %w", label, err)
	}
	return pod, nil
}
