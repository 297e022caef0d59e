// Package v1alpha1 contains API Schema definitions for the batch v1alpha1 API group.
// +kubebuilder:object:generate=true
// +groupName=batch.safejob.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is group version used to register these objects.
var GroupVersion = schema.GroupVersion{Group: "batch.safejob.dev", Version: "v1alpha1"}

// AddToScheme adds the types of this group-version to the given scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &SafeJob{}, &SafeJobList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
