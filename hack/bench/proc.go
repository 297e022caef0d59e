package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/safejob/safejob/test/cluster"
)

// clusterComponents are the processes whose CPU time each run reports.
// kube-controller-manager runs in every mode (garbage collector, pod GC);
// in the built-in modes it is also the controller.
var clusterComponents = []string{"kube-apiserver", "etcd", "kube-scheduler", "kwok", kcmProcess}

// kcmProcess is kube-controller-manager's process name, and benchProcess
// the name the bench's own CPU and context switches are reported under.
const (
	kcmProcess   = "kube-controller-manager"
	benchProcess = "bench"
)

// clusterCPU is the CPU time so far of each cluster component and of the
// bench itself (its client and watches).
func clusterCPU(c *cluster.Cluster) map[string]float64 {
	out := map[string]float64{benchProcess: cluster.CPUSeconds(os.Getpid())}
	for _, name := range clusterComponents {
		out[name] = cpuSeconds(c.Process(name))
	}
	return out
}

// switchesByProcess is the context switches so far of each cluster
// component, of the controller and of the bench itself.
func switchesByProcess(c *cluster.Cluster, ctrl *cluster.Process) map[string]int64 {
	out := map[string]int64{benchProcess: processSwitches(os.Getpid())}
	for _, name := range clusterComponents {
		if p := c.Process(name); p != nil {
			out[name] = processSwitches(p.Pid())
		}
	}
	if ctrl != nil {
		out["controller"] = processSwitches(ctrl.Pid())
	}
	return out
}

// processSwitches sums the voluntary and involuntary context switches of
// every thread of process pid (/proc/PID/task/*/status); 0 if it is gone.
func processSwitches(pid int) int64 {
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil {
		return 0
	}
	var n int64
	for _, task := range tasks {
		raw, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.Lines(string(raw)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				if c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					n += c
				}
			}
		}
	}
	return n
}

// machineCounters are the whole machine's figures a run is measured by.
type machineCounters struct {
	ticks [2]float64
	ctxt  int64
}

// readMachine reads the machine's counters from one read of /proc/stat:
// busy and total CPU ticks (its first line) and context switches since
// boot (its ctxt line); zero where they cannot be read.
func readMachine() machineCounters {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCounters{}
	}
	var m machineCounters
	for line := range strings.Lines(string(raw)) {
		fields := strings.Fields(line)
		switch {
		case len(fields) > 1 && fields[0] == "cpu":
			for i, f := range fields[1:] {
				var v float64
				_, _ = fmt.Sscan(f, &v)
				m.ticks[1] += v
				if i != 3 && i != 4 { // idle, iowait
					m.ticks[0] += v
				}
			}
		case len(fields) == 2 && fields[0] == "ctxt":
			m.ctxt, _ = strconv.ParseInt(fields[1], 10, 64)
		}
	}
	return m
}

// since sets res's MachineBusy and ContextSwitches: what the machine did
// since m was read.
func (m machineCounters) since(res *result) {
	now := readMachine()
	if total := now.ticks[1] - m.ticks[1]; total > 0 {
		res.MachineBusy = (now.ticks[0] - m.ticks[0]) / total
	}
	if m.ctxt > 0 && now.ctxt >= m.ctxt {
		res.ContextSwitches = now.ctxt - m.ctxt
	}
}

// cpuSeconds is the user+system CPU time of a process, from /proc.
func cpuSeconds(p *cluster.Process) float64 {
	if p == nil {
		return 0
	}
	return cluster.CPUSeconds(p.Pid())
}

// peakRSS is a process's peak resident set (VmHWM) in MiB.
func peakRSS(p *cluster.Process) float64 {
	if p == nil {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			var kb float64
			_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "VmHWM:"), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}
