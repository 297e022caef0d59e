package cluster

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKwokConfig checks KWOK's --config: the stages alone by default,
// and with pod workers set, the same followed by a KwokConfiguration
// that plays that many pod stages at once.
func TestKwokConfig(t *testing.T) {
	if got := kwokConfig(0); !bytes.Equal(got, kwokStages) {
		t.Fatalf("kwokConfig(0) is not the stages alone")
	}
	got := kwokConfig(32)
	if !bytes.HasPrefix(got, kwokStages) {
		t.Fatalf("kwokConfig(32) does not start with the pod stages")
	}
	docs := strings.Split(string(got), "\n---\n")
	var cfg struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Options    struct {
			PodPlayStageParallelism int `json:"podPlayStageParallelism"`
		} `json:"options"`
	}
	if err := yaml.UnmarshalStrict([]byte(docs[len(docs)-1]), &cfg); err != nil {
		t.Fatalf("last document of kwokConfig(32): %v", err)
	}
	if cfg.APIVersion != "config.kwok.x-k8s.io/v1alpha1" || cfg.Kind != "KwokConfiguration" || cfg.Options.PodPlayStageParallelism != 32 {
		t.Fatalf("last document of kwokConfig(32) = %+v, want a KwokConfiguration with podPlayStageParallelism 32", cfg)
	}
	if n := len(kwokConfig(32)); n != len(got) {
		t.Fatalf("kwokConfig changed the embedded stages: %d bytes, then %d", len(got), n)
	}
}
