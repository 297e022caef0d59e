package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionDefaultsMatchTheBuildScripts: the tests and the scripts that
// build what they run agree on each default, so a bump in one place cannot
// run one release's manager against another release's CRDs.
func TestVersionDefaultsMatchTheBuildScripts(t *testing.T) {
	for _, c := range []struct{ script, variable, want string }{
		{"k8s-binaries.sh", "K8S_VERSION", DefaultK8sVersion},
		{"kueue.sh", "KUEUE_VERSION", DefaultKueueVersion},
		{"kwok.sh", "KWOK_VERSION", DefaultKWOKVersion},
	} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "hack", c.script))
		if err != nil {
			t.Fatal(err)
		}
		if want := "${" + c.variable + ":-" + c.want + "}"; !strings.Contains(string(raw), want) {
			t.Errorf("hack/%s does not default %s to %s (want %q in it)", c.script, c.variable, c.want, want)
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "K8S_VERSION ?= " + DefaultK8sVersion; !strings.Contains(string(raw), want) {
		t.Errorf("the Makefile does not say %q", want)
	}
}
