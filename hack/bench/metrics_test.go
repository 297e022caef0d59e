package main

import (
	"maps"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	raw := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 120
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 240
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kueue.x-k8s.io",resource="workloads",scope="resource",subresource="status",verb="PUT",version="v1beta2"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 1.2e+01
apiserver_terminated_watchers_total{group="",resource="pods"} 4
apiserver_terminated_watchers_total{group="batch.safejob.dev",resource="safejobs"} 1
apiserver_watch_events_total{component="apiserver",group="",resource="pods",version="v1"} 99
apiserver_watch_events_sizes_sum{component="apiserver",group="",resource="pods",version="v1"} 123456
apiserver_watch_events_sizes_bucket{component="apiserver",group="",resource="pods",version="v1",le="1024"} 50
apiserver_request_total_bogus{resource="pods"} 7
`
	want := map[string]int{
		"pods": 123, "created:pods": 120, "pods/status": 240, "read:LIST:pods": 9, "read:WATCH:pods": 12,
		"closed:pods": 4, "closed:safejobs": 1, "watchEvents:pods": 99, "watchBytes:pods": 123456,
		"workloads/status": 5, "conflicts:pods": 3, "conflicts:workloads/status": 5,
	}
	if got := parseMetrics(raw); !maps.Equal(got, want) {
		t.Errorf("parseMetrics = %v, want %v", got, want)
	}
}

func TestParseOperator(t *testing.T) {
	raw := `# HELP safejob_reconciles_total Reconciles by result.
# TYPE safejob_reconciles_total counter
safejob_reconciles_total{result="error"} 3
safejob_reconciles_total{result="success"} 2.5e+03
safejob_reconciles_totally{result="success"} 7
safejob_status_writes_total{kind="counts"} 11
safejob_status_writes_total{kind="ledger"} 1193
`
	got := parseOperator(raw)
	if got.reconciles != 2503 {
		t.Errorf("reconciles = %d, want 2503", got.reconciles)
	}
	if want := map[string]int{"counts": 11, "ledger": 1193}; !maps.Equal(got.statusWrites, want) {
		t.Errorf("status writes = %v, want %v", got.statusWrites, want)
	}
	later := parseOperator(raw + "safejob_status_writes_total{kind=\"other\"} 2\n")
	later.statusWrites["ledger"] += 5
	if d, want := later.since(got), map[string]int{"counts": 0, "ledger": 5, "other": 2}; d.reconciles != 0 || !maps.Equal(d.statusWrites, want) {
		t.Errorf("since = %+v, want no reconciles and status writes %v", d, want)
	}
}

func TestClosedWatchers(t *testing.T) {
	results := []result{
		{Workload: "W2", Mode: modeSafeJob, Repeat: 1, WatchersClosed: map[string]int{"pods": 3, "safejobs": 1}},
		{Workload: "W2", Mode: modeSafeJob, Repeat: 2},
		{Workload: "W2", Mode: modeBuiltin, Repeat: 1},
		{Workload: "W1", Mode: modeBuiltin, Repeat: 1, WatchersClosed: map[string]int{"pods": 9}},
	}
	if got, want := closedWatchers(results, "W2"), "- watches kube-apiserver closed for falling behind (every client): "+
		modeSafeJob+" 4 in 2 runs\n"; got != want {
		t.Errorf("closedWatchers(W2) = %q, want %q", got, want)
	}
	if got := closedWatchers(results, "W3"); got != "" {
		t.Errorf("closedWatchers(W3) = %q, want nothing", got)
	}
}

func TestAddRequests(t *testing.T) {
	before := map[string]int{"pods": 10, "created:pods": 5, "read:LIST:pods": 2, "closed:pods": 1, "watchEvents:pods": 100,
		"conflicts:pods/status": 1}
	after := map[string]int{"pods": 30, "created:pods": 15, "read:LIST:pods": 2, "closed:pods": 4, "pods/status": 40,
		"watchEvents:pods": 350, "watchBytes:pods": 4096, "conflicts:pods/status": 4}
	res := result{WritesByRes: map[string]int{}, ReadsByRes: map[string]int{}}
	res.addRequests(before, after)
	if res.Writes != 60 || res.PodsCreated != 10 || !maps.Equal(res.WritesByRes, map[string]int{"pods": 20, "pods/status": 40}) ||
		len(res.ReadsByRes) != 0 || !maps.Equal(res.WatchersClosed, map[string]int{"pods": 3}) ||
		!maps.Equal(res.WatchEvents, map[string]int{"pods": 250}) || !maps.Equal(res.WatchBytes, map[string]int{"pods": 4096}) ||
		!maps.Equal(res.Conflicts, map[string]int{"pods/status": 3}) {
		t.Errorf("addRequests: %+v", res)
	}
}

func TestKWOKRewatches(t *testing.T) {
	results := []result{
		{Workload: "W2", Mode: modeBuiltin, Repeat: 1, PodWatchesEnded: map[string]int{"kwok-v0.7.0": 1, "bench": 2}},
		{Workload: "W2", Mode: modeBuiltin, Repeat: 2, PodWatchesEnded: map[string]int{"kwok-v0.7.0": 6}},
		{Workload: "W2", Mode: modeSafeJob, Repeat: 1, PodWatchesEnded: map[string]int{"manager": 1}},
		{Workload: "W2", Mode: modeSafeJob, Repeat: 2}, // from before the count was kept
		{Workload: "W1", Mode: modeSafeJob, Repeat: 1, PodWatchesEnded: map[string]int{"kwok-v0.7.0": 9}},
	}
	want := "- KWOK's pod watch ended and started over (every pod sent to it again), run by run: " +
		modeBuiltin + " 1, 6; " + modeSafeJob + " 0\n"
	checkLine(t, "kwokRewatches", kwokRewatches, results, want, "W3")
}

func TestPodWatchEvents(t *testing.T) {
	results := []result{
		{Workload: "W2", Mode: modeBuiltin, Completions: 100, WatchEvents: map[string]int{"pods": 3000}, WatchBytes: map[string]int{"pods": 2048000}},
		{Workload: "W2", Mode: modeSafeJob, Completions: 100, WatchEvents: map[string]int{"pods": 3600}, WatchBytes: map[string]int{"pods": 3072000}},
		{Workload: "W2", Mode: modeSafeJob, Completions: 100}, // from before the count was kept
	}
	want := "- pod watch events kube-apiserver sent per completion, one per event and watcher (medians): " +
		modeBuiltin + " 30.0 (20.0 KiB), " + modeSafeJob + " 36.0 (30.0 KiB)\n"
	checkLine(t, "podWatchEvents", podWatchEvents, results, want, "W1")
}

// checkLine checks the report line a function writes for W2, and that it
// writes none for a workload without the count.
func checkLine(t *testing.T, name string, line func([]result, string) string, results []result, want, absent string) {
	t.Helper()
	if got := line(results, "W2"); got != want {
		t.Errorf("%s(W2) = %q, want %q", name, got, want)
	}
	if got := line(results, absent); got != "" {
		t.Errorf("%s(%s) = %q, want nothing", name, absent, got)
	}
}

func TestWritesTableShowsConflicts(t *testing.T) {
	results := []result{
		{Workload: "W6", Mode: modeBuiltin, Repeat: 1, Completions: 100,
			WritesByRes: map[string]int{"workloads/status": 256}},
		{Workload: "W6", Mode: modeSafeJob, Repeat: 1, Completions: 100,
			WritesByRes: map[string]int{"workloads/status": 330}, Conflicts: map[string]int{"workloads/status": 74}},
	}
	got := writesTable(results, "W6")
	if want := "| workloads/status | 0.00 | 2.56 | 3.30 (0.74) |"; !strings.Contains(got, want) {
		t.Errorf("writesTable:\n%s\nwant a row %q", got, want)
	}
}
