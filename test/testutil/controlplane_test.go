package testutil

import (
	"net"
	"os"
	"strconv"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestStartControlPlaneRetriesATakenPort: the first control plane is given
// a port another process holds, as happens when a port picked free is taken
// before kube-apiserver binds it; the start is made again with new ports and
// succeeds.
func TestStartControlPlaneRetriesATakenPort(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set (make test sets it)")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	made := 0
	env, cfg, err := StartControlPlane(func() *envtest.Environment {
		made++
		env := &envtest.Environment{BinaryAssetsDirectory: assets}
		if made == 1 {
			api := env.ControlPlane.GetAPIServer()
			api.Address = "127.0.0.1"
			api.Port = strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
		}
		return env
	})
	if err != nil {
		t.Fatalf("StartControlPlane: %v", err)
	}
	defer func() { _ = env.Stop() }()
	if made != 2 {
		t.Fatalf("made %d environments, want 2 (one refused its taken port, one started)", made)
	}
	if cfg.Host == "" {
		t.Fatal("no host in the started control plane's config")
	}
}
