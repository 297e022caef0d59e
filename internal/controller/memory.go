package controller

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// jobMemo is what this process remembers of one SafeJob (one UID) beyond
// the cache: the safety state that the ledger cannot hold, each part named
// for the invariant of docs/design.md it protects. A process that lost it
// (a restart) does less, never more: it waits for the cache, confirms with
// a live read, and leaves the creates of launches it did not commit to the
// fence (I7). What this process keeps for pacing alone is the pacer's
// (pacing.go).
type jobMemo struct {
	uid      types.UID
	fence    writeFence
	workload workloadFence
	pods     podMemory
	runs     runMemory
	high     ledgerHigh
}

func newJobMemo(uid types.UID) *jobMemo {
	return &jobMemo{
		uid:  uid,
		pods: podMemory{uncreated: map[string]bool{}, lastSeen: map[string]*corev1.Pod{}, releasedAt: map[string]time.Time{}},
		runs: runMemory{seen: map[string]types.UID{}, issued: map[string]bool{}},
	}
}

// ledgerHigh is the most of a SafeJob's ledger this process has seen, in
// its cache or in the answer to its own write: the highest seq, and the
// highest checkpoint seq. It protects I4 (a committed fact never
// disappears) against what the ledger cannot tell by itself: a status put
// back by a restore or a hand edit reads as valid, and deciding on it would
// launch again the work its lost entries recorded as done. Only this
// process's memory knows; a new process takes the ledger as it finds it.
type ledgerHigh struct{ seq, checkpoint int64 }

// covers returns an error when l shows less than was seen.
func (h *ledgerHigh) covers(l *batchv1alpha1.Ledger) error {
	if l.Seq < h.seq {
		return fmt.Errorf("status.ledger.seq is %d, and was %d", l.Seq, h.seq)
	}
	if cp := checkpointSeq(l); cp < h.checkpoint {
		return fmt.Errorf("status.ledger.checkpoint.seq is %d, and was %d", cp, h.checkpoint)
	}
	return nil
}

// saw raises the marks to l.
func (h *ledgerHigh) saw(l *batchv1alpha1.Ledger) {
	h.seq = max(h.seq, l.Seq)
	h.checkpoint = max(h.checkpoint, checkpointSeq(l))
}

func checkpointSeq(l *batchv1alpha1.Ledger) int64 {
	if l.Checkpoint == nil {
		return 0
	}
	return l.Checkpoint.Seq
}

// writeFence holds this process's last status write of a SafeJob until the
// cache shows it: a decision made on an older version would miss the
// write's commits, and could only meet a conflict. It protects I1: the pod
// work of that decision would act on launches the write has closed since.
type writeFence struct {
	// replaced is the resourceVersion the write replaced; "" once the
	// cache shows a later one.
	replaced string
	at       time.Time
	// arrived is closed when the informer delivers a version past replaced: a
	// worker waiting for its own write wakes at once.
	arrived chan struct{}
}

// wrote holds the fence over the version a successful write replaced.
func (f *writeFence) wrote(replaced string, now time.Time) {
	f.replaced, f.at, f.arrived = replaced, now, make(chan struct{})
}

// pass reports whether a cached version rv shows the last write, and lifts
// the fence when it does; lifted says it did now, and took is how long the
// write took to show.
func (f *writeFence) pass(rv string, now time.Time) (ok, shownNow bool, delay time.Duration) {
	switch f.replaced {
	case "":
		return true, false, 0
	case rv:
		return false, false, 0
	}
	f.replaced = ""
	return true, true, now.Sub(f.at)
}

// deliver wakes the worker waiting for the write when rv shows it.
func (f *writeFence) deliver(rv string) {
	if f.replaced == "" || rv == f.replaced {
		return
	}
	select {
	case <-f.arrived: // already woken
	default:
		close(f.arrived)
	}
}

// workloadFence holds this process's last status write of the SafeJob's
// Workload until the cache shows it: a decision made on the version it
// replaced would write again what was written, and the API server would
// only refuse it for its stale resourceVersion. The Workload's next version
// brings the SafeJob back, as any change of its Workload does. No invariant
// rests on it: it saves writes the API server would refuse.
type workloadFence struct {
	// uid is the Workload's; replaced is the resourceVersion the write
	// replaced, "" once a later version was seen.
	uid      types.UID
	replaced string
}

