package main

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var (
	requestLine = regexp.MustCompile(`^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$`)
	closedLine  = regexp.MustCompile(`^apiserver_terminated_watchers_total\{([^}]*)\} ([0-9.e+]+)$`)
	labelPair   = regexp.MustCompile(`(\w+)="([^"]*)"`)
	writeVerbs  = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}
)

// scrapeWrites reads the API server's own count of requests
// (apiserver_request_total): writes by resource[/subresource], reads as
// "read:<verb>:<resource>", successful creates (201) as
// "created:<resource>", and the watchers it closed for falling behind
// (apiserver_terminated_watchers_total: each costs its client a new watch,
// or a re-list when its place has left the watch cache) as
// "closed:<resource>".
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

// parseMetrics reads scrapeWrites' counts from the API server's metrics.
func parseMetrics(raw string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(raw, "\n") {
		if m := closedLine.FindStringSubmatch(line); m != nil {
			for _, p := range labelPair.FindAllStringSubmatch(m[1], -1) {
				if v, err := strconv.ParseFloat(m[2], 64); err == nil && p[1] == "resource" {
					out["closed:"+p[2]] += int(v)
				}
			}
			continue
		}
		m := requestLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[1], -1) {
			labels[p[1]] = p[2]
		}
		key := labels["resource"]
		if !writeVerbs[labels["verb"]] {
			key = "read:" + labels["verb"] + ":" + key
		}
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		out[key] += int(v)
		if labels["verb"] == "POST" && labels["code"] == "201" && labels["subresource"] == "" {
			out["created:"+labels["resource"]] += int(v)
		}
	}
	return out
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
