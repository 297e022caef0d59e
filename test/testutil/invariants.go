package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
)

// ReleaseTimeout bounds how long the pods of a finished SafeJob may keep the
// ledger finalizer: their release follows the final status write at once.
const ReleaseTimeout = 30 * time.Second

// WaitForRelease waits up to ReleaseTimeout until no pod of the namespace
// holds the ledger finalizer: a SafeJob finishes in the write that records
// its last outcomes and those pods are released right after. It returns the
// pods last listed and those still holding it.
func WaitForRelease(c client.Client, ns string) ([]corev1.Pod, []string, error) {
	var pods corev1.PodList
	var holding []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, ReleaseTimeout, true,
		func(ctx context.Context) (bool, error) {
			if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				return false, fmt.Errorf("listing pods: %w", err)
			}
			holding = holding[:0]
			for i := range pods.Items {
				if slices.Contains(pods.Items[i].Finalizers, batchv1alpha1.LedgerFinalizer) {
					holding = append(holding, pods.Items[i].Name)
				}
			}
			return len(holding) == 0, nil
		})
	return pods.Items, holding, err
}

// I6 bounds a SafeJob's status by its parallelism, whatever its
// completions: a base for conditions, counts and the checkpoint's counts,
// room per open launch for its Launched and Stopping entries and its
// attempt counts, and the index sets (bounded by the CRD's MaxLength).
const (
	baseStatusBytes    = 64 << 10
	perOpenStatusBytes = 512
)

// StatusBytes returns the size of status as JSON and the most I6 allows
// at parallelism par.
func StatusBytes(status *batchv1alpha1.SafeJobStatus, par int32) (size, limit int) {
	raw, _ := json.Marshal(status)
	limit = baseStatusBytes + int(par)*perOpenStatusBytes + len(status.CompletedIndexes) + len(ptr.Deref(status.FailedIndexes, ""))
	if cp := status.Ledger.Checkpoint; cp != nil {
		limit += len(cp.SucceededIndexes) + len(cp.FailedIndexes)
	}
	return len(raw), limit
}

// LedgerWatch sees every version of the SafeJobs of a namespace and checks
// I2, I4 and I6 on each, against the version before, and I8 on every run of
// a scheduled SafeJob: when the run appears, its parent's ledger already
// holds its Scheduled entry (one watch stream orders both by resourceVersion).
type LedgerWatch struct {
	mu         sync.Mutex
	last       map[string]*jobs.State
	lastRuns   map[string]*runs.State
	runs       map[string]bool
	runsSeen   int
	violations []string
	maxStatus  int
	versions   int
}

// WatchLedgers starts a LedgerWatch for namespace ns until the test ends.
func WatchLedgers(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns string) *LedgerWatch {
	t.Helper()
	w := &LedgerWatch{last: map[string]*jobs.State{}, lastRuns: map[string]*runs.State{}, runs: map[string]bool{}}
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatalf("ledger watch cache: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf, err := informers.GetInformer(ctx, &batchv1alpha1.SafeJob{})
	if err != nil {
		t.Fatalf("ledger watch informer: %v", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.see(obj.(*batchv1alpha1.SafeJob)) },
		UpdateFunc: func(_, obj any) { w.see(obj.(*batchv1alpha1.SafeJob)) },
	}); err != nil {
		t.Fatalf("ledger watch handler: %v", err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatalf("ledger watch did not sync")
	}
	return w
}

func (w *LedgerWatch) see(sj *batchv1alpha1.SafeJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.versions++
	size, limit := StatusBytes(&sj.Status, ptr.Deref(sj.Spec.Parallelism, 1))
	w.maxStatus = max(w.maxStatus, size)
	if size > limit {
		w.fail("I6: %s status is %d bytes, more than %d at parallelism %d", sj.Name, size, limit, ptr.Deref(sj.Spec.Parallelism, 1))
	}
	// A worker cluster's copy of a dispatched run was made by MultiKueue
	// from the manager's run: its parent and I8 are the manager's.
	isCopy := jobs.PrebuiltWorkloadName(sj) != ""
	if parent := sj.Annotations[batchv1alpha1.ParentLabel]; parent != "" && !isCopy && !w.runs[sj.Name] {
		w.runs[sj.Name] = true
		w.seeRun(parent, sj)
	}
	if sj.Spec.Schedule != nil {
		w.seeParent(sj)
		return
	}
	w.seeJob(sj)
}

// seeJob checks the ledger of a SafeJob that is not a schedule (I2, I4, I6).
func (w *LedgerWatch) seeJob(sj *batchv1alpha1.SafeJob) {
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		w.fail("I4: %s ledger does not replay: %v", sj.Name, err)
		return
	}
	par := ptr.Deref(sj.Spec.Parallelism, 1)
	// A work queue (no completions) runs parallelism pods until one
	// succeeds; after that its pods finish, whatever parallelism says.
	completions := ptr.Deref(sj.Spec.Completions, math.MaxInt32)
	afterSuccess := sj.Spec.Completions == nil && st.Succeeded.Len() > 0
	if (!afterSuccess && int32(len(st.Open)) > par) || int64(len(st.Open)+st.Succeeded.Len()) > int64(completions) {
		w.fail("I2: %s has %d open launches and %d completions (parallelism %d, completions %d)",
			sj.Name, len(st.Open), st.Succeeded.Len(), par, completions)
	}
	if prev := w.last[sj.Name]; prev != nil {
		if err := st.Covers(prev); err != nil {
			w.fail("I4: %s: %v", sj.Name, err)
		}
		launched := 0
		for _, e := range sj.Status.Ledger.Entries {
			if e.LastSeq() > prev.Seq && e.Type == batchv1alpha1.EntryLaunched {
				// The launches after prev: a fold may have joined them to
				// launches listed before it, in one entry with a count (its
				// folded indexes were launches too).
				launched += int(min(int64(e.Pods()), e.LastSeq()-prev.Seq))
			}
		}
		if launched > jobs.WaveSize {
			w.fail("I6: %s: one status write launched %d pods, more than a wave of %d", sj.Name, launched, jobs.WaveSize)
		}
		if launched > 0 && sj.Spec.Completions == nil && prev.Succeeded.Len() > 0 {
			w.fail("I2: %s: a work queue launched %d pods after a pod succeeded", sj.Name, launched)
		}
	}
	w.last[sj.Name] = st
}

