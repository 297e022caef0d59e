package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// newPod builds the pod of one launch from the SafeJob's template.
func newPod(sj *batchv1alpha1.SafeJob, ref jobs.PodRef) *corev1.Pod {
	tmpl := sj.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ref.Name,
			Namespace:   sj.Namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
			Finalizers:  []string{batchv1alpha1.LedgerFinalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj,
				batchv1alpha1.GroupVersion.WithKind("SafeJob"))},
		},
		Spec: tmpl.Spec,
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	index := strconv.Itoa(int(ref.Index))
	pod.Labels[batchv1alpha1.SafeJobNameLabel] = nameLabel(sj.Name)
	pod.Labels[batchv1alpha1.JobNameLabel] = nameLabel(sj.Name)
	pod.Labels[batchv1alpha1.CompletionIndexLabel] = index
	pod.Labels[batchv1alpha1.AttemptLabel] = strconv.Itoa(int(ref.Attempt))
	pod.Labels[batchv1alpha1.ControllerUIDLabel] = string(sj.UID)
	if sj.Spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[batchv1alpha1.JobCompletionIndexAnnotation] = index
		pod.Labels[batchv1alpha1.JobCompletionIndexAnnotation] = index
		// As batch/v1: a stable hostname per index, so that a headless
		// Service named by the template's subdomain gives each index a DNS
		// name (<name>-<index>.<subdomain>).
		pod.Spec.Hostname = ledger.ShortName(sj.Name, ledger.MaxNameLen-len(index)-1) + "-" + index
		env := corev1.EnvVar{Name: batchv1alpha1.JobCompletionIndexEnv, Value: index}
		for i := range pod.Spec.InitContainers {
			pod.Spec.InitContainers[i].Env = append(pod.Spec.InitContainers[i].Env, env)
		}
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i].Env = append(pod.Spec.Containers[i].Env, env)
		}
	}
	return pod
}

// nameLabel is the value of a pod's SafeJob name label: the SafeJob's name,
// shortened to a label value's length. The pod cache selects on it.
func nameLabel(safeJob string) string { return ledger.ShortName(safeJob, ledger.MaxNameLen) }

// podSetInfo is what an admission adds to the pods of the main pod set.
type podSetInfo struct {
	labels, annotations, nodeSelector map[string]string
	tolerations                       []corev1.Toleration
	// schedulingGates holds Kueue's topology gate when Kueue placed the pod
	// set in a topology: Kueue's ungater removes it, pod by pod, setting
	// the node selector of the domain it assigned.
	schedulingGates []corev1.PodSchedulingGate
}

// podSetInfo builds what the admission adds to pods: the flavors' node
// labels and tolerations, the admission checks' pod set updates, the pod
// set label and the Workload annotation, and, when Kueue assigned a
// topology, its scheduling gate (as Kueue's podset.FromAssignment does).
func (r *SafeJobReconciler) podSetInfo(ctx context.Context, wl *kueue.Workload) (*podSetInfo, error) {
	info := &podSetInfo{
		labels:       map[string]string{PodSetLabel: string(mainPodSet)},
		annotations:  map[string]string{WorkloadAnnotation: wl.Name},
		nodeSelector: map[string]string{},
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if psa.Name != mainPodSet {
			continue
		}
		if psa.TopologyAssignment != nil {
			info.schedulingGates = append(info.schedulingGates, corev1.PodSchedulingGate{Name: kueue.TopologySchedulingGate})
			if ps := podSet(wl); ps == nil || ps.TopologyRequest == nil || (ps.TopologyRequest.Required == nil &&
				ps.TopologyRequest.Preferred == nil && ps.TopologyRequest.Unconstrained == nil) {
				info.annotations[kueue.PodSetUnconstrainedTopologyAnnotation] = "true"
			}
		}
		flavors := slices.Sorted(maps.Values(psa.Flavors))
		for _, name := range slices.Compact(flavors) {
			rf := &kueue.ResourceFlavor{}
			if err := r.Client.Get(ctx, client.ObjectKey{Name: string(name)}, rf); err != nil {
				return nil, fmt.Errorf("getting ResourceFlavor %s: %w", name, err)
			}
			maps.Copy(info.nodeSelector, rf.Spec.NodeLabels)
			info.tolerations = append(info.tolerations, rf.Spec.Tolerations...)
		}
	}
	for _, check := range wl.Status.AdmissionChecks {
		for _, u := range check.PodSetUpdates {
			if u.Name != mainPodSet {
				continue
			}
			maps.Copy(info.labels, u.Labels)
			maps.Copy(info.annotations, u.Annotations)
			maps.Copy(info.nodeSelector, u.NodeSelector)
			info.tolerations = append(info.tolerations, u.Tolerations...)
		}
	}
	return info, nil
}

// apply adds the admission to a pod about to be created.
func (info *podSetInfo) apply(pod *corev1.Pod) {
	if info == nil {
		return
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	maps.Copy(pod.Labels, info.labels)
	maps.Copy(pod.Annotations, info.annotations)
	if len(info.nodeSelector) > 0 {
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		maps.Copy(pod.Spec.NodeSelector, info.nodeSelector)
	}
	for _, t := range info.tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(o corev1.Toleration) bool { return o.MatchToleration(&t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	for _, g := range info.schedulingGates {
		if !slices.Contains(pod.Spec.SchedulingGates, g) {
			pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, g)
		}
	}
}

// podSet is the Workload's main pod set, nil if it has none.
func podSet(wl *kueue.Workload) *kueue.PodSet {
	for i := range wl.Spec.PodSets {
		if wl.Spec.PodSets[i].Name == mainPodSet {
			return &wl.Spec.PodSets[i]
		}
	}
	return nil
}
