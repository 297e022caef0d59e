package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startAttempts bounds how often a control plane is started afresh when a
// port it was given was taken before it could bind it.
const startAttempts = 5

// StartControlPlane starts the etcd and kube-apiserver of an environment
// that newEnv makes. envtest picks free ports and the processes bind them
// later; on a busy machine another process can take one in between. A start
// that fails so (the process says "address already in use") is stopped and
// made again from newEnv, with new ports; any other failure is returned at
// once, with the end of what the processes wrote.
func StartControlPlane(newEnv func() *envtest.Environment) (*envtest.Environment, *rest.Config, error) {
	var errs []error
	for range startAttempts {
		env := newEnv()
		out := &SyncBuffer{}
		etcd := env.ControlPlane.Etcd
		if etcd == nil {
			etcd = &envtest.Etcd{}
			env.ControlPlane.Etcd = etcd
		}
		api := env.ControlPlane.GetAPIServer()
		etcd.Out, etcd.Err = teeTo(etcd.Out, out), teeTo(etcd.Err, out)
		api.Out, api.Err = teeTo(api.Out, out), teeTo(api.Err, out)
		cfg, err := env.Start()
		if err == nil {
			out.Close() // only a start's output is kept
			return env, cfg, nil
		}
		_ = env.Stop()
		written := out.String()
		errs = append(errs, fmt.Errorf("%w; last lines the control plane wrote:\n%s", err, lastLines(written, 10)))
		if !strings.Contains(written, "address already in use") {
			break
		}
	}
	return nil, nil, fmt.Errorf("starting etcd and kube-apiserver: %w", errors.Join(errs...))
}

func teeTo(w io.Writer, buf io.Writer) io.Writer {
	if w == nil {
		return buf
	}
	return io.MultiWriter(w, buf)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// SyncBuffer is a buffer that two processes' output copiers write at once;
// once closed, it drops what it is given.
type SyncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *SyncBuffer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.buf = bytes.Buffer{}
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
