package jobs

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/types"

	"github.com/safejob/safejob/internal/ledger"
)

// PodName is the deterministic name of the pod for one attempt of one index:
// "<safejob>-<index>-<attempt>", with the SafeJob's name shortened and a hash
// of it added when the result would be too long. A repeated create of the
// same launch collides with AlreadyExists instead of duplicating.
func PodName(safeJob string, index, attempt int32) string {
	suffix := podSuffix(index, attempt)
	if len(safeJob)+len(suffix) <= ledger.MaxNameLen {
		return safeJob + suffix
	}
	return ledger.ShortName(safeJob, ledger.MaxNameLen-len(suffix)) + suffix
}

// PodNameApart is the name of a launch's pod when PodName's is held by a
// pod of an earlier SafeJob of the same name (deleted and created again
// while its pods linger): "<safejob>-<hash of uid>-<index>-<attempt>",
// shortened as PodName shortens. It is as deterministic as PodName for one
// SafeJob, ends as PodName does (the launch's suffix), and is another for
// every UID.
func PodNameApart(safeJob string, uid types.UID, index, attempt int32) string {
	sum := sha256.Sum256([]byte(uid))
	return PodName(safeJob+"-"+hex.EncodeToString(sum[:])[:5], index, attempt)
}
