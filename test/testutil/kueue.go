package testutil

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// KueueCRDDir returns the directory of the CRDs of the Kueue release the
// tests run (KueueVersion), from the module cache: the CRDs must be the
// manager's own, which need not be the release whose API SafeJob compiles
// against (go.mod).
func KueueCRDDir(root string) (string, error) {
	mod := "sigs.k8s.io/kueue@" + KueueVersion()
	cmd := exec.Command("go", "mod", "download", "-json", mod)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w", mod, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("reading what go mod download says of %s: %w", mod, err)
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download names no directory for %s", mod)
	}
	return filepath.Join(info.Dir, "config", "components", "crd", "bases"), nil
}