// pass reports whether a cached version of a Workload shows the last
// write, and lifts the fence when it does (or when it is another Workload).
func (f *workloadFence) pass(uid types.UID, rv string) bool {
	if f.replaced != "" && f.uid == uid && f.replaced == rv {
		return false
	}
	f.replaced = ""
	return true
}

// podMemory is what this process knows of a SafeJob's pods beyond the
// cache. uncreated protects I1 (only a launch's committer creates its pod,
// so a create issued late never meets a second); lastSeen protects I3 (an
// outcome whose pod the cache has lost is still recorded once); releasedAt
// and releaseErr serve I5 (a release is issued once and its failure is
// retried).
type podMemory struct {
	// uncreated holds the launches this process committed and has not
	// created yet: only a launch's committer creates its pod.
	uncreated map[string]bool
	// lastSeen holds the last terminal state of pods the cache is losing
	// (deleted, or their finalizer stripped), until their outcome is
	// committed.
	lastSeen map[string]*corev1.Pod
	// releasedAt holds when this process released pods' finalizers, so that
	// a reconcile on a cache that does not show it yet does not patch again.
	releasedAt map[string]time.Time
	// releaseErr holds the errors of background releases that failed, for
	// the next reconcile to return.
	releaseErr error
	// refusal is the API server's answer to the latest pod create issued
	// here (nil: none issued yet).
	refusal *jobs.CreateRefusal
}

// committed notes the launches a successful write committed, and forgets
// those it closed.
func (p *podMemory) committed(appended []batchv1alpha1.LedgerEntry) {
	for _, e := range appended {
		if e.Type == batchv1alpha1.EntryLaunched {
			p.uncreated[e.Pod] = true
		}
	}
	p.forgetClosed(appended)
}

// forgetClosed forgets, of the launches noted uncreated, those that the
// appended entries close or stop.
func (p *podMemory) forgetClosed(appended []batchv1alpha1.LedgerEntry) {
	for _, e := range appended {
		if e.Type != batchv1alpha1.EntryLaunched {
			delete(p.uncreated, e.Pod)
		}
	}
}

// releaseMemory is how long a release is remembered; after it, a pod the
// cache still shows with the finalizer is released again.
const releaseMemory = 5 * time.Second

// unreleased filters out the pods released here within releaseMemory.
func (p *podMemory) unreleased(pods []string, now time.Time) []string {
	maps.DeleteFunc(p.releasedAt, func(_ string, at time.Time) bool { return now.Sub(at) > releaseMemory })
	return slices.DeleteFunc(slices.Clone(pods), func(pod string) bool {
		_, recent := p.releasedAt[pod]
		return recent
	})
}

// runMemory is what this process knows of a schedule's open runs beyond
// the cache. It protects I8 for runs as podMemory protects I1 for pods: a
// run created here is not created again, and one seen and then gone is
// known to have vanished rather than never to have come.
type runMemory struct {
	// seen holds the open runs observed in the cache or created here, with
	// their UIDs: an open run seen and then found gone vanished.
	seen map[string]types.UID
	// issued holds the open runs whose create this process issued and the
	// API server answered: they are not created again here.
	issued map[string]bool
}

// keepOpen remembers the open runs observed now (observed returns "" for a
// run the cache does not show) and forgets every run no longer open, so the
// memory stays bounded by the open runs.
func (m *runMemory) keepOpen(open map[string]bool, observed func(string) types.UID) {
	seen := map[string]types.UID{}
	for name := range open {
		if uid := observed(name); uid != "" {
			seen[name] = uid
		} else if uid := m.seen[name]; uid != "" {
			seen[name] = uid
		}
	}
	m.seen = seen
	maps.DeleteFunc(m.issued, func(name string, _ bool) bool { return !open[name] })
}

// issuedRun notes an answered create of a run and the UID of the run it
// created ("" when the name existed).
func (m *runMemory) issuedRun(name string, uid types.UID) {
	m.issued[name] = true
	if uid != "" {
		m.seen[name] = uid
	}
}
