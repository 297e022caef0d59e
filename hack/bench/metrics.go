package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var (
	sampleLine = regexp.MustCompile(`^(\w+)\{([^}]*)\} ([0-9.e+]+)$`)
	labelPair  = regexp.MustCompile(`(\w+)="([^"]*)"`)
	writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}
)

// scrapeWrites reads the API server's own count of requests
// (apiserver_request_total): writes by resource[/subresource], reads as
// "read:<verb>:<resource>", successful creates (201) as
// "created:<resource>", the watchers it closed for falling behind
// (apiserver_terminated_watchers_total: each costs its client a new watch,
// or a re-list when its place has left the watch cache) as
// "closed:<resource>", the watch events it sent (one per event and
// watcher, apiserver_watch_events_total and _sizes_sum) as
// "watchEvents:<resource>" and "watchBytes:<resource>", and the writes it
// refused for a stale resourceVersion (409), counted among the writes too,
// as "conflicts:<resource>[/subresource]".
func scrapeWrites(ctx context.Context, cfg *rest.Config) (map[string]int, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading /metrics: %w", err)
	}
	return parseMetrics(string(raw)), nil
}

// parsed are the series parseMetrics reads.
var parsed = map[string]bool{"apiserver_request_total": true, "apiserver_terminated_watchers_total": true,
	"apiserver_watch_events_total": true, "apiserver_watch_events_sizes_sum": true}

// parseMetrics reads scrapeWrites' counts from the API server's metrics.
func parseMetrics(raw string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(raw, "\n") {
		if !strings.HasPrefix(line, "apiserver_") || !parsed[line[:max(0, strings.IndexByte(line, '{'))]] {
			continue // the bulk of the text: histograms and other series, not parsed
		}
		name, labels, v, ok := sample(line)
		switch {
		case !ok:
		case name == "apiserver_terminated_watchers_total":
			out["closed:"+labels["resource"]] += v
		case name == "apiserver_watch_events_total":
			out["watchEvents:"+labels["resource"]] += v
		case name == "apiserver_watch_events_sizes_sum":
			out["watchBytes:"+labels["resource"]] += v
		case name == "apiserver_request_total":
			countRequest(out, labels, v)
		}
	}
	return out
}

// countRequest adds one series of apiserver_request_total to parseMetrics'
// counts: writes by resource[/subresource], reads by verb, successful
// creates and writes refused for a stale resourceVersion.
func countRequest(out map[string]int, labels map[string]string, v int) {
	write := writeVerbs[labels["verb"]]
	key := labels["resource"]
	if !write {
		key = "read:" + labels["verb"] + ":" + key
	}
	if sub := labels["subresource"]; sub != "" {
		key += "/" + sub
	}
	out[key] += v
	if write && labels["code"] == "409" {
		out["conflicts:"+key] += v
	}
	if labels["verb"] == "POST" && labels["code"] == "201" && labels["subresource"] == "" {
		out["created:"+labels["resource"]] += v
	}
}

// sample reads one line of the metrics text format with labels: the
// metric's name, its labels and its value.
func sample(line string) (name string, labels map[string]string, v int, ok bool) {
	m := sampleLine.FindStringSubmatch(line)
	if m == nil {
		return "", nil, 0, false
	}
	f, err := strconv.ParseFloat(m[3], 64)
	if err != nil {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
		labels[p[1]] = p[2]
	}
	return m[1], labels, int(f), true
}

// settledWrites scrapes the write counts until they stop moving (the
// controllers' last events and status writes trail the last completion):
// two equal scrapes a second apart, for at most 30 s.
func settledWrites(ctx context.Context, cfg *rest.Config) (map[string]int, error) {
	prev, err := scrapeWrites(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for range 30 {
		time.Sleep(time.Second) // the interval between two scrapes
		cur, err := scrapeWrites(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if maps.Equal(prev, cur) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// operatorMetricsAddr is where the bench has the operator serve its
// metrics, at operatorMetrics.
const (
	operatorMetricsAddr = "127.0.0.1:6066"
	operatorMetrics     = "http://" + operatorMetricsAddr + "/metrics"
)

// operatorCounts is what the bench reads of the operator's own metrics.
type operatorCounts struct {
	// reconciles is its reconcile passes (safejob_reconciles_total, every
	// result): beside the completions it says how often the operator
	// decided a SafeJob, which its CPU per completion follows.
	reconciles int
	// statusWrites is its SafeJob status writes by kind
	// (safejob_status_writes_total): ledger (entries appended), counts
	// (only active, ready and terminating changed) and other.
	statusWrites map[string]int
}

// since is what was counted from before to c.
func (c operatorCounts) since(before operatorCounts) operatorCounts {
	d := operatorCounts{reconciles: c.reconciles - before.reconciles, statusWrites: map[string]int{}}
	for kind, n := range c.statusWrites {
		d.statusWrites[kind] = n - before.statusWrites[kind]
	}
	return d
}

// scrapeOperator reads the operator's counts from its metrics endpoint.
func scrapeOperator(ctx context.Context) (operatorCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := httpGet(ctx, operatorMetrics)
	if err != nil {
		return operatorCounts{}, fmt.Errorf("reading the operator's metrics: %w", err)
	}
	return parseOperator(string(raw)), nil
}

// httpGet returns the body of a GET of url that answered 200 OK.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("requesting %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("requesting %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("requesting %s: %s", url, resp.Status)
	}
	return raw, nil
}

// parseOperator sums safejob_reconciles_total over its results and
// safejob_status_writes_total by kind.
func parseOperator(raw string) operatorCounts {
	c := operatorCounts{statusWrites: map[string]int{}}
	for _, line := range strings.Split(raw, "\n") {
		name, labels, v, ok := sample(line)
		switch {
		case !ok:
		case name == "safejob_reconciles_total":
			c.reconciles += v
		case name == "safejob_status_writes_total":
			c.statusWrites[labels["kind"]] += v
		}
	}
	return c
}
