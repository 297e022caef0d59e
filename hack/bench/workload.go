package main

import (
	"fmt"
	"strconv"
	"strings"
)

// ns is the namespace every run creates its jobs and pods in.
const ns = "bench"

// workload is the same work for every mode.
type workload struct {
	Name, Desc               string
	Jobs                     int
	Completions, Parallelism int32
	Indexed                  bool
	// Base and Size name a workload run at several sizes (-sizes): W1×3 is
	// W1 at three times its size.
	Base string
	Size float64
	// Quota, when set, queues every job through one Kueue LocalQueue that
	// admits Quota pods at a time (queue.go).
	Quota int
}

func (w workload) total() int { return w.Jobs * int(w.Completions) }

// mode is who runs the work: the built-in Job controller, SafeJob or
// nobody (the limit), at a client rate (0: the controller's default).
type mode struct {
	Name       string
	Controller string // builtin, safejob, limit
	QPS        int
}

// The modes (rows) and the controllers they run.
const (
	modeLimit          = "limit"
	modeBuiltin        = "built-in"
	modeSafeJob        = "SafeJob"
	modeBuiltinDefault = "built-in (default rate)"
	modeSafeJobDefault = "SafeJob (default rate)"

	ctrlLimit   = "limit"
	ctrlBuiltin = "builtin"
	ctrlSafeJob = "safejob"
)

var modeOrder = []string{modeLimit, modeBuiltin, modeSafeJob, modeBuiltinDefault, modeSafeJobDefault}

// allWorkloads are the workloads -workloads names, each at the size it is
// specified at (-scale and -sizes scale them).
func allWorkloads() map[string]workload {
	return map[string]workload{
		"W1": {Name: "W1", Desc: "1,000 jobs of one pod", Jobs: 1000, Completions: 1, Parallelism: 1},
		"W2": {Name: "W2", Desc: "1 job, 5,000 completions, parallelism 200", Jobs: 1, Completions: 5000, Parallelism: 200},
		"W3": {Name: "W3", Desc: "200 Indexed jobs, 20 completions, parallelism 5", Jobs: 200, Completions: 20, Parallelism: 5, Indexed: true},
		"W4": {Name: "W4", Desc: "10,000 jobs of one pod, created at once", Jobs: 10000, Completions: 1, Parallelism: 1},
		"W5": {Name: "W5", Desc: "1 Indexed job, 100,000 completions, parallelism 2,000", Jobs: 1, Completions: 100000,
			Parallelism: 2000, Indexed: true},
		"W6": {Name: "W6", Desc: "5,000 jobs of one pod through one Kueue LocalQueue, 500 pods admitted at a time", Jobs: 5000,
			Completions: 1, Parallelism: 1, Quota: 500},
	}
}

// selectWorkloads returns the named workloads at -scale, or, with sizes,
// each at each of its sizes (multiples of scale), named W1×3 and so on
// (a workload at one size other than 1 too, so that a set run in parts
// keeps its names).
// sizes holds space-separated lists: "1,3,10" for every workload,
// "W5:0.01,0.1,1" for one.
func selectWorkloads(all map[string]workload, names, sizes string, scale float64) ([]workload, error) {
	factors := map[string][]float64{"": {1}}
	for _, list := range strings.Fields(sizes) {
		name, values, ok := strings.Cut(list, ":")
		if !ok {
			name, values = "", list
		}
		factors[name] = nil
		for _, f := range strings.Split(values, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("-sizes: %q is not a positive number", f)
			}
			factors[name] = append(factors[name], v)
		}
	}
	var ws []workload
	if names == "none" {
		return nil, nil // a report of merged results alone
	}
	for _, n := range strings.Split(names, ",") {
		w, ok := all[n]
		if !ok {
			return nil, fmt.Errorf("unknown workload %q", n)
		}
		fw, own := factors[n]
		if !own {
			fw = factors[""]
		}
		for _, f := range fw {
			s := scaled(w, scale*f)
			if len(fw) > 1 || f != 1 { // one of several sizes, or a size apart (-merge joins it to the rest)
				s.Name, s.Base, s.Size = fmt.Sprintf("%s×%g", w.Name, f), w.Name, f
			}
			ws = append(ws, s)
		}
	}
	return ws, nil
}

func scaled(w workload, f float64) workload {
	if f == 1 {
		return w
	}
	if w.Jobs > 1 {
		w.Jobs = max(1, int(float64(w.Jobs)*f))
	} else {
		w.Completions = max(1, int32(float64(w.Completions)*f))
		w.Parallelism = min(w.Parallelism, w.Completions)
	}
	if w.Quota > 0 {
		w.Quota = max(1, int(float64(w.Quota)*f))
	}
	w.Desc += fmt.Sprintf(" (scaled %.2f: %d jobs × %d)", f, w.Jobs, w.Completions)
	return w
}
