package controller

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// tracker keeps the safety state of this process beyond the cache: a memo
// per SafeJob (jobMemo), the names whose pods were seen holding the ledger
// finalizer with no SafeJob controlling them (ownerless) and the pods seen
// leaving the cache without being deleted (unlabeled), both for I5 (no pod
// keeps the finalizer once nothing will record it), and the pod names held
// by an earlier SafeJob's pods (predecessorPods), for I1 and I3 (a launch
// is never named as a pod that is not its own). It is shared by the
// workers and the informers' handlers, under one lock.
type tracker struct {
	mu        sync.Mutex
	jobs      map[types.NamespacedName]*jobMemo
	ownerless map[types.NamespacedName]bool
	unlabeled map[types.NamespacedName][]unlabeledPod
	// predecessorPods keeps, per SafeJob name, the pod names that pods of
	// an earlier SafeJob of that name still hold (by the UID of the pod
	// holding each), until those pods are deleted: launches are named apart
	// from them.
	predecessorPods map[types.NamespacedName]map[string]types.UID
}

// unlabeledPod is a pod that left the cache, which holds only pods with the
// SafeJob name label, while it held the ledger finalizer and was not being
// deleted: someone removed the label.
type unlabeledPod struct {
	name string
	uid  types.UID
}

func newTracker() *tracker {
	return &tracker{jobs: map[types.NamespacedName]*jobMemo{}, ownerless: map[types.NamespacedName]bool{},
		unlabeled: map[types.NamespacedName][]unlabeledPod{}, predecessorPods: map[types.NamespacedName]map[string]types.UID{}}
}

// with runs f on the memo of a SafeJob under the lock.
func (t *tracker) with(key types.NamespacedName, uid types.UID, f func(m *jobMemo)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t.memo(key, uid))
}

// memo returns the memo of a SafeJob, starting afresh when the UID changed
// (a new SafeJob of the same name). The lock must be held.
func (t *tracker) memo(key types.NamespacedName, uid types.UID) *jobMemo {
	m := t.jobs[key]
	if m == nil || (uid != "" && m.uid != uid) {
		m = newJobMemo(uid)
		t.jobs[key] = m
	}
	return m
}

func (t *tracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.jobs, key)
}

// sawHeld notes that pod (of this UID) holds its name for an earlier
// SafeJob of the name key names.
func (t *tracker) sawHeld(key types.NamespacedName, pod string, uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.predecessorPods[key] == nil {
		t.predecessorPods[key] = map[string]types.UID{}
	}
	t.predecessorPods[key][pod] = uid
}

// heldGone forgets a held name once the pod of this UID that held it is
// deleted.
func (t *tracker) heldGone(key types.NamespacedName, pod string, uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.predecessorPods[key][pod] != uid {
		return
	}
	delete(t.predecessorPods[key], pod)
	if len(t.predecessorPods[key]) == 0 {
		delete(t.predecessorPods, key)
	}
}

// heldNames returns the pod names held for earlier SafeJobs of this name
// (nil: none), forgetting those whose pod exists reports gone (a delete
// event that raced the note of it).
func (t *tracker) heldNames(key types.NamespacedName, exists func(pod string, uid types.UID) bool) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.predecessorPods[key]) == 0 {
		return nil
	}
	out := make(map[string]bool, len(t.predecessorPods[key]))
	for name, uid := range t.predecessorPods[key] {
		if !exists(name, uid) {
			delete(t.predecessorPods[key], name)
			continue
		}
		out[name] = true
	}
	if len(t.predecessorPods[key]) == 0 {
		delete(t.predecessorPods, key)
	}
	return out
}

// sawOwnerless notes that a pod of this name holds the ledger finalizer with no
// SafeJob controlling it.
func (t *tracker) sawOwnerless(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ownerless[key] = true
}

// takeOwnerless reports and clears an ownerless pod noted for this name.
func (t *tracker) takeOwnerless(key types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	had := t.ownerless[key]
	delete(t.ownerless, key)
	return had
}

// sawUnlabeled notes a pod of the SafeJob of this name that left the cache
// without being deleted, once however often it is noted (a relabel that
// keeps failing is noted again by every pass that reads the pod live).
func (t *tracker) sawUnlabeled(key types.NamespacedName, pod unlabeledPod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.unlabeled[key], pod) {
		t.unlabeled[key] = append(t.unlabeled[key], pod)
	}
}

// takeUnlabeled returns and clears the pods noted by sawUnlabeled for this
// name.
func (t *tracker) takeUnlabeled(key types.NamespacedName) []unlabeledPod {
	t.mu.Lock()
	defer t.mu.Unlock()
	pods := t.unlabeled[key]
	delete(t.unlabeled, key)
	return pods
}

