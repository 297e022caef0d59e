package testutil

import (
	"os"
	"path/filepath"
	"testing"

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
