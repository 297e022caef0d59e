package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestTrackerObservesOwnWrites(t *testing.T) {
	tr := newTracker()
	m := NewMetrics()
	now := time.Unix(100, 0)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1", ResourceVersion: "10"}}
	if !tr.showsOwnWrite(sj, now, m) {
		t.Fatal("nothing written yet, but not observed")
	}
	tr.wrote(key, "u1", "10", now, []batchv1alpha1.LedgerEntry{
		{Type: batchv1alpha1.EntryLaunched, Pod: "a-0-0"}, {Type: batchv1alpha1.EntryLaunched, Pod: "a-1-0"}}, nil)
	if tr.showsOwnWrite(sj, now, m) {
		t.Error("the cache still shows the version our write replaced, yet observed")
	}
	if diff := cmp.Diff(map[string]bool{"a-0-0": true, "a-1-0": true}, tr.uncreated(key, "u1")); diff != "" {
		t.Errorf("uncreated (-want,+got):\n%s", diff)
	}
	sj.ResourceVersion = "11"
	if !tr.showsOwnWrite(sj, now.Add(time.Second), m) {
		t.Error("the cache moved past our write, yet not observed")
	}
	tr.created(key, "u1", "a-0-0")
	tr.wrote(key, "u1", "11", now, []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryEvicted, Pod: "a-1-0"}}, nil)
	if got := tr.uncreated(key, "u1"); len(got) != 0 {
		t.Errorf("uncreated after create and eviction: %v", got)
	}
	// A terminal pod of an earlier SafeJob of the same name is neither kept
	// nor allowed to reset the current SafeJob's memory.
	tr.wrote(key, "u1", "12", now, []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched, Pod: "a-3-0"}}, nil)
	tr.sawTerminal(key, "u0", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-0-0"}})
	if got := tr.lastSeen(key, "u1"); len(got) != 0 {
		t.Errorf("a stranger's pod was kept as the SafeJob's: %v", got)
	}
	if got := tr.uncreated(key, "u1"); !got["a-3-0"] {
		t.Errorf("a stranger's pod event reset the SafeJob's uncreated launches: %v", got)
	}
	// A new SafeJob under the same name starts with a clean memo.
	tr.wrote(key, "u1", "12", now, []batchv1alpha1.LedgerEntry{{Type: batchv1alpha1.EntryLaunched, Pod: "a-2-0"}}, nil)
	if got := tr.uncreated(key, "u2"); len(got) != 0 {
		t.Errorf("a recreated SafeJob inherited uncreated launches: %v", got)
	}
}

func TestTrackerRemembersReleases(t *testing.T) {
	tr := newTracker()
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Unix(100, 0)
	tr.released(key, "u1", "a-0-0", now)
	if got := tr.unreleased(key, "u1", []string{"a-0-0", "a-1-0"}, now.Add(time.Second)); len(got) != 1 || got[0] != "a-1-0" {
		t.Errorf("unreleased = %v, want only a-1-0", got)
	}
	if got := tr.unreleased(key, "u1", []string{"a-0-0"}, now.Add(releaseMemory+time.Second)); len(got) != 1 {
		t.Errorf("a release older than %s still suppresses a new one: %v", releaseMemory, got)
	}
}

func TestTrackerWakesOnDelivery(t *testing.T) {
	tr := newTracker()
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u1", ResourceVersion: "10"}}
	if over, _, _ := tr.outstanding(key); over != "" {
		t.Fatalf("outstanding %q before any write", over)
	}
	tr.wrote(key, "u1", "10", time.Unix(100, 0), nil, nil)
	over, uid, arrived := tr.outstanding(key)
	if over != "10" || uid != "u1" || arrived == nil {
		t.Fatalf("outstanding = %q, %q, %v; want the write over 10", over, uid, arrived)
	}
	isClosed := func() bool {
		select {
		case <-arrived:
			return true
		default:
			return false
		}
	}
	tr.delivered(sj) // the version our write replaced
	other := sj.DeepCopy()
	other.UID, other.ResourceVersion = "u0", "12" // an older SafeJob of the same name
	tr.delivered(other)
	if isClosed() {
		t.Fatal("woken by a delivery that does not show the write")
	}
	sj.ResourceVersion = "11"
	tr.delivered(sj)
	if !isClosed() {
		t.Fatal("not woken by the delivery of the written version")
	}
	tr.delivered(sj) // a second delivery must not close it again
}