// showsOwnWrite reports whether the cached SafeJob shows this process's
// last status write of it, and measures how long the write took to show.
func (t *tracker) showsOwnWrite(sj *batchv1alpha1.SafeJob, now time.Time, m *Metrics) (ok bool) {
	t.with(keyOf(sj), sj.UID, func(memo *jobMemo) {
		var shownNow bool
		var delay time.Duration
		if ok, shownNow, delay = memo.fence.pass(sj.ResourceVersion, now); shownNow {
			m.observeCommit(delay)
		}
	})
	return ok
}

// wrote records a successful status write, the launches it committed and
// the ledger it stored (nil: not known).
func (t *tracker) wrote(key types.NamespacedName, uid types.UID, replaced string, now time.Time, appended []batchv1alpha1.LedgerEntry,
	stored *batchv1alpha1.Ledger) {
	t.with(key, uid, func(m *jobMemo) {
		if stored != nil {
			m.high.saw(stored)
		}
		m.fence.wrote(replaced, now)
		m.pods.committed(appended)
	})
}

// sawLedger checks the cached SafeJob's ledger against the most this
// process saw of it (ledgerHigh), and raises that to it when it shows no
// less; an error says what it lacks.
func (t *tracker) sawLedger(sj *batchv1alpha1.SafeJob) (err error) {
	t.with(keyOf(sj), sj.UID, func(m *jobMemo) {
		if err = m.high.covers(&sj.Status.Ledger); err == nil {
			m.high.saw(&sj.Status.Ledger)
		}
	})
	return err
}

// mayHaveWritten notes a status write whose answer was lost: the launches it
// closed or stopped are no longer created here. Had it not landed, they are
// open and uncreated anywhere, and recorded Lost after the grace like any
// launch whose pod is not found; the launches it committed are not created
// here either (they were never noted uncreated) and, had it landed, go the
// same way.
func (t *tracker) mayHaveWritten(key types.NamespacedName, uid types.UID, appended []batchv1alpha1.LedgerEntry) {
	t.with(key, uid, func(m *jobMemo) { m.pods.forgetClosed(appended) })
}

// showsOwnWorkloadWrite reports whether the cached Workload shows this
// process's last status write of it (true when none is remembered).
func (t *tracker) showsOwnWorkloadWrite(key types.NamespacedName, uid types.UID, wl *kueue.Workload) bool {
	ok := true
	t.withTracked(key, uid, func(m *jobMemo) { ok = m.workload.pass(wl.UID, wl.ResourceVersion) })
	return ok
}

// wroteWorkload records a successful status write of the SafeJob's
// Workload over the cached version it replaced.
func (t *tracker) wroteWorkload(key types.NamespacedName, uid types.UID, replaced *kueue.Workload) {
	t.with(key, uid, func(m *jobMemo) { m.workload = workloadFence{uid: replaced.UID, replaced: replaced.ResourceVersion} })
}

// outstanding returns the resourceVersion our last status write replaced
// while the cache has not shown the write yet ("" otherwise), the UID, and
// a channel closed when the informer delivers a later version.
func (t *tracker) outstanding(key types.NamespacedName) (string, types.UID, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.jobs[key]
	if m == nil || m.fence.replaced == "" {
		return "", "", nil
	}
	return m.fence.replaced, m.uid, m.fence.arrived
}

// delivered is called by the informer for every SafeJob it delivers, after
// its cache holds it: it wakes the worker waiting for that SafeJob's write.
func (t *tracker) delivered(sj *batchv1alpha1.SafeJob) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.jobs[keyOf(sj)]; m != nil && m.uid == sj.UID {
		m.fence.deliver(sj.ResourceVersion)
	}
}

// created records that a launch no longer needs creating here: its create
// was issued (whatever its result) or its window has passed.
func (t *tracker) created(key types.NamespacedName, uid types.UID, pod string) {
	t.with(key, uid, func(m *jobMemo) { delete(m.pods.uncreated, pod) })
}

// answered records the API server's answer to a pod create (msg "" for a
// success) and reports whether it differs from the previous one.
func (t *tracker) answered(key types.NamespacedName, uid types.UID, msg string) (changed bool) {
	t.with(key, uid, func(m *jobMemo) {
		changed = m.pods.refusal == nil || m.pods.refusal.Message != msg
		m.pods.refusal = &jobs.CreateRefusal{Message: msg}
	})
	return changed
}

// refusal returns the answer to the latest pod create issued here.
func (t *tracker) refusal(key types.NamespacedName, uid types.UID) (out *jobs.CreateRefusal) {
	t.with(key, uid, func(m *jobMemo) {
		if m.pods.refusal != nil {
			out = &jobs.CreateRefusal{Message: m.pods.refusal.Message}
		}
	})
	return out
}

