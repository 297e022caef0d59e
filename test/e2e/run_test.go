package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// TestRunCommand runs what the README's first command runs on a machine
// with no kubeconfig: the local cluster, the operator and the samples, which
// must all reach Complete (the scheduled one: one successful run).
func TestRunCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/localcluster", "-manager", managerBin, "-exit-when-complete", "run")
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("localcluster run: %v\n%s", err, out)
	}
	for _, want := range []string{`safejob-sample\s+5/5 .*Complete`, `safejob-indexed\s+8/8 .*Complete`, `safejob-scheduled .*last run OK`, "Every sample finished", "kubectl get sj"} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
