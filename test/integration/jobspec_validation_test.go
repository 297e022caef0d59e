package integration

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/batchjob"
)

// TestJobSpecValidationAsBatchV1 sends each Job spec, as a batch/v1 Job and
// as a SafeJob with the same fields, to the same API server (dry run), and
// checks that the SafeJob is refused exactly when the Job is, naming every
// field the Job's refusal names. The few specs SafeJob refuses although
// batch/v1 accepts them are listed with the reason (the README's field
// table says the same); the podFailurePolicy cases are in
// TestPodFailurePolicyValidationAsBatchV1.
func TestJobSpecValidationAsBatchV1(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	indexed := func(completions int32) func(*batchv1.JobSpec) {
		return func(s *batchv1.JobSpec) {
			s.CompletionMode, s.Completions = ptr.To(batchv1.IndexedCompletion), ptr.To(completions)
		}
	}
	with := func(fs ...func(*batchv1.JobSpec)) []func(*batchv1.JobSpec) { return fs }
	cases := map[string]struct {
		mutate       []func(*batchv1.JobSpec)
		wantAccepted bool
		// stricter: batch/v1 accepts the spec, SafeJob refuses it naming
		// this field, for the reason the README gives.
		stricter string
		// atList: where batch/v1 names one element of a list, a CRD rule
		// that needs a field outside the element can only name the list.
		atList bool
		// atPodCreate: batch/v1 validates the whole pod template; the CRD
		// checks its schema, and the rest of pod validation refuses the
		// first pod create (the SafeJob's PodCreateRefused condition).
		atPodCreate bool
	}{
		"the smallest values": {mutate: with(func(s *batchv1.JobSpec) {
			s.Parallelism, s.Completions, s.BackoffLimit = ptr.To[int32](0), ptr.To[int32](0), ptr.To[int32](0)
			s.ActiveDeadlineSeconds, s.TTLSecondsAfterFinished = nil, ptr.To[int32](0)
		}), wantAccepted: true},
		"Indexed with every per-index field": {mutate: with(indexed(4), func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex, s.MaxFailedIndexes = ptr.To[int32](0), ptr.To[int32](4)
			s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](4)}}}
			s.PodReplacementPolicy = ptr.To(batchv1.Failed)
			s.ManagedBy = ptr.To("example.com/controller")
		}), wantAccepted: true},
		"negative parallelism":             {mutate: with(func(s *batchv1.JobSpec) { s.Parallelism = ptr.To[int32](-1) })},
		"negative completions":             {mutate: with(func(s *batchv1.JobSpec) { s.Completions = ptr.To[int32](-1) })},
		"negative activeDeadlineSeconds":   {mutate: with(func(s *batchv1.JobSpec) { s.ActiveDeadlineSeconds = ptr.To[int64](-1) })},
		"negative backoffLimit":            {mutate: with(func(s *batchv1.JobSpec) { s.BackoffLimit = ptr.To[int32](-1) })},
		"negative ttlSecondsAfterFinished": {mutate: with(func(s *batchv1.JobSpec) { s.TTLSecondsAfterFinished = ptr.To[int32](-1) })},
		"negative backoffLimitPerIndex": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex = ptr.To[int32](-1)
		})},
		"negative maxFailedIndexes": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex, s.MaxFailedIndexes = ptr.To[int32](1), ptr.To[int32](-1)
		})},
		"maxFailedIndexes without backoffLimitPerIndex": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.MaxFailedIndexes = ptr.To[int32](1)
		})},
		"maxFailedIndexes above completions": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.BackoffLimitPerIndex, s.MaxFailedIndexes = ptr.To[int32](1), ptr.To[int32](3)
		})},
		"backoffLimitPerIndex without Indexed": {mutate: with(func(s *batchv1.JobSpec) { s.BackoffLimitPerIndex = ptr.To[int32](1) })},
		"unknown completionMode": {mutate: with(func(s *batchv1.JobSpec) {
			s.CompletionMode = ptr.To[batchv1.CompletionMode]("Sometimes")
		})},
		"Indexed without completions": {mutate: with(indexed(1), func(s *batchv1.JobSpec) {
			s.Completions, s.Parallelism = nil, ptr.To[int32](2)
		})},
		"Indexed without completions and parallelism": {mutate: with(indexed(1), func(s *batchv1.JobSpec) { s.Completions = nil }),
			wantAccepted: true},
		"Indexed with 0 completions": {mutate: with(indexed(0)), wantAccepted: true},
		"managedBy not a path":       {mutate: with(func(s *batchv1.JobSpec) { s.ManagedBy = ptr.To("controller") })},
		"managedBy too long": {mutate: with(func(s *batchv1.JobSpec) {
			s.ManagedBy = ptr.To("example.com/" + strings.Repeat("c", 52))
		})},
		"successPolicy without Indexed": {mutate: with(func(s *batchv1.JobSpec) {
			s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](1)}}}
		})},
		"successPolicy without rules": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.SuccessPolicy = &batchv1.SuccessPolicy{}
		})},
		"successPolicy rule with neither field": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{}}}
		})},
		"succeededCount above completions": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](3)}}}
		}), atList: true},
		"negative succeededCount": {mutate: with(indexed(2), func(s *batchv1.JobSpec) {
			s.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](-1)}}}
		})},
		"unknown podReplacementPolicy": {mutate: with(func(s *batchv1.JobSpec) {
			s.PodReplacementPolicy = ptr.To[batchv1.PodReplacementPolicy]("Sometimes")
		})},
		"restartPolicy Always": {mutate: with(func(s *batchv1.JobSpec) { s.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways })},
		"restartPolicy unknown": {mutate: with(func(s *batchv1.JobSpec) {
			s.Template.Spec.RestartPolicy = "Sometimes"
		})},
		"no containers": {mutate: with(func(s *batchv1.JobSpec) { s.Template.Spec.Containers = nil })},
		"container without a name": {mutate: with(func(s *batchv1.JobSpec) {
			s.Template.Spec.Containers[0].Name = ""
		}), atPodCreate: true},
		"podReplacementPolicy TerminatingOrFailed": {mutate: with(func(s *batchv1.JobSpec) {
			s.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}), stricter: "spec.podReplacementPolicy"},
		"parallelism above 2,000": {mutate: with(func(s *batchv1.JobSpec) { s.Parallelism = ptr.To[int32](2001) }),
			stricter: "spec.parallelism"},
		"completions above 100,000": {mutate: with(func(s *batchv1.JobSpec) { s.Completions = ptr.To[int32](100001) }),
			stricter: "spec.completions"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}
			for _, m := range tc.mutate {
				m(&spec)
			}
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "spec", Namespace: ns}, Spec: spec}
			sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "spec", Namespace: ns}}
			if err := batchjob.ConvertSpec(spec, &sj.Spec, "spec"); err != nil {
				t.Fatal(err)
			}
			jobErr := k8s.Create(context.Background(), job, client.DryRunAll)
			sjErr := k8s.Create(context.Background(), sj, client.DryRunAll)
			if tc.stricter != "" {
				if jobErr != nil {
					t.Fatalf("the case says batch/v1 accepts it, but: %v", jobErr)
				}
				if !namesField(sjErr, tc.stricter, false) {
					t.Fatalf("the SafeJob's refusal should name %s: %v", tc.stricter, sjErr)
				}
				return
			}
			if tc.atPodCreate {
				if jobErr == nil || sjErr != nil {
					t.Fatalf("the case says batch/v1 refuses it and the SafeJob's schema accepts it; Job: %v, SafeJob: %v", jobErr, sjErr)
				}
				return
			}
			checkSameRefusal(t, jobErr, sjErr, tc.wantAccepted, tc.atList)
		})
	}
}
