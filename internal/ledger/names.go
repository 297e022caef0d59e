package ledger

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxNameLen keeps the names of pods and runs usable as hostnames and
// label values.
const MaxNameLen = 63

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
