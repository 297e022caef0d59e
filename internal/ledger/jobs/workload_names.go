package jobs

import (
	"crypto/sha1" //nolint:gosec // the Workload name hash of Kueue, not a security use
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// WorkloadNames are the names a SafeJob's Workload may have, in order of
// preference. The first is the one Kueue gives the Workload of a job,
// "safejob-<name>-<hash>", hash over kind, group, name and UID. The second,
// "safejob-<name>-<hash of the UID>", is used only when a Workload the
// SafeJob does not control holds the first.
func WorkloadNames(name string, uid types.UID) []string {
	prefix := func(suffix int) string {
		p := "safejob-" + name
		if len(p) > 253-1-suffix {
			p = p[:253-1-suffix]
		}
		return strings.ToLower(p)
	}
	// Kueue hashes "Kind\nGroup\nname\nuid".
	key := strings.Join([]string{"SafeJob", batchv1alpha1.GroupVersion.Group, name, string(uid)}, "\n")
	kueueHash := sha1.Sum([]byte(key)) //nolint:gosec // Kueue's naming scheme
	uidHash := sha256.Sum256([]byte(uid))
	return []string{
		prefix(5) + "-" + hex.EncodeToString(kueueHash[:])[:5],
		prefix(10) + "-" + hex.EncodeToString(uidHash[:])[:10],
	}
}

// OwnWorkload picks the SafeJob's Workload among listed ones: only a
// Workload its UID controls counts, named as it names its Workloads (names,
// in order of preference). A Workload that holds a reservation is kept over
// one that does not. The others it controls are returned to be dropped;
// Workloads it does not control are neither: they are never touched.
func OwnWorkload(uid types.UID, names []string, list []*kueue.Workload) (own *kueue.Workload, drop []*kueue.Workload) {
	rank := func(wl *kueue.Workload) int {
		r := slices.Index(names, wl.Name)
		if wl.Status.Admission == nil {
			r += len(names)
		}
		return r
	}
	for _, wl := range list {
		if !controlledBy(wl, uid) {
			continue
		}
		switch {
		case !slices.Contains(names, wl.Name):
			drop = append(drop, wl)
		case own == nil || rank(wl) < rank(own):
			if own != nil {
				drop = append(drop, own)
			}
			own = wl
		default:
			drop = append(drop, wl)
		}
	}
	return own, drop
}

// controlledBy reports whether the object of uid is wl's controller.
func controlledBy(wl *kueue.Workload, uid types.UID) bool {
	ref := metav1.GetControllerOfNoCopy(wl)
	return uid != "" && ref != nil && ref.UID == uid
}
