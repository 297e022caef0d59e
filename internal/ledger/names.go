package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// maxPodNameLen keeps pod names usable as hostnames.
const maxPodNameLen = 63

// PodName is the deterministic name of the pod for one attempt of one index:
// "<safejob>-<index>-<attempt>", with the SafeJob's name shortened and a hash
// of it added when the result would be too long. A repeated create of the
// same launch collides with AlreadyExists instead of duplicating.
func PodName(safeJob string, index, attempt int32) string {
	suffix := fmt.Sprintf("-%d-%d", index, attempt)
	if len(safeJob)+len(suffix) <= maxPodNameLen {
		return safeJob + suffix
	}
	return ShortName(safeJob, maxPodNameLen-len(suffix)) + suffix
}

// ShortName returns name when it fits in n characters, otherwise a prefix of
// it followed by "-" and a hash of the whole name, n characters in all.
func ShortName(name string, n int) string {
	if len(name) <= n {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:])[:8]
	prefix := name[:n-len(h)-1]
	for len(prefix) > 0 && !isAlnum(prefix[len(prefix)-1]) {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + "-" + h
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
