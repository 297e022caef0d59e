package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func TestWriteFence(t *testing.T) {
	t0 := time.Unix(100, 0)
	type step struct {
		rv                 string
		wantOK, wantLifted bool
		wantTook           time.Duration
	}
	cases := map[string]struct {
		wrote bool
		steps []step
	}{
		"nothing written": {steps: []step{{rv: "10", wantOK: true}}},
		"the replaced version holds it": {wrote: true, steps: []step{
			{rv: "10"}, {rv: "10"}}},
		"a later version lifts it once": {wrote: true, steps: []step{
			{rv: "10"}, {rv: "11", wantOK: true, wantLifted: true, wantTook: time.Second}, {rv: "11", wantOK: true}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var f writeFence
			if tc.wrote {
				f.wrote("10", t0)
			}
			for k, s := range tc.steps {
				ok, lifted, took := f.pass(s.rv, t0.Add(time.Second))
				if ok != s.wantOK || lifted != s.wantLifted || took != s.wantTook {
					t.Errorf("step %d: pass(%s) = %v, %v, %s; want %v, %v, %s", k, s.rv, ok, lifted, took, s.wantOK, s.wantLifted, s.wantTook)
				}
			}
		})
	}
}

func TestWriteFenceDeliver(t *testing.T) {
	var f writeFence
	f.deliver("11") // nothing outstanding: nothing to wake, no panic
	f.wrote("10", time.Unix(100, 0))
	woken := func() bool {
		select {
		case <-f.arrived:
			return true
		default:
			return false
		}
	}
	f.deliver("10")
	if woken() {
		t.Fatal("woken by the version the write replaced")
	}
	f.deliver("11")
	f.deliver("12") // a second delivery must not close it again
	if !woken() {
		t.Fatal("not woken by a later version")
	}
}

func TestPodMemory(t *testing.T) {
	now := time.Unix(100, 0)
	p := newJobMemo("u1").pods
	p.committed([]batchv1alpha1.LedgerEntry{
		{Type: batchv1alpha1.EntryLaunched, Pod: "a-0-0"}, {Type: batchv1alpha1.EntryLaunched, Pod: "a-1-0"},
		{Type: batchv1alpha1.EntryStopping, Pod: "a-1-0"}})
	if diff := cmp.Diff(map[string]bool{"a-0-0": true}, p.uncreated); diff != "" {
		t.Errorf("uncreated: a launch stopped in the same write stays uncreated (-want,+got):\n%s", diff)
	}
	p.releasedAt["a-0-0"] = now
	// In order: each call forgets the releases older than releaseMemory.
	steps := []struct {
		name string
		at   time.Time
		want []string
	}{
		{name: "recent release filtered", at: now.Add(time.Second), want: []string{"a-2-0"}},
		{name: "at the memory's end", at: now.Add(releaseMemory), want: []string{"a-2-0"}},
		{name: "old release released again", at: now.Add(releaseMemory + time.Second), want: []string{"a-0-0", "a-2-0"}},
	}
	for _, s := range steps {
		if diff := cmp.Diff(s.want, p.unreleased([]string{"a-0-0", "a-2-0"}, s.at)); diff != "" {
			t.Errorf("%s: unreleased (-want,+got):\n%s", s.name, diff)
		}
	}
	if len(p.releasedAt) != 0 {
		t.Errorf("releases older than %s are still held: %v", releaseMemory, p.releasedAt)
	}
}

func TestRunMemory(t *testing.T) {
	m := newJobMemo("u1").runs
	m.issuedRun("p-1", "r1")
	m.issuedRun("p-2", "") // the name existed: issued, UID not learned
	if diff := cmp.Diff(map[string]types.UID{"p-1": "r1"}, m.seen); diff != "" {
		t.Errorf("seen after creates (-want,+got):\n%s", diff)
	}
	cached := map[string]types.UID{"p-2": "r2", "p-3": "r3"}
	m.keepOpen(map[string]bool{"p-1": true, "p-2": true}, func(name string) types.UID { return cached[name] })
	if diff := cmp.Diff(map[string]types.UID{"p-1": "r1", "p-2": "r2"}, m.seen); diff != "" {
		t.Errorf("seen keeps open runs only, from the cache or learned before (-want,+got):\n%s", diff)
	}
	m.keepOpen(map[string]bool{"p-2": true}, func(string) types.UID { return "" })
	if diff := cmp.Diff(map[string]types.UID{"p-2": "r2"}, m.seen); diff != "" {
		t.Errorf("a UID once learned stays while the run is open (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"p-2": true}, m.issued); diff != "" {
		t.Errorf("issued forgets closed runs (-want,+got):\n%s", diff)
	}
}

func TestWritePacing(t *testing.T) {
	now := time.Unix(100, 0)
	var w writePacing
	if left := w.spacingLeft(now, time.Second); left != 0 {
		t.Errorf("spacing before any write: %s, want 0", left)
	}
	w.deferReady(now, time.Second, false, 0)
	w.wrote(now)
	if left := w.spacingLeft(now.Add(300*time.Millisecond), time.Second); left != 700*time.Millisecond {
		t.Errorf("spacing 300ms after a write: %s, want 700ms", left)
	}
	if left, _ := w.deferReady(now.Add(500*time.Millisecond), time.Second, false, 0); left != time.Second {
		t.Errorf("a write restarts the ready hold: %s, want 1s", left)
	}
	if left, _ := w.deferReady(now.Add(1500*time.Millisecond), time.Second, false, 0); left != 0 {
		t.Errorf("ready hold after its period: %s, want 0", left)
	}
}
