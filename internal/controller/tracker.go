package controller

import (
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// tracker keeps what this process knows beyond the cache, per SafeJob:
// its last status write (so it acts only once the cache shows it), the
// launches it committed and has not created yet, and the last terminal
// state of pods that left the cache. None of it is needed for safety: a
// process that lost it (a restart) confirms pods with a live read instead.
type tracker struct {
	mu   sync.Mutex
	jobs map[types.NamespacedName]*jobMemo
	// strays holds the names whose pods were seen holding the ledger
	// finalizer with no SafeJob controlling them.
	strays map[types.NamespacedName]bool
}

type jobMemo struct {
	uid types.UID
	// writtenOver is the resourceVersion our last status write replaced; while
	// the cache still shows it, the write is not observed.
	writtenOver string
	writtenAt   time.Time
	// arrived is closed when the informer delivers a version past
	// writtenOver: a worker waiting for its own write wakes at once.
	arrived  chan struct{}
	pending  map[string]bool
	lastSeen map[string]*corev1.Pod
	// runsSeen holds the runs of a scheduled SafeJob observed or created
	// so far, with their UIDs.
	runsSeen map[string]types.UID
	// runsIssued holds the open runs whose create this process issued and
	// the API server answered.
	runsIssued map[string]bool
	// readySince is when a ready-count change alone was first held back.
	readySince time.Time
	// releasedAt holds when this process released pods' finalizers, so that a
	// reconcile on a cache that does not show it yet does not patch again.
	releasedAt map[string]time.Time
}

func newTracker() *tracker {
	return &tracker{jobs: map[types.NamespacedName]*jobMemo{}, strays: map[types.NamespacedName]bool{}}
}

// sawStray notes that a pod of this name holds the ledger finalizer with no
// SafeJob controlling it.
func (t *tracker) sawStray(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.strays[key] = true
}

// takeStrays reports and clears a stray pod noted for this name.
func (t *tracker) takeStrays(key types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	had := t.strays[key]
	delete(t.strays, key)
	return had
}

// memo returns the memo of a SafeJob, starting afresh when the UID changed.
func (t *tracker) memo(key types.NamespacedName, uid types.UID) *jobMemo {
	m := t.jobs[key]
	if m == nil || (uid != "" && m.uid != uid) {
		m = &jobMemo{uid: uid, pending: map[string]bool{}, lastSeen: map[string]*corev1.Pod{}, runsSeen: map[string]types.UID{},
			runsIssued: map[string]bool{}, releasedAt: map[string]time.Time{}}
		t.jobs[key] = m
	}
	return m
}

func (t *tracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.jobs, key)
}

// observed reports whether the cached SafeJob reflects our last status write.
func (t *tracker) observed(sj *batchv1alpha1.SafeJob, now time.Time, m *Metrics) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	memo := t.memo(types.NamespacedName{Namespace: sj.Namespace, Name: sj.Name}, sj.UID)
	if memo.writtenOver == "" {
		return true
	}
	if sj.ResourceVersion == memo.writtenOver {
		return false
	}
	m.observeCommit(now.Sub(memo.writtenAt))
	memo.writtenOver = ""
	return true
}

// wrote records a successful status write and the launches it committed.
func (t *tracker) wrote(key types.NamespacedName, uid types.UID, over string, now time.Time, appended []batchv1alpha1.LedgerEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	memo := t.memo(key, uid)
	memo.writtenOver, memo.writtenAt = over, now
	memo.arrived = make(chan struct{})
	memo.readySince = time.Time{}
	for _, e := range appended {
		if e.Type == batchv1alpha1.EntryLaunched {
			memo.pending[e.Pod] = true
		} else {
			delete(memo.pending, e.Pod)
		}
	}
}

// created records that a pending launch no longer needs creating here: its
// create was issued (whatever its result) or its window has passed.
func (t *tracker) created(key types.NamespacedName, uid types.UID, pod string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.memo(key, uid).pending, pod)
}

func (t *tracker) pending(key types.NamespacedName, uid types.UID) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return copyMap(t.memo(key, uid).pending)
}

func (t *tracker) lastSeen(key types.NamespacedName, uid types.UID) map[string]*corev1.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	return copyMap(t.memo(key, uid).lastSeen)
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
	t.memo(key, uid).lastSeen[pod.Name] = pod
}

