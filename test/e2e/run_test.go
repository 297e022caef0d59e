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

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
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

// TestRunCommandNamedCluster runs `make run KUBECONFIG=path`'s script on a
// cluster of its own: it names the context, installs the admission policies
// (one was removed beforehand) and runs the operator there, which runs a
// SafeJob to completion.
func TestRunCommandNamedCluster(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{Nodes: 1})
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "safejob-immutable-spec"}}
	if err := e.cl.Delete(ctx, policy); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "run.sh"), "--health-probe-bind-address=127.0.0.1:0")
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "RUN_KUBECONFIG="+e.c.Kubeconfig, "KUBECTL="+filepath.Join(e.c.BinDir, "kubectl"),
		"MANAGER="+managerBin, "KUBECONFIG="+filepath.Join(t.TempDir(), "not-this-one"))
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("run.sh printed:\n%s", out.String())
		}
	})
	waitUntil(t, time.Minute, "the policy to be installed again", func() bool {
		return e.cl.Get(ctx, client.ObjectKeyFromObject(policy), policy) == nil
	})
	if want := "Running SafeJob against context "; !strings.Contains(out.String(), want) {
		t.Errorf("run.sh did not print the context it uses (%q):\n%s", want, out.String())
	}
	sj := plainSafeJob("named-cluster", 2, 2, "200ms")
	if err := e.cl.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "the SafeJob to complete", func() bool {
		return e.cl.Get(ctx, client.ObjectKeyFromObject(sj), sj) == nil && complete(sj)
	})
}

// TestRunCommandIgnoresAmbientKubeconfig: `make run` goes to a cluster only
// when its kubeconfig is named on make's command line; $KUBECONFIG in the
// environment leaves it on the built-in local cluster.
func TestRunCommandIgnoresAmbientKubeconfig(t *testing.T) {
	t.Parallel()
	dryRun := func(env []string, args ...string) string {
		cmd := exec.Command("make", append([]string{"-n", "run"}, args...)...)
		cmd.Dir, cmd.Env = root, append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := dryRun([]string{"KUBECONFIG=/from/the/environment"}); !strings.Contains(out, "RUN_KUBECONFIG= ") {
		t.Errorf("with $KUBECONFIG set, make run would use it:\n%s", out)
	}
	if out := dryRun(nil, "KUBECONFIG=/named/here"); !strings.Contains(out, "RUN_KUBECONFIG=/named/here ") {
		t.Errorf("make run KUBECONFIG=/named/here would not use it:\n%s", out)
	}
}
