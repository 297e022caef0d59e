package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/safejob/safejob/test/cluster"
)

// maybeProfile takes CPU profiles of kube-apiserver and of the operator
// (for either controller, the operator in SafeJob's runs), and samples the
// process kwok (KWOK, which plays every pod's stages) with Linux perf where
// perf is installed, -profile-seconds long, starting -profile-after the
// run's start; the returned function waits for them, or abandons those not
// yet started.
func maybeProfile(o options, w workload, m mode, repeat int, cfg *rest.Config, kwok *cluster.Process) func() {
	if o.profileDir == "" || m.Controller == ctrlLimit || repeat != 1 || m.QPS == 0 {
		return func() {}
	}
	_ = os.MkdirAll(o.profileDir, 0o755)
	abandon := make(chan struct{})
	var wg sync.WaitGroup
	take := func(what string, f func() error) {
		wg.Go(func() {
			select {
			case <-time.After(o.profileAfter):
			case <-abandon:
				return
			}
			if err := f(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", what, err)
			}
		})
	}
	seconds := o.profileSeconds
	timeout := time.Duration(seconds)*time.Second + time.Minute
	out := func(format string) string {
		return filepath.Join(o.profileDir, fmt.Sprintf(format, m.Controller, w.Name))
	}
	if m.Controller == ctrlSafeJob {
		take("profiling the operator", func() error {
			return saveProfile(fmt.Sprintf("%s/profile?seconds=%d", operatorPprof, seconds), out("%s-%s.pprof"), timeout)
		})
	}
	if kwok != nil {
		take("sampling KWOK", func() error { return perfRecord(kwok.Pid(), seconds, out("kwok-%s-%s.perf.data")) })
	}
	take("profiling kube-apiserver", func() error {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("creating a client: %w", err)
		}
		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).
			Timeout(timeout).DoRaw(context.Background())
		if err != nil {
			return fmt.Errorf("requesting /debug/pprof/profile: %w", err)
		}
		if err := os.WriteFile(out("apiserver-%s-%s.pprof"), raw, 0o644); err != nil {
			return fmt.Errorf("writing the profile: %w", err)
		}
		return nil
	})
	return func() {
		close(abandon)
		wg.Wait()
	}
}

// perfRecord samples process pid's CPU for seconds with Linux perf into out
// (`perf report -i out`): KWOK's /debug/pprof serves no CPU profile.
func perfRecord(pid, seconds int, out string) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return errors.New("perf not found (Debian: apt-get install linux-perf), not sampled")
	}
	cmd := exec.Command(perf, "record", "-F", "199", "-e", "cpu-clock", "-g", "-p", strconv.Itoa(pid), "-o", out,
		"--", "sleep", strconv.Itoa(seconds))
	if raw, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %w: %s", err, raw)
	}
	return nil
}

// The operator serves /debug/pprof, with -profile, at operatorPprof.
const (
	operatorPprofAddr = "127.0.0.1:6065"
	operatorPprof     = "http://" + operatorPprofAddr + "/debug/pprof"
)

// saveProfile writes what url (a /debug/pprof endpoint) answers to out.
func saveProfile(url, out string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := httpGet(ctx, url)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// heapProfile saves, with -profile, the operator's heap at the end of the
// first repeat of a SafeJob run at the raised rate: what its caches hold
// once every job is done.
func heapProfile(o options, w workload, m mode, repeat int) {
	if o.profileDir == "" || m.Controller != ctrlSafeJob || repeat != 1 || m.QPS == 0 {
		return
	}
	out := filepath.Join(o.profileDir, fmt.Sprintf("safejob-heap-%s.pprof", w.Name))
	if err := saveProfile(operatorPprof+"/heap?gc=1", out, time.Minute); err != nil {
		fmt.Fprintf(os.Stderr, "bench: heap profile of the operator: %v\n", err)
	}
}
