package jobs

import (
	"strings"
	"testing"
)

func TestPodName(t *testing.T) {
	cases := map[string]struct {
		safeJob        string
		index, attempt int32
		want           string
	}{
		"short":      {safeJob: "train", index: 3, attempt: 1, want: "train-3-1"},
		"at the cap": {safeJob: strings.Repeat("a", 59), want: strings.Repeat("a", 59) + "-0-0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := PodName(tc.safeJob, tc.index, tc.attempt); got != tc.want {
				t.Errorf("PodName = %q, want %q", got, tc.want)
			}
		})
	}
	long := strings.Repeat("x", 200)
	a, b := PodName(long, 12, 3), PodName(long+"y", 12, 3)
	if len(a) > 63 || !strings.HasSuffix(a, "-12-3") {
		t.Errorf("long name %q: want at most 63 characters ending -12-3", a)
	}
	if a == b {
		t.Errorf("distinct long SafeJob names share pod name %q", a)
	}
	if PodName(long, 12, 3) != a {
		t.Error("PodName is not deterministic")
	}
}
