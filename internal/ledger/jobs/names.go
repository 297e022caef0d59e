package jobs

import (
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
