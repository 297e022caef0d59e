// Package ledger is what the two kinds of SafeJob ledger share: a SafeJob's
// pods (package jobs) and a scheduled SafeJob's runs (package runs) are both
// recorded as an append-only list of entries with a growing seq, created
// under the same fence, and finished by the same conditions. Nothing here,
// or in the packages below it, has a Kubernetes client or a clock of its
// own: every function is pure.
package ledger

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// Append assigns seqs to entries and appends them to a copy of l. An entry
// that stands for several pods takes as many seqs.
func Append(l *batchv1alpha1.Ledger, entries []batchv1alpha1.LedgerEntry) batchv1alpha1.Ledger {
	out := *l.DeepCopy()
	for _, e := range entries {
		e.Seq = out.Seq + 1
		out.Seq = e.LastSeq()
		out.Entries = append(out.Entries, e)
	}
	return out
}

// Walk applies each listed entry of l in order, once it has checked that its
// seqs are above the one before, and finally that the ledger's seq is not
// below its last entry's or its checkpoint's. The error names the first
// entry that breaks a rule, or that apply refused.
func Walk(l *batchv1alpha1.Ledger, apply func(e *batchv1alpha1.LedgerEntry) error) error {
	var last, prev int64
	if l.Checkpoint != nil {
		last = l.Checkpoint.Seq
	}
	for k := range l.Entries {
		e := &l.Entries[k]
		if e.Seq <= prev {
			return fmt.Errorf("entry %d: seq %d not above %d", k, e.Seq, prev)
		}
		if e.Count < 0 || (e.Count > 1 && !e.Countable()) {
			return fmt.Errorf("entry %d (seq %d): count %d on a %s entry", k, e.Seq, e.Count, e.Type)
		}
		if e.Seq > math.MaxInt64-int64(e.Pods())+1 {
			return fmt.Errorf("entry %d (seq %d): the seqs of its %d pods overflow", k, e.Seq, e.Pods())
		}
		prev, last = e.LastSeq(), max(last, e.LastSeq())
		if err := apply(e); err != nil {
			return fmt.Errorf("entry %d (seq %d): %w", k, e.Seq, err)
		}
	}
	if l.Seq < last {
		return fmt.Errorf("ledger seq %d is below its last entry %d", l.Seq, last)
	}
	return nil
}

// SortedKeys returns the keys of m in order.
func SortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// MinPositive is the smallest of the durations, ignoring those that are not
// positive (when none is, the result is not positive either).
func MinPositive(ds ...time.Duration) time.Duration {
	var least time.Duration
	for _, d := range ds {
		if least <= 0 || (d > 0 && d < least) {
			least = d
		}
	}
	return least
}
