package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a component running as a child process, its output in a log file.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartProcess starts bin with args, output appended to logPath.
func StartProcess(name, logPath, bin string, args ...string) (*Process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Args[0] = bin
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group, and killed with us if we die.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		if p.err == nil {
			p.err = fmt.Errorf("exited with status 0")
		}
		p.mu.Unlock()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// Args is the command line (binary first).
func (p *Process) Args() []string { return p.cmd.Args }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited returns why the process ended, or nil while it runs.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	default:
		return nil
	}
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL to the process group and waits for the end.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, then SIGKILL after 10s, and waits for the end.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

// Grep returns the last n lines of the process's log that contain s.
func (p *Process) Grep(s string, n int) string {
	raw, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	var lines [][]byte
	for _, l := range bytes.Split(raw, []byte("\n")) {
		if bytes.Contains(l, []byte(s)) {
			lines = append(lines, l)
		}
	}
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// Tail returns the last n lines of the log.
func (p *Process) Tail(n int) string {
	raw, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
