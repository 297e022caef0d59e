package jobs

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
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

// TestLaunchNamedApartFromHeldNames: a launch whose usual pod name is held
// by a pod of an earlier SafeJob of the same name (deleted and created
// again) is named apart, from this SafeJob's UID, instead of waiting out
// the create fence to be recorded Lost; other launches keep their names,
// and the name apart still reads as the launch's own (its suffix).
func TestLaunchNamedApartFromHeldNames(t *testing.T) {
	spec := batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](2),
		CompletionMode: batchv1alpha1.IndexedCompletion}
	in := &Input{Name: "etl", UID: "uid-b", Spec: &spec, Status: &batchv1alpha1.SafeJobStatus{},
		Now: time.Unix(1000, 0), Held: map[string]bool{"etl-0-0": true}}
	plan, err := Decide(in)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range plan.Append {
		if e.Type == batchv1alpha1.EntryLaunched {
			names = append(names, e.Pod)
		}
	}
	apart := PodNameApart("etl", "uid-b", 0, 0)
	if want := []string{apart, "etl-1-0"}; !slices.Equal(names, want) {
		t.Fatalf("launched %v, want %v", names, want)
	}
	if apart == "etl-0-0" || !hasPodSuffix(apart, 0, 0) || PodNameApart("etl", "uid-c", 0, 0) == apart {
		t.Errorf("name apart %q: not apart, not the launch's, or not the UID's", apart)
	}
	long := strings.Repeat("x", 63)
	if n := PodNameApart(long, "uid-b", 12345, 6); len(n) > ledger.MaxNameLen || !hasPodSuffix(n, 12345, 6) {
		t.Errorf("name apart of a long name %q (%d characters)", n, len(n))
	}
}
