package testutil

import (
	"fmt"
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

// TestCreatesResolvesServerErrors: a create answered with a server error
// counts only when a request received after it shows its object existed.
func TestCreatesResolvesServerErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	received := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return received.Add(d) }
	ev := func(verb, sub, name string, code int, received time.Time) string {
		return fmt.Sprintf(`{"verb":%q,"stage":"ResponseComplete","requestReceivedTimestamp":%q,`+
			`"objectRef":{"resource":"pods","subresource":%q,"namespace":"a","name":%q},"responseStatus":{"code":%d}}`+"\n",
			verb, received.Format(time.RFC3339Nano), sub, name, code)
	}
	log := ev("create", "", "stored", 504, at(1)) + // stored: the kubelet's status patch finds it
		ev("patch", "status", "stored", 200, at(2)) +
		ev("create", "", "lost", 504, at(3)) + // not stored: the retry's create succeeds
		ev("create", "", "lost", 201, at(4)) +
		ev("create", "", "refused", 504, at(5)) + // stored: the retry is refused as AlreadyExists
		ev("create", "", "refused", 409, at(6)) +
		ev("create", "", "gone", 504, at(7)) + // not stored: a patch finds nothing
		ev("patch", "", "gone", 404, at(8)) +
		ev("create", "", "twice", 504, at(9)) + // stored, deleted, made again: two pods
		ev("delete", "", "twice", 200, at(10)) +
		ev("create", "", "twice", 201, at(11)) +
		ev("create", "", "never-seen", 500, at(12)) + // nothing after it: not counted
		ev("create", "", "timed-out", 504, at(13)) + // two timeouts, then the object: one pod
		ev("create", "", "timed-out", 504, at(14)) +
		ev("patch", "", "timed-out", 200, at(15)) +
		ev("patch", "", "logged-late", 200, at(17)) + // the 504 is logged after a later request's answer
		ev("create", "", "logged-late", 504, at(16)) +
		ev("patch", "", "patched-first", 200, at(18)) + // a success received before the create shows nothing
		ev("create", "", "patched-first", 504, at(19))
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := PodCreatesByNamespace(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]int{"a": {"stored": 1, "lost": 1, "refused": 1, "twice": 2, "timed-out": 1, "logged-late": 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("creates (-want,+got):\n%s", diff)
	}
}

// TestDryRunStoresNothing: a dry-run create or write (kubectl
// --dry-run=server, a test's probe) is answered 201 or 200 but stores
// nothing, and no count of creates or writes includes it.
func TestDryRunStoresNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	ev := func(verb, name, uri string, code int) string {
		return fmt.Sprintf(`{"verb":%q,"stage":"ResponseComplete","requestURI":%q,"requestReceivedTimestamp":"2026-01-01T10:00:00Z",`+
			`"objectRef":{"resource":"pods","namespace":"a","name":%q},"responseStatus":{"code":%d}}`+"\n", verb, uri, name, code)
	}
	log := ev("create", "probe", "/api/v1/namespaces/a/pods?dryRun=All", 201) +
		ev("create", "real", "/api/v1/namespaces/a/pods?timeout=10s", 201) +
		ev("patch", "real", "/api/v1/namespaces/a/pods/real?dryRun=All&fieldManager=kubectl", 200)
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	creates, err := PodCreates(path, "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"real": 1}, creates); diff != "" {
		t.Errorf("creates (-want,+got):\n%s", diff)
	}
	writes, err := Writes(path, "pods", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) != 1 || writes[0].Name != "real" || writes[0].Verb != "create" {
		t.Errorf("writes %+v, want the one create of real", writes)
	}
}
