// Package release holds what every remover of SafeJob's ledger finalizer
// sends and reads, the operator and the kubectl plugin alike: the patch
// that removes it from one pod, bound to that pod's UID, and how the API
// server refuses that patch for a pod of another UID.
package release

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// PodPatch is the strategic merge patch that deletes the ledger finalizer
// from the list of the pod with this UID wherever it is, and changes
// nothing else. The API server applies it to the decoded pod, where it
// applies a JSON patch to the pod encoded as JSON and decodes the result;
// it refuses it, as a change of an immutable field, for a pod of another
// UID.
func PodPatch(uid types.UID) []byte {
	return fmt.Appendf(nil, `{"metadata":{"uid":%q,"$deleteFromPrimitiveList/finalizers":[%q]}}`, uid, batchv1alpha1.LedgerFinalizer)
}

// UIDRefused reports whether the API server refused a patch because the
// UID it carries is not the object's: the object of that name is another.
func UIDRefused(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