// forgetLastSeen drops the last states of pods whose outcome is committed.
func (t *tracker) forgetLastSeen(key types.NamespacedName, uid types.UID, pods []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	memo := t.memo(key, uid)
	for _, name := range pods {
		delete(memo.lastSeen, name)
	}
}

func copyMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sawRuns remembers which open runs have been observed in the cache, with
// their UIDs (observed returns "" for a run not observed); only open runs
// are kept, so the memory stays bounded by them.
func (t *tracker) sawRuns(key types.NamespacedName, uid types.UID, open map[string]bool, observed func(string) types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.memo(key, uid)
	seen := map[string]types.UID{}
	for name := range open {
		if runUID := observed(name); runUID != "" {
			seen[name] = runUID
		} else if runUID := m.runsSeen[name]; runUID != "" {
			seen[name] = runUID
		}
	}
	m.runsSeen = seen
	maps.DeleteFunc(m.runsIssued, func(name string, _ bool) bool { return !open[name] })
}

// issuedRun remembers that the create of a run was issued and answered,
// with the UID of the run it created ("" when the name existed).
func (t *tracker) issuedRun(key types.NamespacedName, uid types.UID, name string, runUID types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.memo(key, uid)
	m.runsIssued[name] = true
	if runUID != "" {
		m.runsSeen[name] = runUID
	}
}

// issuedRuns returns the open runs whose create this process issued.
func (t *tracker) issuedRuns(key types.NamespacedName, uid types.UID) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return copyMap(t.memo(key, uid).runsIssued)
}

// seenRuns returns the runs observed or created so far, with their UIDs.
func (t *tracker) seenRuns(key types.NamespacedName, uid types.UID) map[string]types.UID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return copyMap(t.memo(key, uid).runsSeen)
}

// deferReady holds back a ready-only status change for up to period from
// when it was first seen; it returns the time left, 0 when it is due.
func (t *tracker) deferReady(key types.NamespacedName, uid types.UID, now time.Time, period time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.memo(key, uid)
	if m.readySince.IsZero() {
		m.readySince = now
	}
	left := m.readySince.Add(period).Sub(now)
	if left <= 0 {
		m.readySince = time.Time{}
		return 0
	}
	return left
}

// spacingLeft returns how much of period is left since this process's last
// status write of the SafeJob: 0 when there was none or period has passed.
func (t *tracker) spacingLeft(key types.NamespacedName, uid types.UID, now time.Time, period time.Duration) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.memo(key, uid)
	if m.writtenAt.IsZero() {
		return 0
	}
	return max(m.writtenAt.Add(period).Sub(now), 0)
}

// outstanding returns the resourceVersion our last status write replaced
// while the cache has not shown the write yet ("" otherwise), the UID, and
// a channel closed when the informer delivers a later version.
func (t *tracker) outstanding(key types.NamespacedName) (string, types.UID, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.jobs[key]
	if m == nil || m.writtenOver == "" {
		return "", "", nil
	}
	return m.writtenOver, m.uid, m.arrived
}

// delivered is called by the informer for every SafeJob it delivers, after
// its cache holds it: it wakes the worker waiting for that SafeJob's write.
func (t *tracker) delivered(sj *batchv1alpha1.SafeJob) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.jobs[types.NamespacedName{Namespace: sj.Namespace, Name: sj.Name}]
	if m == nil || m.uid != sj.UID || m.writtenOver == "" || sj.ResourceVersion == m.writtenOver {
		return
	}
	select {
	case <-m.arrived: // already woken
	default:
		close(m.arrived)
	}
}

// releaseMemory is how long a release is remembered; after it, a pod the
// cache still shows with the finalizer is released again.
const releaseMemory = 5 * time.Second

// released remembers that a pod's finalizer was removed.
func (t *tracker) released(key types.NamespacedName, uid types.UID, pod string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.memo(key, uid).releasedAt[pod] = now
}

// unreleased filters out the pods released recently by this process.
func (t *tracker) unreleased(key types.NamespacedName, uid types.UID, pods []string, now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.memo(key, uid)
	forgetOlder(m.releasedAt, now, releaseMemory)
	return slices.DeleteFunc(slices.Clone(pods), func(pod string) bool {
		_, recent := m.releasedAt[pod]
		return recent
	})
}

// forgetOlder deletes the times in m more than keep before now.
func forgetOlder(m map[string]time.Time, now time.Time, keep time.Duration) {
	maps.DeleteFunc(m, func(_ string, at time.Time) bool { return now.Sub(at) > keep })
}