// seeParent checks a scheduled SafeJob's ledger (I4).
func (w *LedgerWatch) seeParent(sj *batchv1alpha1.SafeJob) {
	st, err := runs.Replay(&sj.Status.Ledger)
	if err != nil {
		w.fail("I4: %s ledger does not replay: %v", sj.Name, err)
		return
	}
	if prev := w.lastRuns[sj.Name]; prev != nil {
		if err := st.Covers(prev); err != nil {
			w.fail("I4: %s: %v", sj.Name, err)
		}
	}
	w.lastRuns[sj.Name] = st
}

// seeRun checks I8 for a run seen for the first time.
func (w *LedgerWatch) seeRun(parent string, run *batchv1alpha1.SafeJob) {
	w.runsSeen++
	st := w.lastRuns[parent]
	if st == nil {
		w.fail("I8: run %s seen before any version of its parent %s", run.Name, parent)
		return
	}
	_, open := st.Open[run.Name]
	_, closed := st.Closed[run.Name]
	if !open && !closed {
		w.fail("I8: run %s exists but the observed ledger of %s (seq %d) has no Scheduled entry for it", run.Name, parent, st.Seq)
	}
}

// RunsSeen is the number of runs of scheduled SafeJobs the watch checked for I8.
func (w *LedgerWatch) RunsSeen() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runsSeen
}

func (w *LedgerWatch) fail(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// Check fails the test with every violation seen.
func (w *LedgerWatch) Check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
	t.Logf("ledger watch: %d versions seen, largest status %d bytes", w.versions, w.maxStatus)
}

// CheckPods asserts, on a finished SafeJob, I1 (every pod the audit log
// shows created was created once, for a committed launch), I3 (counts exact,
// every success the kubelet produced is counted) and I5 (no pod keeps the
// ledger finalizer).
func CheckPods(t *testing.T, c client.Client, sj *batchv1alpha1.SafeJob, creates map[string]int, succeeded map[string]bool) {
	t.Helper()
	st, err := jobs.Replay(&sj.Status.Ledger)
	if err != nil {
		t.Fatalf("final ledger: %v", err)
	}
	creates, succeeded = ownedBy(sj.Name, creates), ownedBy(sj.Name, succeeded)
	for name, n := range creates {
		if n != 1 {
			t.Errorf("I1: pod %s created %d times", name, n)
		}
	}
	byName := checkReleased(t, c, sj.Namespace)
	for name := range creates {
		ref, ok := parseRef(byName[name], name)
		if ok && !st.IsClosed(ref) {
			if _, open := st.Open[name]; !open {
				t.Errorf("I1: pod %s has no Launched entry", name)
			}
		}
	}
	if sj.Status.Succeeded != int32(st.Succeeded.Len()) {
		t.Errorf("I3: status.succeeded %d, ledger %d", sj.Status.Succeeded, st.Succeeded.Len())
	}
	for name := range succeeded {
		ref, ok := parseRef(byName[name], name)
		if ok && !st.Succeeded.Has(ref.Index) {
			t.Errorf("I3: pod %s succeeded but index %d is not counted", name, ref.Index)
		}
	}
}

// checkReleased asserts I5 once the release that follows a SafeJob's final
// write had its time, and returns the namespace's pods by name.
func checkReleased(t *testing.T, c client.Client, namespace string) map[string]*corev1.Pod {
	t.Helper()
	pods, holding, err := WaitForRelease(c, namespace)
	for _, name := range holding {
		t.Errorf("I5: pod %s still has the ledger finalizer %s after the SafeJob finished", name, ReleaseTimeout)
	}
	if err != nil && len(holding) == 0 {
		t.Fatal(err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	return byName
}

// ownedBy keeps the entries of m named after the SafeJob's pods.
func ownedBy[V any](safeJob string, m map[string]V) map[string]V {
	out := map[string]V{}
	for name, v := range m {
		if ref, ok := parseRef(nil, name); ok && jobs.PodName(safeJob, ref.Index, ref.Attempt) == name {
			out[name] = v
		}
	}
	return out
}

// parseRef reads the index and attempt of a pod, from the object when there
// is one, else from the deterministic name "<safejob>-<index>-<attempt>".
func parseRef(pod *corev1.Pod, name string) (jobs.PodRef, bool) {
	if pod != nil {
		return jobs.RefFromPod(pod)
	}
	var idx, att int32
	k := len(name)
	for n := 0; n < 2; n++ {
		j := k - 1
		for j >= 0 && name[j] != '-' {
			j--
		}
		if j < 0 {
			return jobs.PodRef{}, false
		}
		var v int32
		if _, err := fmt.Sscanf(name[j+1:k], "%d", &v); err != nil {
			return jobs.PodRef{}, false
		}
		if n == 0 {
			att = v
		} else {
			idx = v
		}
		k = j
	}
	return jobs.PodRef{Name: name, Index: idx, Attempt: att}, true
}