// uncreated returns the launches this process committed and has not created.
func (t *tracker) uncreated(key types.NamespacedName, uid types.UID) (out map[string]bool) {
	t.with(key, uid, func(m *jobMemo) { out = maps.Clone(m.pods.uncreated) })
	return out
}

func (t *tracker) lastSeen(key types.NamespacedName, uid types.UID) (out map[string]*corev1.Pod) {
	t.with(key, uid, func(m *jobMemo) { out = maps.Clone(m.pods.lastSeen) })
	return out
}

// sawTerminal keeps the terminal state of a pod the cache is losing. A pod
// of an earlier SafeJob of the same name (another UID) is not kept, and
// never resets the memory of the current one.
func (t *tracker) sawTerminal(key types.NamespacedName, uid types.UID, pod *corev1.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.jobs[key]; m != nil && m.uid != uid {
		return
	}
	t.memo(key, uid).pods.lastSeen[pod.Name] = pod
}

// forgetLastSeen drops the last states of pods whose outcome is committed.
func (t *tracker) forgetLastSeen(key types.NamespacedName, uid types.UID, pods []string) {
	t.with(key, uid, func(m *jobMemo) {
		for _, name := range pods {
			delete(m.pods.lastSeen, name)
		}
	})
}

// released remembers that a pod's finalizer was removed.
func (t *tracker) released(key types.NamespacedName, uid types.UID, pod string, now time.Time) {
	t.with(key, uid, func(m *jobMemo) { m.pods.releasedAt[pod] = now })
}

// releaseDone notes that a release issued in the background succeeded, if
// the SafeJob is still tracked (a release that ends after its SafeJob was
// forgotten leaves no memo behind).
func (t *tracker) releaseDone(key types.NamespacedName, uid types.UID, pod string, now time.Time) {
	t.withTracked(key, uid, func(m *jobMemo) { m.pods.releasedAt[pod] = now })
}

// releaseFailed forgets a release issued in the background that failed, so
// the next reconcile plans it again, and keeps its error for that reconcile.
// first reports that no earlier failure waits for that reconcile (or that
// the SafeJob is no longer tracked): the SafeJob needs queueing for it once,
// not once per pod, or its backoff would grow with every pod refused.
func (t *tracker) releaseFailed(key types.NamespacedName, uid types.UID, pod string, err error) (first bool) {
	first = true
	t.withTracked(key, uid, func(m *jobMemo) {
		delete(m.pods.releasedAt, pod)
		first = m.pods.releaseErr == nil
		m.pods.releaseErr = errors.Join(m.pods.releaseErr, err)
	})
	return first
}

// takeReleaseError returns, once, the errors of the releases that failed
// since the last call.
func (t *tracker) takeReleaseError(key types.NamespacedName, uid types.UID) (err error) {
	t.with(key, uid, func(m *jobMemo) { err, m.pods.releaseErr = m.pods.releaseErr, nil })
	return err
}

// withTracked runs f on the memo of a SafeJob under the lock, if there is
// one for that UID.
func (t *tracker) withTracked(key types.NamespacedName, uid types.UID, f func(m *jobMemo)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.jobs[key]; m != nil && m.uid == uid {
		f(m)
	}
}

// unreleased filters out the pods released recently by this process.
func (t *tracker) unreleased(key types.NamespacedName, uid types.UID, pods []string, now time.Time) (out []string) {
	t.with(key, uid, func(m *jobMemo) { out = m.pods.unreleased(pods, now) })
	return out
}

// sawRuns remembers which open runs have been observed in the cache, with
// their UIDs (observed returns "" for a run not observed).
func (t *tracker) sawRuns(key types.NamespacedName, uid types.UID, open map[string]bool, observed func(string) types.UID) {
	t.with(key, uid, func(m *jobMemo) { m.runs.keepOpen(open, observed) })
}

// issuedRun remembers that the create of a run was issued and answered,
// with the UID of the run it created ("" when the name existed).
func (t *tracker) issuedRun(key types.NamespacedName, uid types.UID, name string, runUID types.UID) {
	t.with(key, uid, func(m *jobMemo) { m.runs.issuedRun(name, runUID) })
}

// issuedRuns returns the open runs whose create this process issued.
func (t *tracker) issuedRuns(key types.NamespacedName, uid types.UID) (out map[string]bool) {
	t.with(key, uid, func(m *jobMemo) { out = maps.Clone(m.runs.issued) })
	return out
}

// seenRuns returns the runs observed or created so far, with their UIDs.
func (t *tracker) seenRuns(key types.NamespacedName, uid types.UID) (out map[string]types.UID) {
	t.with(key, uid, func(m *jobMemo) { out = maps.Clone(m.runs.seen) })
	return out
}

func keyOf(sj *batchv1alpha1.SafeJob) types.NamespacedName {
	return types.NamespacedName{Namespace: sj.Namespace, Name: sj.Name}
}
