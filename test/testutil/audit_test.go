package testutil

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPodCreatesSkipsLineBeingWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	log := `{"verb":"create","stage":"ResponseComplete","objectRef":{"resource":"pods","namespace":"a","name":"p-0-0"},"responseStatus":{"code":201}}
{"verb":"create","stage":"ResponseComplete","objectRef":{"resource":"pods","namespace":"a","name":"p-0-0"},"responseStatus":{"code":409}}
{"verb":"create","stage":"ResponseComplete","objectRef":{"resource":"pods","subresource":"binding","namespace":"a","name":"p-1-0"},"responseStatus":{"code":201}}
{"verb":"create","stage":"ResponseComplete","objectRef":{"resource":"pods","namespace":"b"},"requestObject":{"metadata":{"generateName":"j-"}},"responseStatus":{"code":201}}
{"verb":"create","stage":"Respon`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := PodCreatesByNamespace(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int{"a": {"p-0-0": 1}, "b": {"j-#1": 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("creates (-want,+got):\n%s", diff)
	}
	// A malformed complete line is still an error.
	if err := os.WriteFile(path, []byte("{nope}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PodCreatesByNamespace(path); err == nil {
		t.Error("a malformed complete line was accepted")
	}
}

func TestWatchesEnded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	ev := func(verb, resource, ua, at string) string {
		return `{"verb":"` + verb + `","stage":"ResponseComplete","userAgent":"` + ua + `","stageTimestamp":"` + at +
			`","objectRef":{"resource":"` + resource + `"},"responseStatus":{"code":200}}` + "\n"
	}
	kwok := "kwok-v0.7.0/v0.7.0 (linux/amd64) kubernetes/$Format"
	kcm := "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/$Format/shared-informers"
	log := ev("watch", "pods", kwok, "2026-01-01T10:00:00.5Z") + // before the window
		ev("watch", "pods", kwok, "2026-01-01T10:00:02Z") +
		ev("watch", "pods", kwok, "2026-01-01T10:00:03Z") +
		ev("watch", "pods", kcm, "2026-01-01T10:00:04Z") +
		ev("list", "pods", kwok, "2026-01-01T10:00:04Z") +
		ev("watch", "nodes", kwok, "2026-01-01T10:00:04Z") +
		ev("watch", "pods", kwok, "2026-01-01T10:00:09Z") // after it
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := WatchesEnded(path, "pods", time.Date(2026, 1, 1, 10, 0, 1, 0, time.UTC), time.Date(2026, 1, 1, 10, 0, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"kwok-v0.7.0": 2, "kube-controller-manager": 1}, got); diff != "" {
		t.Errorf("pod watches ended (-want,+got):\n%s", diff)
	}
}
