package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestKrewManifest builds the plugin's release archive for this platform
// and its krew manifest (hack/release), twice, and requires the same bytes
// (the sums in a published manifest must be reproducible); then installs
// it with the pinned krew (hack/krew.sh) from the local archive, as krew
// installs from a release (the sha256 checked), runs it through the pinned
// kubectl (plugin discovery on PATH), and uninstalls it.
func TestKrewManifest(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	krew := hackTool(t, "krew.sh")
	kubectl := filepath.Join(hackTool(t, "k8s-binaries.sh", "kubectl"), "kubectl")
	platform := runtime.GOOS + "/" + runtime.GOARCH
	var manifests [2][]byte
	var dirs [2]string
	for k := range dirs {
		dirs[k] = t.TempDir()
		build := exec.Command("go", "run", "./hack/release", "-version", "v0.1.0", "-platforms", platform, "-out", dirs[k])
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("hack/release: %v\n%s", err, out)
		}
		if manifests[k], err = os.ReadFile(filepath.Join(dirs[k], "safejob.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(manifests[0], manifests[1]) {
		t.Errorf("two builds of the same source gave different manifests:\n%s\n%s", manifests[0], manifests[1])
	}
	archive := filepath.Join(dirs[0], "kubectl-safejob_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz")
	krewRoot := t.TempDir()
	env := append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1",
		"PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
		}
		return string(out)
	}
	run(krew, "install", "--manifest="+filepath.Join(dirs[0], "safejob.yaml"), "--archive="+archive)
	if out := run(kubectl, "safejob", "--version"); !strings.Contains(out, "v0.1.0") {
		t.Errorf("kubectl safejob --version after krew install: %q", out)
	}
	if out := run(kubectl, "safejob", "run-now", "--help"); !strings.Contains(out, "kubectl safejob run-now PARENT") {
		t.Errorf("kubectl safejob run-now --help: %q", out)
	}
	// krew's index is a git clone of krew-index, which needs the network
	// this test does without; uninstall only asks that one exists.
	if err := os.MkdirAll(filepath.Join(krewRoot, "index", "default", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(krew, "uninstall", "safejob")
	if _, err := os.Lstat(filepath.Join(krewRoot, "bin", "kubectl-safejob")); !os.IsNotExist(err) {
		t.Errorf("kubectl-safejob still on PATH after krew uninstall: %v", err)
	}
}
