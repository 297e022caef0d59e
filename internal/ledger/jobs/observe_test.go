package jobs

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/safejob/safejob/internal/ledger"
)

// TestObservation checks that one Observation answers as the package's
// Unaccounted and Decide do on Inputs of their own: before and after the
// live reads add a pod, and when the same Observation decides again with
// less launch room (the ledger replayed anew for it).
func TestObservation(t *testing.T) {
	dr := newDriver(spec(3, 10))
	dr.step(t, t0) // commits three launches
	dr.step(t, t0) // creates their pods
	// The pod of one launch is not in the cache: the live reads find it ended.
	ended := withPhase(dr.pods[1], corev1.PodSucceeded, 0)
	dr.pods = slices.Delete(slices.Clone(dr.pods), 1, 2)
	now := t0.Add(ledger.DefaultFence.LostGrace() + 1)
	same := func(what string, want, got any) {
		t.Helper()
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s differs from the package function's on an Input of its own (-want +got):\n%s", what, diff)
		}
	}

	in := dr.input(now)
	obs := Observe(in)
	if obs.Input() != in {
		t.Fatalf("Observation of another Input")
	}
	due, wait, err := obs.Unaccounted()
	if err != nil {
		t.Fatal(err)
	}
	wantDue, wantWait, err := Unaccounted(dr.input(now))
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].Name != ended.Name {
		t.Fatalf("unaccounted %v; want the launch of %s", due, ended.Name)
	}
	same("Unaccounted", wantDue, due)
	same("Unaccounted's wait", wantWait, wait)

	obs.AddPods(ended)
	if !slices.Contains(in.Pods, ended) {
		t.Errorf("AddPods left the pod out of the Input's Pods")
	}
	withEnded := dr.input(now)
	withEnded.Pods = append(slices.Clone(dr.pods), ended)
	want, err := Decide(withEnded)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := obs.Decide()
	if err != nil {
		t.Fatal(err)
	}
	same("Decide after AddPods", want, plan)

	in.LaunchRoom = ptr.To[int32](0)
	withEnded.LaunchRoom = in.LaunchRoom
	want, err = Decide(withEnded)
	if err != nil {
		t.Fatal(err)
	}
	if plan, err = obs.Decide(); err != nil {
		t.Fatal(err)
	}
	same("Decide again with no launch room", want, plan)

	// Asked again after a decision, Unaccounted reads the ledger afresh, and
	// the pod added is accounted for.
	if due, _, err = obs.Unaccounted(); err != nil {
		t.Fatal(err)
	}
	if wantDue, _, err = Unaccounted(withEnded); err != nil {
		t.Fatal(err)
	}
	same("Unaccounted after Decide", wantDue, due)
}

// TestObservationAddPodsKeepsLastSeen checks that a pod added after Observe
// is mapped as Observe maps the Input's Pods: a running pod read under the
// name of a pod last seen terminal does not hide that terminal state.
func TestObservationAddPodsKeepsLastSeen(t *testing.T) {
	dr := newDriver(spec(1, 1))
	dr.step(t, t0)
	dr.step(t, t0)
	running := dr.pods[0]
	dr.pods = nil
	in := dr.input(t0)
	in.LastSeen[running.Name] = withPhase(running, corev1.PodFailed, 1)
	obs := Observe(in)
	obs.AddPods(running)
	plan, err := obs.Decide()
	if err != nil {
		t.Fatal(err)
	}
	whole := dr.input(t0)
	whole.LastSeen, whole.Pods = in.LastSeen, []*corev1.Pod{running}
	want, err := Decide(whole)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, plan, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("plan differs from Decide on an Input of its own (-want +got):\n%s", diff)
	}
	if plan.Status.Failed != 1 {
		t.Errorf("failed %d; want the pod last seen failed counted", plan.Status.Failed)
	}
}

// TestObservationInvalidLedger checks that an Observation of a ledger that
// does not replay answers Unaccounted and Decide with the error Decide
// returns.
func TestObservationInvalidLedger(t *testing.T) {
	dr := newDriver(spec(1, 1))
	dr.step(t, t0)
	dr.status.Ledger.Entries[0].Attempt = 3 // a launch of an attempt the index has not reached
	_, want := Decide(dr.input(t0))
	if want == nil {
		t.Fatal("the edited ledger should not replay")
	}
	obs := Observe(dr.input(t0))
	if _, _, err := obs.Unaccounted(); err == nil || err.Error() != want.Error() {
		t.Errorf("Unaccounted: %v; want %v", err, want)
	}
	if _, err := obs.Decide(); err == nil || err.Error() != want.Error() {
		t.Errorf("Decide: %v; want %v", err, want)
	}
}
