package ledger

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
)

// MaxCompletions is the largest spec.completions the API accepts: no index
// of a valid ledger reaches it, so an index set is never larger.
const MaxCompletions = 100000

// IndexSet is a set of completion indexes, kept as the sorted, disjoint and
// non-adjacent intervals the status writes: its size follows the number of
// intervals, never the number of indexes, so a SafeJob's cost per
// reconcile does not grow with its completions (make bench-ledger).
type IndexSet struct {
	runs []interval
	n    int
}

// interval holds the indexes lo to hi, both included.
type interval struct{ lo, hi int32 }

// Len is the number of indexes in the set.
func (s *IndexSet) Len() int { return s.n }

// find returns the position of the first interval that ends at or after i.
func (s *IndexSet) find(i int32) int {
	k, _ := slices.BinarySearchFunc(s.runs, i, func(r interval, i int32) int {
		switch {
		case r.hi < i:
			return -1
		case r.lo > i:
			return 1
		}
		return 0
	})
	return k
}

// Has reports whether i is in the set.
func (s *IndexSet) Has(i int32) bool {
	k := s.find(i)
	return k < len(s.runs) && s.runs[k].lo <= i
}

// Add puts i in the set.
func (s *IndexSet) Add(i int32) {
	k := s.find(i)
	if k < len(s.runs) && s.runs[k].lo <= i {
		return
	}
	s.n++
	joinsPrev := k > 0 && s.runs[k-1].hi == i-1
	joinsNext := k < len(s.runs) && s.runs[k].lo == i+1
	switch {
	case joinsPrev && joinsNext:
		s.runs[k-1].hi = s.runs[k].hi
		s.runs = slices.Delete(s.runs, k, k+1)
	case joinsPrev:
		s.runs[k-1].hi = i
	case joinsNext:
		s.runs[k].lo = i
	default:
		s.runs = slices.Insert(s.runs, k, interval{i, i})
	}
}

// NextAbsent returns the smallest index at or after i that is not in the set.
func (s *IndexSet) NextAbsent(i int32) int32 {
	if k := s.find(i); k < len(s.runs) && s.runs[k].lo <= i {
		return s.runs[k].hi + 1
	}
	return i
}

// Clone returns a copy of the set that shares nothing with it.
func (s *IndexSet) Clone() IndexSet { return IndexSet{runs: slices.Clone(s.runs), n: s.n} }

// Max returns the largest index in the set; ok is false when it is empty.
func (s *IndexSet) Max() (i int32, ok bool) {
	if len(s.runs) == 0 {
		return 0, false
	}
	return s.runs[len(s.runs)-1].hi, true
}

// All yields the indexes of the set in ascending order.
func (s *IndexSet) All() iter.Seq[int32] {
	return func(yield func(int32) bool) {
		for _, r := range s.runs {
			for i := r.lo; i <= r.hi; i++ {
				if !yield(i) {
					return
				}
			}
		}
	}
}

// Missing returns an index of o that is not in s; ok is false when s holds
// every index of o.
func (s *IndexSet) Missing(o *IndexSet) (i int32, ok bool) {
	for _, r := range o.runs {
		k := s.find(r.lo)
		if k == len(s.runs) || s.runs[k].lo > r.lo {
			return r.lo, true
		}
		if s.runs[k].hi < r.hi {
			return s.runs[k].hi + 1, true
		}
	}
	return 0, false
}

// Common returns an index in both s and o; ok is false when they are
// disjoint.
func (s *IndexSet) Common(o *IndexSet) (i int32, ok bool) {
	a, b := s.runs, o.runs
	for len(a) > 0 && len(b) > 0 {
		switch {
		case a[0].hi < b[0].lo:
			a = a[1:]
		case b[0].hi < a[0].lo:
			b = b[1:]
		default:
			return max(a[0].lo, b[0].lo), true
		}
	}
	return 0, false
}

// CountCommon counts the indexes below limit that are in both s and o,
// walking intervals, never indexes.
func (s *IndexSet) CountCommon(o *IndexSet, limit int32) int32 {
	var n int32
	a, b := s.runs, o.runs
	for len(a) > 0 && len(b) > 0 {
		lo, hi := max(a[0].lo, b[0].lo), min(a[0].hi, b[0].hi, limit-1)
		if lo <= hi {
			n += hi - lo + 1
		}
		if a[0].hi < b[0].hi {
			a = a[1:]
		} else {
			b = b[1:]
		}
	}
	return n
}

// CountBelow counts the indexes of s below limit.
func (s *IndexSet) CountBelow(limit int32) int32 {
	var n int32
	for _, r := range s.runs {
		if r.lo < limit {
			n += min(r.hi, limit-1) - r.lo + 1
		}
	}
	return n
}

// Below returns the indexes of s below limit, as a new set.
func (s *IndexSet) Below(limit int32) IndexSet {
	var out IndexSet
	for _, r := range s.runs {
		if r.lo >= limit {
			break
		}
		r.hi = min(r.hi, limit-1)
		out.runs = append(out.runs, r)
		out.n += int(r.hi - r.lo + 1)
	}
	return out
}

// String formats the set exactly as batch/v1 writes completedIndexes and
// failedIndexes: sorted intervals, a range only from three indexes on, two
// adjacent indexes as a pair ("0-3,7,9,10").
func (s *IndexSet) String() string {
	var b strings.Builder
	for _, r := range s.runs {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(r.lo)))
		if r.hi != r.lo {
			sep := byte('-')
			if r.hi == r.lo+1 {
				sep = ','
			}
			b.WriteByte(sep)
			b.WriteString(strconv.Itoa(int(r.hi)))
		}
	}
	return b.String()
}

// ParseIndexSet reads an interval string such as "0-3,7". Intervals must be
// ascending and disjoint, as String writes them.
func ParseIndexSet(s string) (IndexSet, error) {
	var set IndexSet
	if s == "" {
		return set, nil
	}
	last := int64(-1)
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 32)
		if err != nil || a < 0 {
			return IndexSet{}, fmt.Errorf("bad index %q in %q", lo, s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 32); err != nil || b < a {
				return IndexSet{}, fmt.Errorf("bad interval %q in %q", part, s)
			}
		}
		if a <= last {
			return IndexSet{}, fmt.Errorf("intervals not ascending at %q in %q", part, s)
		}
		if b >= MaxCompletions {
			return IndexSet{}, fmt.Errorf("index %d in %q is beyond the largest completions (%d)", b, s, MaxCompletions)
		}
		if n := len(set.runs); n > 0 && int64(set.runs[n-1].hi) == a-1 {
			set.runs[n-1].hi = int32(b) // "0-3,4" is read as "0-4"
		} else {
			set.runs = append(set.runs, interval{int32(a), int32(b)})
		}
		set.n += int(b - a + 1)
		last = b
	}
	return set, nil
}