func TestTrackerBackgroundReleases(t *testing.T) {
	tr := newTracker()
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Unix(100, 0)
	tr.released(key, "u1", "a-0-0", now) // issued
	tr.released(key, "u1", "a-1-0", now)
	if got := tr.unreleased(key, "u1", []string{"a-0-0", "a-1-0"}, now); len(got) != 0 {
		t.Errorf("releases in flight planned again: %v", got)
	}
	tr.releaseDone(key, "u1", "a-0-0", now.Add(time.Second))
	if !tr.releaseFailed(key, "u1", "a-1-0", errors.New("refused")) {
		t.Error("the first failed release did not ask to queue the SafeJob")
	}
	tr.released(key, "u1", "a-2-0", now)
	if tr.releaseFailed(key, "u1", "a-2-0", errors.New("refused")) {
		t.Error("a second failure before the reconcile that returns the first asked to queue the SafeJob again")
	}
	if got := tr.unreleased(key, "u1", []string{"a-0-0", "a-1-0"}, now.Add(time.Second)); !slices.Equal(got, []string{"a-1-0"}) {
		t.Errorf("unreleased after one release failed = %v, want a-1-0 only", got)
	}
	if err := tr.takeReleaseError(key, "u1"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("the failed release's error = %v, want it once", err)
	}
	if err := tr.takeReleaseError(key, "u1"); err != nil {
		t.Errorf("the failed release's error returned twice: %v", err)
	}
	if !tr.releaseFailed(key, "u1", "a-2-0", errors.New("refused")) {
		t.Error("a failure after the error was returned did not ask to queue the SafeJob")
	}
	_ = tr.takeReleaseError(key, "u1")
	// A release that ends after its SafeJob was forgotten, or replaced by
	// one of the same name, leaves nothing behind.
	tr.forget(key)
	tr.releaseFailed(key, "u1", "a-1-0", errors.New("late"))
	tr.releaseDone(key, "u1", "a-0-0", now)
	if len(tr.jobs) != 0 {
		t.Errorf("a late release made a memo for a forgotten SafeJob: %v", tr.jobs)
	}
	tr.released(key, "u2", "a-0-0", now)
	tr.releaseFailed(key, "u1", "a-0-0", errors.New("old"))
	if err := tr.takeReleaseError(key, "u2"); err != nil {
		t.Errorf("the new SafeJob took an old one's release error: %v", err)
	}
}

// TestTrackerWorkloadFence: after a status write of a SafeJob's Workload,
// the cached version that write replaced is not written over again; a later
// version, another Workload of the same name, or another SafeJob of the
// same name lift the fence.
func TestTrackerWorkloadFence(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	wl := func(uid types.UID, rv string) *kueue.Workload {
		return &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "wl", UID: uid, ResourceVersion: rv}}
	}
	tr := newTracker()
	if !tr.showsOwnWorkloadWrite(key, "u1", wl("w1", "10")) {
		t.Fatal("nothing written yet, but held")
	}
	tr.wroteWorkload(key, "u1", wl("w1", "10"))
	if tr.showsOwnWorkloadWrite(key, "u1", wl("w1", "10")) {
		t.Error("the cache still shows the version our write replaced, yet not held")
	}
	if !tr.showsOwnWorkloadWrite(key, "u2", wl("w1", "10")) {
		t.Error("another SafeJob of the same name held by the first one's write")
	}
	tr = newTracker()
	tr.wroteWorkload(key, "u1", wl("w1", "10"))
	if !tr.showsOwnWorkloadWrite(key, "u1", wl("w2", "10")) {
		t.Error("another Workload held by the first one's write")
	}
	tr.wroteWorkload(key, "u1", wl("w1", "10"))
	if !tr.showsOwnWorkloadWrite(key, "u1", wl("w1", "11")) {
		t.Error("the cache moved past our write, yet held")
	}
	if !tr.showsOwnWorkloadWrite(key, "u1", wl("w1", "10")) {
		t.Error("held again after the fence was lifted")
	}
}

// TestUnlabeledNotedOnce checks that a pod noted for its label again and
// again (a relabel that keeps failing, noted by every pass that reads the
// pod live and by the retry) is held once, so that each reconcile patches
// it once, however long the failure lasts.
func TestUnlabeledNotedOnce(t *testing.T) {
	tr := newTracker()
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	p := unlabeledPod{name: "a-0-0", uid: "p1"}
	for range 3 {
		tr.sawUnlabeled(key, p)
	}
	tr.sawUnlabeled(key, unlabeledPod{name: "a-0-0", uid: "p2"}) // another pod under the name since
	if diff := cmp.Diff([]unlabeledPod{p, {name: "a-0-0", uid: "p2"}}, tr.takeUnlabeled(key), cmp.AllowUnexported(unlabeledPod{})); diff != "" {
		t.Errorf("noted (-want,+got):\n%s", diff)
	}
}
