// Command benchledger measures what the pure ledger decision costs per
// completion as a SafeJob grows (BenchmarkDecideToCompletion in
// internal/ledger/jobs) and writes the table into BENCHMARKS.md, between the
// markers of its section; the rest of the file is left as it is.
//
//	go run ./hack/benchledger [-out BENCHMARKS.md]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Markers of the section in BENCHMARKS.md; hack/bench keeps it when it
// rewrites the file.
const (
	beginMarker = "<!-- ledger-bench begin -->"
	endMarker   = "<!-- ledger-bench end -->"
)

func main() {
	out := flag.String("out", "BENCHMARKS.md", "the Markdown report to update")
	flag.Parse()
	started := time.Now()
	cmd := exec.Command("go", "test", "./internal/ledger/jobs", "-run", "^$", "-bench", "DecideToCompletion",
		"-benchtime", "1x", "-count", "1")
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		fail(fmt.Errorf("running the benchmark: %w\n%s", err, raw))
	}
	rows, err := parse(raw)
	if err != nil {
		fail(err)
	}
	section := render(rows, time.Since(started))
	old, err := os.ReadFile(*out)
	if err != nil && !os.IsNotExist(err) {
		fail(fmt.Errorf("reading %s: %w", *out, err))
	}
	if err := os.WriteFile(*out, []byte(Replace(string(old), section)), 0o644); err != nil {
		fail(fmt.Errorf("writing %s: %w", *out, err))
	}
	fmt.Print(section)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchledger:", err)
	os.Exit(1)
}

// row is one benchmark case: its name parts and metrics by unit.
type row struct {
	mode, completions, parallelism, order string
	metrics                               map[string]float64
}

// parse reads `go test -bench` output lines such as
// "BenchmarkDecideToCompletion/Indexed/completions=1000/parallelism=100-2  1  21291 max-status-bytes ...",
// whose name may end in an order ("/order=shuffled"; pods end in waves
// otherwise).
func parse(raw []byte) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "BenchmarkDecideToCompletion/") {
			continue
		}
		name := fields[0]
		if dash := strings.LastIndex(name, "-"); dash > 0 {
			name = name[:dash] // the GOMAXPROCS suffix
		}
		parts := strings.Split(strings.TrimPrefix(name, "BenchmarkDecideToCompletion/"), "/")
		if len(parts) != 3 && len(parts) != 4 {
			return nil, fmt.Errorf("unexpected benchmark name %q", fields[0])
		}
		r := row{mode: parts[0], completions: strings.TrimPrefix(parts[1], "completions="),
			parallelism: strings.TrimPrefix(parts[2], "parallelism="), order: "waves", metrics: map[string]float64{}}
		if len(parts) == 4 {
			r.order = strings.TrimPrefix(parts[3], "order=")
		}
		for k := 2; k+1 < len(fields); k += 2 {
			v, err := strconv.ParseFloat(fields[k], 64)
			if err != nil {
				return nil, fmt.Errorf("metric %q of %s: %w", fields[k], fields[0], err)
			}
			r.metrics[fields[k+1]] = v
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no benchmark results in:\n%s", raw)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the benchmark output: %w", err)
	}
	return rows, nil
}

func render(rows []row, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintln(&b, beginMarker)
	fmt.Fprintln(&b, "## The ledger decision at every size")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "What one completion costs in the pure decision (`jobs.Decide`) and in status writes, driving one")
	fmt.Fprintln(&b, "SafeJob from start to `Complete` the way the controller does: launches committed in waves, pods")
	fmt.Fprintln(&b, "created once their commit is observed, run until the parallelism is reached, succeed, and are")
	fmt.Fprintln(&b, "deleted once released. The cost must not grow with completions: the ledger lists what is in flight")
	fmt.Fprintln(&b, "and folds the rest into intervals. Pods end in waves (every running pod together, once no write can")
	fmt.Fprintln(&b, "launch more) or shuffled (a few at a time, picked at random, while their replacements launch: the")
	fmt.Fprintln(&b, "runs of open launches get holes, the largest the ledger lists at a parallelism). No API server is")
	fmt.Fprintln(&b, "involved; its cost per write is `make bench-writes`.")
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "Command: `make bench-ledger` (`go run ./hack/benchledger`), %s. Machine: %s/%s, %d cores.\n",
		took.Round(time.Second), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| mode | completions | parallelism | pods end | Decide µs per completion | status writes per completion |"+
		" status bytes per completion | mean status bytes per write | largest status bytes |")
	fmt.Fprintln(&b, "|---|---:|---:|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		m := r.metrics
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %.4f | %.0f | %.0f | %.0f |\n", r.mode, r.completions, r.parallelism, r.order,
			m["decide-ns/completion"]/1000, m["writes/completion"], m["status-bytes/completion"], m["status-bytes/write"], m["max-status-bytes"])
	}
	fmt.Fprintln(&b, endMarker)
	return b.String()
}

// Replace puts section in place of the marked section of doc, or at its
// end when doc has none.
func Replace(doc, section string) string {
	begin, end := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	if begin < 0 || end < begin {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + section
	}
	return doc[:begin] + section + strings.TrimPrefix(doc[end+len(endMarker):], "\n")
}
