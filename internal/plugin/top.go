package plugin

import (
	"io"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TopRow is one SafeJob in `kubectl safejob top`.
type TopRow struct {
	Name       string `json:"name"`
	Completion string `json:"completions"`
	Active     int32  `json:"active"`
	Ready      int32  `json:"ready"`
	Succeeded  int32  `json:"succeeded"`
	Failed     int32  `json:"failed"`
	// PerSecond is the completions per second since the previous sample
	// (0 on the first).
	PerSecond float64 `json:"completionsPerSecond"`
	State     string  `json:"state"`
}

// Top builds the rows of a sample of SafeJobs, with rates against the
// previous sample taken elapsed before (nil: none).
func Top(items []batchv1alpha1.SafeJob, prev map[string]int32, elapsed time.Duration) ([]TopRow, map[string]int32) {
	rows := make([]TopRow, 0, len(items))
	next := map[string]int32{}
	for k := range items {
		sj := &items[k]
		r := TopRow{Name: sj.Name, Completion: sj.Status.Completions, Active: sj.Status.Active, Ready: sj.Status.Ready,
			Succeeded: sj.Status.Succeeded, Failed: sj.Status.Failed, State: state(sj)}
		if before, ok := prev[sj.Name]; ok && elapsed > 0 {
			r.PerSecond = float64(sj.Status.Succeeded-before) / elapsed.Seconds()
		}
		next[sj.Name] = sj.Status.Succeeded
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b TopRow) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return rows, next
}

func state(sj *batchv1alpha1.SafeJob) string {
	for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed, batchv1alpha1.ConditionSuspended} {
		if c := meta.FindStatusCondition(sj.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return t
		}
	}
	if sj.Spec.Schedule != nil {
		return "Scheduled"
	}
	return "Running"
}

// PrintTop writes the rows as a table.
func PrintTop(w io.Writer, rows []TopRow) error {
	return writeTable(w, "NAME\tCOMPLETIONS\tACTIVE\tREADY\tSUCCEEDED\tFAILED\tPER SECOND\tSTATE", func(row func(string, ...any)) {
		for _, r := range rows {
			row("%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s", r.Name, r.Completion, r.Active, r.Ready, r.Succeeded, r.Failed, r.PerSecond, r.State)
		}
	})
}
