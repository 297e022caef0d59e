package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPacerDefersReadyOnlyWrites(t *testing.T) {
	tr := newPacer(Pacing{}, nil, nil)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Unix(100, 0)
	if left, _ := tr.deferReady(key, "u1", now, time.Second, false, 0); left != time.Second {
		t.Fatalf("first ready-only change held %s, want 1s", left)
	}
	if left, _ := tr.deferReady(key, "u1", now.Add(400*time.Millisecond), time.Second, false, 0); left != 600*time.Millisecond {
		t.Errorf("held %s after 400ms, want 600ms", left)
	}
	if left, _ := tr.deferReady(key, "u1", now.Add(time.Second), time.Second, false, 0); left != 0 {
		t.Errorf("held %s after the period, want 0 (write now)", left)
	}
	// A write in between restarts the period.
	tr.deferReady(key, "u1", now.Add(2*time.Second), time.Second, false, 0)
	tr.wrote(key, "u1", now.Add(2500*time.Millisecond))
	if left, _ := tr.deferReady(key, "u1", now.Add(2600*time.Millisecond), time.Second, false, 0); left != time.Second {
		t.Errorf("after a write the hold is %s, want a fresh 1s", left)
	}
}

func TestPacerSpacesWrites(t *testing.T) {
	tr := newPacer(Pacing{}, nil, nil)
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Unix(100, 0)
	if left := tr.spacingLeft(key, "u1", now, 500*time.Millisecond); left != 0 {
		t.Fatalf("before any write the hold is %s, want 0", left)
	}
	tr.wrote(key, "u1", now)
	if left := tr.spacingLeft(key, "u1", now.Add(200*time.Millisecond), 500*time.Millisecond); left != 300*time.Millisecond {
		t.Errorf("200ms after a write the hold is %s, want 300ms", left)
	}
	if left := tr.spacingLeft(key, "u1", now.Add(time.Second), 500*time.Millisecond); left != 0 {
		t.Errorf("after the period the hold is %s, want 0", left)
	}
	if left := tr.spacingLeft(key, "u2", now.Add(100*time.Millisecond), 500*time.Millisecond); left != 0 {
		t.Errorf("a recreated SafeJob inherited the hold: %s", left)
	}
}
