package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestKubectlExplain runs the pinned kubectl explain against the CRD as
// installed: the types' doc comments reach the cluster, for SafeJob's own
// fields and for the pod template it embeds.
func TestKubectlExplain(t *testing.T) {
	t.Parallel()
	kubectl := filepath.Join(hackTool(t, "k8s-binaries.sh", "kubectl"), "kubectl")
	user, err := controlPlane.AddUser(envtest.User{Name: "explain", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"safejob.spec":                                     "spec is the desired work.",
		"sj.spec.parallelism":                              "the most pods that run at once",
		"safejob.status.ledger.entries":                    "entries are the facts after the checkpoint",
		"safejob.spec.template.spec.restartPolicy":         "Restart policy for all containers within the pod",
		"safejobs.batch.safejob.dev.spec.suspend":          "suspend stops launching pods",
		"safejob.status.ledger.checkpoint.lastSuccessTime": "lastSuccessTime is when the latest recorded success ended",
	} {
		out, err := exec.Command(kubectl, "--kubeconfig", path, "explain", field).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl explain %s: %v\n%s", field, err, out)
			continue
		}
		if text := strings.Join(strings.Fields(string(out)), " "); !strings.Contains(text, want) {
			t.Errorf("kubectl explain %s lacks %q:\n%s", field, want, out)
		}
	}
}
