package integration

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlExplain runs the pinned kubectl explain against the CRD as
// installed: the types' doc comments reach the cluster, for SafeJob's own
// fields and for the pod template it embeds.
func TestKubectlExplain(t *testing.T) {
	t.Parallel()
	kubectl := filepath.Join(hackTool(t, "k8s-binaries.sh", "kubectl"), "kubectl")
	path := adminKubeconfig(t)
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
