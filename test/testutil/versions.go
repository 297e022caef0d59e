package testutil

import "os"

// The versions the tests run by default: the newest of each that SafeJob
// supports. The hack scripts that build the binaries carry the same
// defaults (TestVersionDefaultsMatchTheBuildScripts keeps them equal), and
// the same environment variables choose others: `make test-compat` runs the
// suites against older API servers, controller-managers and Kueue managers.
const (
	DefaultK8sVersion   = "v1.37.2"
	DefaultKueueVersion = "v0.19.2"
	DefaultKWOKVersion  = "v0.8.0"
)

// K8sVersion is the Kubernetes release the tests' control plane runs.
func K8sVersion() string { return envOr("K8S_VERSION", DefaultK8sVersion) }

// KueueVersion is the Kueue release whose manager and CRDs the tests run.
func KueueVersion() string { return envOr("KUEUE_VERSION", DefaultKueueVersion) }

// KWOKVersion is the KWOK release that simulates the tests' nodes.
func KWOKVersion() string { return envOr("KWOK_VERSION", DefaultKWOKVersion) }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
