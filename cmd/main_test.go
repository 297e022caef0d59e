package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime/debug"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestRetryStartup: a start that fails at first (a connection cut while
// discovering the API) is retried until it succeeds; one that keeps failing
// returns its own error once the steps run out; a cancelled context stops
// the retries.
func TestRetryStartup(t *testing.T) {
	b := wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 4}
	calls := 0
	err := retryStartup(context.Background(), b, func() error {
		calls++
		if calls < 3 {
			return errors.New("unexpected EOF")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("retried start: %v after %d calls, want success on the third", err, calls)
	}
	refused := errors.New("connection refused")
	calls = 0
	err = retryStartup(context.Background(), b, func() error { calls++; return refused })
	if !errors.Is(err, refused) || calls != 4 {
		t.Errorf("failing start: %v after %d calls, want its own error after 4", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	if err := retryStartup(ctx, wait.Backoff{Duration: time.Hour, Steps: 4}, func() error { calls++; return refused }); err == nil {
		t.Errorf("cancelled: nil error after %d calls", calls)
	}
}

// TestBuildVersion: a version set at build time is reported as it is; a
// "dev" build reports the commit it was built from, marked -dirty when the
// tree had changes, and "dev" when the toolchain recorded none.
func TestBuildVersion(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}
	for _, c := range []struct {
		name, version string
		read          func() (*debug.BuildInfo, bool)
		want          string
	}{
		{"set at build time", "v0.2.0", info(rev), "v0.2.0"},
		{"dev, with the commit", "dev", info(rev, debug.BuildSetting{Key: "vcs.modified", Value: "false"}), rev.Value},
		{"dev, changed tree", "dev", info(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), rev.Value + "-dirty"},
		{"dev, no commit recorded", "dev", info(debug.BuildSetting{Key: "GOOS", Value: "linux"}), "dev"},
		{"dev, no build info", "dev", func() (*debug.BuildInfo, bool) { return nil, false }, "dev"},
	} {
		if got := buildVersion(c.version, c.read); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionFlag runs main with --version (in a child process, as main
// exits): it prints "safejob-controller <version>" and exits 0 without
// reaching for a kubeconfig.
func TestVersionFlag(t *testing.T) {
	if os.Getenv("SAFEJOB_TEST_MAIN") == "1" {
		os.Args = []string{"manager", "--version"}
		main()
		t.Fatal("main returned after --version")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestVersionFlag$")
	cmd.Env = append(os.Environ(), "SAFEJOB_TEST_MAIN=1", "KUBECONFIG=/nonexistent")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if want := "safejob-controller " + buildVersion(version, debug.ReadBuildInfo) + "\n"; string(out) != want {
		t.Errorf("--version printed %q, want %q", out, want)
	}
}
