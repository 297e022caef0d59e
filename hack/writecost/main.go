// Command writecost measures what one status write costs the API server:
// a batch/v1 Job's, and a SafeJob's with ledgers of growing length. It starts
// a bare kube-apiserver and etcd (envtest, KUBEBUILDER_ASSETS), installs the
// SafeJob CRD, and for each object makes the same status write (the ready
// count flipping) many times over, reading the CPU time of kube-apiserver and
// etcd from /proc before and after. -variants repeats it with parts of the
// CRD's validation taken out (its CEL rules, the pod template's schema), each
// on a fresh API server, to tell what each part costs.
//
//	make bench-writes    # or, with KUBEBUILDER_ASSETS set: go run ./hack/writecost -h
//
// Its files, by concern:
//   - main.go: the flags and main, and the run over the CRD's variants
//   - crd.go: the SafeJob CRD and its variants, with parts of its validation taken out (-variants)
//   - apiserver.go: the API server envtest started: its processes, a client of it, and its CPU profile (-profile)
//   - measure.go: the measurement loop (each variant's rounds over every object and operation), its CPU samples
//     and the rows it prints
//   - objects.go: the Job and the SafeJobs whose status writes are measured, their untracked twins, and how one is written
//   - releases.go: the pod finalizer releases measured (-releases)
//   - creates.go: the creates of a Job and a SafeJob measured (-creates)
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	writes := flag.Int("writes", 400, "status writes measured per object and round")
	rounds := flag.Int("rounds", 3, "rounds, each measuring every object in turn (the median is printed, and the range)")
	sizes := flag.String("entries", "0,2,10,20,40,80,200", "ledger lengths to measure, comma-separated")
	crdDir := flag.String("crd-dir", "config/crd/bases", "directory of the SafeJob CRD")
	profile := flag.String("profile", "",
		"write a CPU profile of kube-apiserver, taken while the last length is measured in the last round, to this file")
	variants := flag.String("variants", variantAsIs, "the CRD's variants to measure, comma-separated, each on its own API server: "+
		strings.Join(variantNames, ", ")+" (what its validation costs a status write)")
	releases := flag.Int("releases", 0, "also measure this many pod finalizer releases of each kind in each round: "+
		"the JSON patch that tests the finalizer's index, and the strategic merge patch that deletes it by value")
	creates := flag.Int("creates", 0, "also measure this many creates of a Job and of a SafeJob in each round, "+
		"one-pod jobs as the benchmark's W1 creates them (deleted again, not measured)")
	untracked := flag.Bool("untracked", false, "also measure a twin of each object whose managedFields were stripped "+
		"(the API server then tracks no fields on its updates): what field tracking costs a status write")
	patch := flag.Bool("patch", false, "also measure a SafeJob of each length whose status writes are JSON merge patches "+
		"of the change with its resourceVersion, as the operator writes them, beside the updates")
	flag.Parse()
	logf.SetLogger(logr.Discard()) // envtest's own messages
	c := config{writes: *writes, rounds: *rounds, profile: *profile, untracked: *untracked, patch: *patch, releases: *releases,
		creates: *creates}
	if err := run(c, *sizes, *crdDir, *variants); err != nil {
		fmt.Fprintf(os.Stderr, "writecost: %v\n", err)
		os.Exit(1)
	}
}

// config is what every variant measures, and how.
type config struct {
	writes, rounds int
	lengths        []int
	profile        string
	untracked      bool
	// patch adds, for each length, a SafeJob written by merge patches.
	patch bool
	// releases is how many pod finalizer releases of each kind each round
	// measures (none: no pods).
	releases int
	// creates is how many creates of each kind of job each round measures.
	creates int
}

func run(c config, sizes, crdDir, variants string) error {
	var err error
	if c.lengths, err = parseLengths(sizes); err != nil {
		return err
	}
	if c.writes < 1 || c.rounds < 1 || c.releases < 0 || c.creates < 0 {
		return fmt.Errorf("-writes %d and -rounds %d must be at least 1, -releases %d and -creates %d at least 0",
			c.writes, c.rounds, c.releases, c.creates)
	}
	crd, err := loadCRD(crdDir)
	if err != nil {
		return err
	}
	fmt.Printf("%-20s %-32s %10s %22s %10s %8s\n", "CRD", "object", "JSON bytes", "apiserver ms (range)", "etcd ms", "÷ Job")
	names := strings.Split(variants, ",")
	for _, v := range names {
		v = strings.TrimSpace(v)
		modified, err := variant(crd, v)
		if err != nil {
			return err
		}
		vc := c
		if c.profile != "" && len(names) > 1 {
			vc.profile = c.profile + "." + v // one profile per variant
		}
		if err := runVariant(v, modified, vc); err != nil {
			return fmt.Errorf("CRD %s: %w", v, err)
		}
	}
	return nil
}

// parseLengths reads the comma-separated ledger lengths of -entries.
func parseLengths(sizes string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad ledger length %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
