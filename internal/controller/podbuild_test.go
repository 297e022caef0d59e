package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

func TestNewPod(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ns", UID: "uid-1"},
		Spec: batchv1alpha1.SafeJobSpec{
			CompletionMode: batchv1alpha1.IndexedCompletion,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Subdomain: "workers", Hostname: "ignored",
					InitContainers: []corev1.Container{{Name: "init"}},
					Containers:     []corev1.Container{{Name: "main", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}},
			},
		},
	}
	pod := newPod(sj, jobs.PodRef{Name: "train-3-1", Index: 3, Attempt: 1})
	wantLabels := map[string]string{"app": "x", batchv1alpha1.SafeJobNameLabel: "train",
		batchv1alpha1.CompletionIndexLabel: "3", batchv1alpha1.AttemptLabel: "1", batchv1alpha1.ControllerUIDLabel: "uid-1",
		batchv1alpha1.JobNameLabel: "train", batchv1alpha1.JobCompletionIndexAnnotation: "3"}
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("labels (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{batchv1alpha1.JobCompletionIndexAnnotation: "3"}, pod.Annotations); diff != "" {
		t.Errorf("annotations (-want,+got):\n%s", diff)
	}
	if pod.Spec.Hostname != "train-3" || pod.Spec.Subdomain != "workers" {
		t.Errorf("hostname %q, subdomain %q; want train-3 under the template's subdomain workers", pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	if diff := cmp.Diff([]string{batchv1alpha1.LedgerFinalizer}, pod.Finalizers); diff != "" {
		t.Errorf("finalizers (-want,+got):\n%s", diff)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != "uid-1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference %+v", ref)
	}
	wantEnv := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: batchv1alpha1.JobCompletionIndexEnv, Value: "3"}}
	if diff := cmp.Diff(wantEnv, pod.Spec.Containers[0].Env); diff != "" {
		t.Errorf("env (-want,+got):\n%s", diff)
	}
	if len(pod.Spec.InitContainers[0].Env) != 1 {
		t.Errorf("init container env %v", pod.Spec.InitContainers[0].Env)
	}
	if len(sj.Spec.Template.Spec.Containers[0].Env) != 1 || sj.Spec.Template.Labels[batchv1alpha1.AttemptLabel] != "" {
		t.Error("newPod modified the SafeJob's template")
	}
	checkNonIndexedAndLongNames(t, sj)
}

// checkNonIndexedAndLongNames: NonIndexed pods carry no index label,
// annotation, env or hostname; a long name's hostname stays a DNS label.
func checkNonIndexedAndLongNames(t *testing.T, sj *batchv1alpha1.SafeJob) {
	t.Helper()
	sj = sj.DeepCopy()
	sj.Spec.CompletionMode = batchv1alpha1.NonIndexedCompletion
	plain := newPod(sj, jobs.PodRef{Name: "train-0-0"})
	if _, ok := plain.Annotations[batchv1alpha1.JobCompletionIndexAnnotation]; ok || len(plain.Spec.Containers[0].Env) != 1 {
		t.Error("NonIndexed pod got the completion index annotation or env")
	}
	if _, ok := plain.Labels[batchv1alpha1.JobCompletionIndexAnnotation]; ok || plain.Spec.Hostname != "ignored" {
		t.Errorf("NonIndexed pod got the completion index label, or its hostname %q changed", plain.Spec.Hostname)
	}
	long := sj.DeepCopy()
	long.Name, long.Spec.CompletionMode = strings.Repeat("n", 100), batchv1alpha1.IndexedCompletion
	if h := newPod(long, jobs.PodRef{Name: "x", Index: 12345}).Spec.Hostname; len(h) > 63 || !strings.HasSuffix(h, "-12345") {
		t.Errorf("hostname of a long name %q: want at most 63 characters ending -12345", h)
	}
}

// TestPodSetInfoTopology: a pod set Kueue placed in a topology gets Kueue's
// topology scheduling gate (once, however often applied), and the
// unconstrained annotation when it asked for no topology, as Kueue's own
// integrations give their pods.
func TestPodSetInfoTopology(t *testing.T) {
	placed := func(req *kueue.PodSetTopologyRequest) *kueue.Workload {
		return &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Name: "wl"},
			Spec: kueue.WorkloadSpec{PodSets: []kueue.PodSet{{Name: mainPodSet, Count: 2, TopologyRequest: req}}},
			Status: kueue.WorkloadStatus{Admission: &kueue.Admission{PodSetAssignments: []kueue.PodSetAssignment{{
				Name: mainPodSet, TopologyAssignment: &kueue.TopologyAssignment{Levels: []string{"block"}}}}}}}
	}
	r := &SafeJobReconciler{}
	for name, c := range map[string]struct {
		wl            *kueue.Workload
		gated         bool
		unconstrained bool
	}{
		"required topology": {wl: placed(&kueue.PodSetTopologyRequest{Required: ptr.To("block")}), gated: true},
		"no topology asked": {wl: placed(nil), gated: true, unconstrained: true},
		"index label only":  {wl: placed(&kueue.PodSetTopologyRequest{PodIndexLabel: ptr.To("i")}), gated: true, unconstrained: true},
		"no topology placed": {wl: func() *kueue.Workload {
			w := placed(nil)
			w.Status.Admission.PodSetAssignments[0].TopologyAssignment = nil
			return w
		}()},
	} {
		t.Run(name, func(t *testing.T) {
			info, err := r.podSetInfo(context.Background(), c.wl)
			if err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{}
			info.apply(pod)
			info.apply(pod)
			var want []corev1.PodSchedulingGate
			if c.gated {
				want = []corev1.PodSchedulingGate{{Name: kueue.TopologySchedulingGate}}
			}
			if diff := cmp.Diff(want, pod.Spec.SchedulingGates); diff != "" {
				t.Errorf("scheduling gates (-want,+got):\n%s", diff)
			}
			if got := pod.Annotations[kueue.PodSetUnconstrainedTopologyAnnotation] == "true"; got != c.unconstrained {
				t.Errorf("unconstrained annotation %v, want %v", got, c.unconstrained)
			}
		})
	}
}
