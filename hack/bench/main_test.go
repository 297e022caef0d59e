package main

import "testing"

func TestCheckPodDurations(t *testing.T) {
	for _, c := range []struct {
		duration, max string
		ok            bool
	}{
		{"1s", "", true},
		{"1s", "40s", true},
		{"500ms", "500ms", true},
		{"0s", "1s", true},
		{"1s", "500ms", false}, // KWOK would run every pod 500ms
		{"1s", "forty", false},
		{"one", "", false},
		{"-1s", "", false},
	} {
		err := checkPodDurations(c.duration, c.max)
		if (err == nil) != c.ok {
			t.Errorf("checkPodDurations(%q, %q) = %v, want ok %v", c.duration, c.max, err, c.ok)
		}
	}
}

func TestPodTemplateDurationMax(t *testing.T) {
	const annotation = "kwok.safejob.dev/duration-max"
	if got, ok := podTemplate("1s", "").Annotations[annotation]; ok {
		t.Errorf("without a maximum the template carries %s=%q", annotation, got)
	}
	tmpl := podTemplate("1s", "40s")
	if got := tmpl.Annotations[annotation]; got != "40s" {
		t.Errorf("%s = %q, want 40s", annotation, got)
	}
	if got := tmpl.Annotations["kwok.safejob.dev/duration"]; got != "1s" {
		t.Errorf("kwok.safejob.dev/duration = %q, want 1s", got)
	}
}
