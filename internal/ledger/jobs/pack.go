package jobs

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// A SafeJob's listed ledger holds every open launch, and a Stopping entry
// for each of them whose pod is being stopped. Written one entry per pod it
// would grow with parallelism (about 100 bytes of JSON each), and every
// status write, hence every pod, would pay for it. The launches committed in
// one write, and the stops, are mostly of consecutive indexes and the same
// attempt, so the ledger lists each such run as one entry with a count. Pack
// and Unpack convert between the two forms, which mean the same, and Replay
// reads both; Unpack leaves out the pods a run no longer stands for (below).
//
// Pods of a run end in any order. A fold keeps such a run listed from the
// first to the last of its pods still listed; the pods between them whose
// launch and outcome it folded are the checkpoint's, and the run no longer
// stands for them (Folded). Splitting the run at every gap instead cost
// about 100 bytes per piece, and pods that end at random leave many gaps.

// podSuffix is the part of a pod's name that PodName derives from its index
// and attempt.
func podSuffix(index, attempt int32) string { return podNamed("", index, attempt) }

// podNamed is prefix followed by podSuffix(index, attempt), built without
// fmt: a pass over a large ledger names every listed pod.
func podNamed(prefix string, index, attempt int32) string {
	var num [24]byte
	var b strings.Builder
	b.Grow(len(prefix) + 2*len("-2147483647"))
	b.WriteString(prefix)
	b.Write(strconv.AppendInt(append(num[:0], '-'), int64(index), 10))
	b.Write(strconv.AppendInt(append(num[:0], '-'), int64(attempt), 10))
	return b.String()
}

// hasPodSuffix reports whether name ends in podSuffix(index, attempt),
// without building the suffix: a replay checks every launch it opens.
func hasPodSuffix(name string, index, attempt int32) bool {
	var num [24]byte
	suffix := strconv.AppendInt(append(num[:0], '-'), int64(index), 10)
	suffix = strconv.AppendInt(append(suffix, '-'), int64(attempt), 10)
	return len(name) >= len(suffix) && name[len(name)-len(suffix):] == string(suffix)
}

// runPrefix is the name of e's first pod without its index and attempt,
// and whether that name ends as PodName makes it.
func runPrefix(e *batchv1alpha1.LedgerEntry) (string, bool) {
	return strings.CutSuffix(e.Pod, podSuffix(e.Index, e.Attempt))
}

// podAt is the k-th pod's entry of an entry with a count, as a single
// entry.
func podAt(e *batchv1alpha1.LedgerEntry, prefix string, k int32) batchv1alpha1.LedgerEntry {
	one := *e
	one.Count = 0
	one.Seq = e.Seq + int64(k)
	one.Index = e.Index + k
	one.Pod = podNamed(prefix, one.Index, e.Attempt)
	return one
}

// Folded reports whether the pod of the given seq, index and attempt,
// inside a run of launches or stops, is folded into the checkpoint; nil: none
// is. See checkpointView.holds.
type Folded func(seq int64, index, attempt int32) bool

// expand calls each with every pod's entry e stands for, in seq order
// (each must not keep the pointer it is given: its entry is reused),
// passing over the pods strictly inside its run that folded reports (never
// its first or last pod: a fold lists the run from the first to the last
// pod it keeps). Only an entry with a count is checked here: its first
// pod's name must end as PodName makes it, so that the names of the others
// can be derived.
func expand(e *batchv1alpha1.LedgerEntry, folded Folded, each func(one *batchv1alpha1.LedgerEntry) error) error {
	n := e.Pods()
	if n == 1 {
		return each(e)
	}
	prefix, ok := runPrefix(e)
	if !ok {
		return fmt.Errorf("%s of %d pods from %s does not name its first pod %q", e.Type, n, e.Pod, "<name>"+podSuffix(e.Index, e.Attempt))
	}
	if n > ledger.MaxCompletions || int64(e.Index)+int64(n) > int64(^uint32(0)>>1) {
		return fmt.Errorf("%s of %d pods from index %d overflows", e.Type, n, e.Index)
	}
	var one batchv1alpha1.LedgerEntry // one for the run, not one per pod: each reads it, never keeps it
	for k := range n {
		if k > 0 && k < n-1 && folded != nil && folded(e.Seq+int64(k), e.Index+k, e.Attempt) {
			continue
		}
		one = podAt(e, prefix, k)
		if err := each(&one); err != nil {
			return err
		}
	}
	return nil
}

// rejoin writes the pods of one run that stay listed as one entry again,
// from the first of them (its single entry) to the last (its index): the
// pods between them that do not stay listed are folded.
func rejoin(first batchv1alpha1.LedgerEntry, last int32) batchv1alpha1.LedgerEntry {
	if n := last - first.Index + 1; n > 1 {
		first.Count = n
	}
	return first
}

// Unpack returns l's listed entries with every entry that has a count
// written as one entry per pod it stands for (not those folded into l's
// checkpoint).
func Unpack(l *batchv1alpha1.Ledger) ([]batchv1alpha1.LedgerEntry, error) {
	folded, err := checkpointFolded(l.Checkpoint)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	entries := l.Entries
	out := make([]batchv1alpha1.LedgerEntry, 0, len(entries))
	for k := range entries {
		err := expand(&entries[k], folded, func(one *batchv1alpha1.LedgerEntry) error {
			out = append(out, *one)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("entry %d (seq %d): %w", k, entries[k].Seq, err)
		}
	}
	return out, nil
}

// Pack returns entries with each run of adjacent Launched entries, or
// Stopping entries, that follow on from one another (consecutive seqs and
// indexes, and otherwise equal: one type, attempt, time and reason, pods
// named as PodName makes them from one SafeJob's name) written as one entry
// with a count. Other entries are kept as they are. Unpack gives back
// exactly the single entries packed; runs a fold left with pods folded
// inside join with the same meaning (the checkpoint still holds those).
func Pack(entries []batchv1alpha1.LedgerEntry) []batchv1alpha1.LedgerEntry {
	out := make([]batchv1alpha1.LedgerEntry, 0, len(entries))
	var prefix string // of the last entry of out, when it may grow
	for _, e := range entries {
		if k := len(out) - 1; k >= 0 && prefix != "" && follows(&out[k], prefix, &e) {
			out[k].Count = out[k].Pods() + e.Pods()
			continue
		}
		out = append(out, e)
		prefix = ""
		if p, named := runPrefix(&e); named && e.Countable() {
			prefix = p
		}
	}
	return out
}

// follows reports whether the pods of e are the next ones of last, whose
// pods' names start with prefix, and e may join it: of the same type, seq,
// index and pod following on, every other field equal (TestFollowsComparesEveryField
// keeps this list whole when a field is added).
func follows(last *batchv1alpha1.LedgerEntry, prefix string, e *batchv1alpha1.LedgerEntry) bool {
	n := last.Pods()
	if int64(n)+int64(e.Pods()) > ledger.MaxCompletions {
		return false
	}
	return e.Type == last.Type && e.Seq == last.Seq+int64(n) && e.Index == last.Index+n && e.Attempt == last.Attempt &&
		e.Run == last.Run && e.Missed == last.Missed && e.Reason == last.Reason && e.UID == last.UID &&
		e.Time.Equal(&last.Time) && equalTimes(e.ScheduledTime, last.ScheduledTime) &&
		e.Pod == podNamed(prefix, e.Index, e.Attempt)
}

// equalTimes reports whether a and b are both unset or the same instant.
func equalTimes(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}
