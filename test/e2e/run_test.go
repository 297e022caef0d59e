package e2e

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunCommand runs what the README's first command runs on a machine
// with no kubeconfig: the local cluster, the operator and the samples, which
// must all reach Complete (the scheduled one: one successful run); then
// Ctrl-C (SIGINT) stops everything, and the command exits 0, as `make run`
// needs to end without an error.
func TestRunCommand(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	out := runLocalCluster(t)
	for _, want := range []string{`safejob-sample\s+5/5 .*Complete`, `safejob-indexed\s+8/8 .*Complete`, `safejob-scheduled .*last run OK`,
		"Every sample finished", "kubectl get sj", "==> Stopped"} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRunCommandMultiKueue runs `make run MULTIKUEUE=1`'s command: a
// manager and a worker cluster with MultiKueue between them; the sample
// dispatched from the manager completes on the worker, and Ctrl-C stops
// everything with exit 0.
func TestRunCommandMultiKueue(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	out := runLocalCluster(t, "-multikueue")
	for _, want := range []string{`dispatched\s+6/6 .*Complete`, "finished on the worker", "==> Stopped"} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// runLocalCluster builds hack/localcluster and runs it with flags and
// "run" until it says Ctrl-C stops everything, then sends SIGINT; it
// returns what it printed, once it exited 0.
func runLocalCluster(t *testing.T, flags ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "localcluster")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hack/localcluster")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building localcluster: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"-manager", managerBin}, flags...), "run")...)
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "KUBECONFIG=")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "Ctrl-C stops everything.") {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("localcluster %v run, stopped with Ctrl-C: %v\n%s", flags, err, out.String())
	}
	return out.String()
}
