package ledger

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCompletions is the largest spec.completions the API accepts: no index
// of a valid ledger reaches it, so an index set is never larger.
const MaxCompletions = 100000

// IndexSet is a set of completion indexes.
type IndexSet map[int32]struct{}

// Has reports whether i is in the set.
func (s IndexSet) Has(i int32) bool {
	_, ok := s[i]
	return ok
}

// Add puts i in the set.
func (s IndexSet) Add(i int32) { s[i] = struct{}{} }

// String formats the set as sorted intervals, e.g. "0-3,7".
func (s IndexSet) String() string {
	if len(s) == 0 {
		return ""
	}
	idx := make([]int32, 0, len(s))
	for i := range s {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	var b strings.Builder
	for k := 0; k < len(idx); {
		start, end := idx[k], idx[k]
		for k+1 < len(idx) && idx[k+1] == end+1 {
			k++
			end = idx[k]
		}
		k++
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(start)))
		if end != start {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(end)))
		}
	}
	return b.String()
}

// ParseIndexSet reads an interval string such as "0-3,7". Intervals must be
// ascending and disjoint, as String writes them.
func ParseIndexSet(s string) (IndexSet, error) {
	set := IndexSet{}
	if s == "" {
		return set, nil
	}
	last := int64(-1)
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 32)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad index %q in %q", lo, s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 32); err != nil || b < a {
				return nil, fmt.Errorf("bad interval %q in %q", part, s)
			}
		}
		if a <= last {
			return nil, fmt.Errorf("intervals not ascending at %q in %q", part, s)
		}
		if b >= MaxCompletions {
			return nil, fmt.Errorf("index %d in %q is beyond the largest completions (%d)", b, s, MaxCompletions)
		}
		for i := a; i <= b; i++ {
			set.Add(int32(i))
		}
		last = b
	}
	return set, nil
}
