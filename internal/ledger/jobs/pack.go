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
// and Unpack convert between the two forms; they mean the same, and Replay
// reads both.
//
// Pods of a run end in any order. A fold keeps such a run listed from the
// first to the last of its pods still listed, and names the pods between
// them that it folded (foldedIndexes: a few bytes per gap, where listing
// the pods left as separate runs cost about 100 bytes each).

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

// runPrefix is the name of e's first pod without its index and attempt,
// and whether that name ends as PodName makes it.
func runPrefix(e *batchv1alpha1.LedgerEntry) (string, bool) {
	return strings.CutSuffix(e.Pod, podSuffix(e.Index, e.Attempt))
}

// podAt is the k-th pod's entry of an entry with a count, as a single
// entry.
func podAt(e *batchv1alpha1.LedgerEntry, prefix string, k int32) batchv1alpha1.LedgerEntry {
	one := *e
	one.Count, one.FoldedIndexes = 0, ""
	one.Seq = e.Seq + int64(k)
	one.Index = e.Index + k
	one.Pod = podNamed(prefix, one.Index, e.Attempt)
	return one
}

// expand calls each with every pod's entry e stands for, in seq order, and
// folded (when not nil) with each index of its foldedIndexes, in order. Only
// an entry with a count is checked here: its first pod's name must end as
// PodName makes it, so that the names of the others can be derived, and its
// folded indexes must lie between its first and last.
func expand(e *batchv1alpha1.LedgerEntry, each func(one *batchv1alpha1.LedgerEntry) error, folded func(index int32) error) error {
	n := e.Pods()
	if n == 1 && e.FoldedIndexes == "" {
		return each(e)
	}
	prefix, ok := runPrefix(e)
	if !ok {
		return fmt.Errorf("%s of %d pods from %s does not name its first pod %q", e.Type, n, e.Pod, "<name>"+podSuffix(e.Index, e.Attempt))
	}
	if n > ledger.MaxCompletions || int64(e.Index)+int64(n) > int64(^uint32(0)>>1) {
		return fmt.Errorf("%s of %d pods from index %d overflows", e.Type, n, e.Index)
	}
	gone, err := foldedIn(e)
	if err != nil {
		return err
	}
	for k := range n {
		if gone.Has(e.Index + k) {
			if folded != nil {
				if err := folded(e.Index + k); err != nil {
					return err
				}
			}
			continue
		}
		one := podAt(e, prefix, k)
		if err := each(&one); err != nil {
			return err
		}
	}
	return nil
}

// foldedIn returns the indexes of e's foldedIndexes, once checked: they lie
// strictly between the run's first and last index, whose pods the entry
// always stands for.
func foldedIn(e *batchv1alpha1.LedgerEntry) (ledger.IndexSet, error) {
	set, err := ledger.ParseIndexSet(e.FoldedIndexes)
	if err != nil {
		return ledger.IndexSet{}, fmt.Errorf("foldedIndexes: %w", err)
	}
	lo, ok := set.Min()
	hi, _ := set.Max()
	last := int64(e.Index) + int64(e.Pods()) - 1
	if ok && (lo <= e.Index || int64(hi) >= last) {
		return ledger.IndexSet{}, fmt.Errorf("foldedIndexes %q of the %s run of indexes %d-%d are not all between its first and last",
			e.FoldedIndexes, e.Type, e.Index, last)
	}
	return set, nil
}

// rejoin writes the pods of one run that stay listed (their single entries,
// at least one, in order) as one entry again: from the first to the last of
// them, with the indexes between them that do not stay listed as folded.
func rejoin(stay []batchv1alpha1.LedgerEntry) batchv1alpha1.LedgerEntry {
	e := stay[0]
	n := stay[len(stay)-1].Index - e.Index + 1
	if n == 1 {
		return e
	}
	var folded ledger.IndexSet
	next := e.Index
	for k := range stay {
		for i := next; i < stay[k].Index; i++ {
			folded.Add(i)
		}
		next = stay[k].Index + 1
	}
	e.Count, e.FoldedIndexes = n, folded.String()
	return e
}

// joinFolded is the foldedIndexes of two runs joined, b's run after a's:
// both first and last pods of each are listed, so b's indexes lie at least
// three above a's and the two strings join as they are.
func joinFolded(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "," + b
}

// Unpack returns entries with every entry that has a count written as one
// entry per pod.
func Unpack(entries []batchv1alpha1.LedgerEntry) ([]batchv1alpha1.LedgerEntry, error) {
	out := make([]batchv1alpha1.LedgerEntry, 0, len(entries))
	for k := range entries {
		err := expand(&entries[k], func(one *batchv1alpha1.LedgerEntry) error {
			out = append(out, *one)
			return nil
		}, nil)
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
// with a count, and the folded indexes of both. Other entries are kept as
// they are; Unpack gives back exactly the entries packed.
func Pack(entries []batchv1alpha1.LedgerEntry) []batchv1alpha1.LedgerEntry {
	out := make([]batchv1alpha1.LedgerEntry, 0, len(entries))
	var prefix string // of the last entry of out, when it may grow
	for _, e := range entries {
		if k := len(out) - 1; k >= 0 && prefix != "" && follows(&out[k], prefix, &e) {
			out[k].Count = out[k].Pods() + e.Pods()
			out[k].FoldedIndexes = joinFolded(out[k].FoldedIndexes, e.FoldedIndexes)
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
