package testutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// KueueCRDDir returns the directory of the CRDs of the Kueue module the
// project requires (sigs.k8s.io/kueue in go.mod), from the module cache.
func KueueCRDDir(root string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the Kueue module: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("the Kueue module is not downloaded (run go mod download)")
	}
	return filepath.Join(dir, "config", "components", "crd", "bases"), nil
}
