package plugin

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// TopRow is one SafeJob in `kubectl safejob top`.
type TopRow struct {
	Namespace  string `json:"namespace"`
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
	// Mode is the completion mode, Parallelism the pods that may run at once.
	Mode        string `json:"completionMode"`
	Parallelism int32  `json:"parallelism"`
}

// Top builds the rows of a sample of SafeJobs, with rates against the
// previous sample taken elapsed before (nil: none), sorted by namespace and
// name. The sample is keyed by namespace/name.
func Top(items []batchv1alpha1.SafeJob, prev map[string]int32, elapsed time.Duration) ([]TopRow, map[string]int32) {
	rows := make([]TopRow, 0, len(items))
	next := map[string]int32{}
	for k := range items {
		sj := &items[k]
		r := TopRow{Namespace: sj.Namespace, Name: sj.Name, Completion: sj.Status.Completions, Active: sj.Status.Active,
			Ready: sj.Status.Ready, Succeeded: sj.Status.Succeeded, Failed: sj.Status.Failed, State: state(sj),
			Mode: string(sj.Spec.CompletionMode), Parallelism: ptr.Deref(sj.Spec.Parallelism, 1)}
		if r.Mode == "" {
			r.Mode = string(batchv1alpha1.NonIndexedCompletion)
		}
		key := sj.Namespace + "/" + sj.Name
		if before, ok := prev[key]; ok && elapsed > 0 {
			r.PerSecond = float64(sj.Status.Succeeded-before) / elapsed.Seconds()
		}
		next[key] = sj.Status.Succeeded
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b TopRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
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

// PrintTop writes the rows as a table: with allNamespaces, each row's
// namespace first; wide, with the completion mode and parallelism.
func PrintTop(w io.Writer, rows []TopRow, allNamespaces bool, o TableOptions) error {
	header := "NAME\tCOMPLETIONS\tACTIVE\tREADY\tSUCCEEDED\tFAILED\tPER SECOND\tSTATE"
	if allNamespaces {
		header = "NAMESPACE\t" + header
	}
	if o.Wide {
		header += "\tMODE\tPARALLELISM"
	}
	return writeTable(w, o, header, func(row func(string, ...any)) {
		for _, r := range rows {
			line := fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%s", r.Name, r.Completion, r.Active, r.Ready, r.Succeeded, r.Failed,
				r.PerSecond, r.State)
			if allNamespaces {
				line = r.Namespace + "\t" + line
			}
			if o.Wide {
				line += fmt.Sprintf("\t%s\t%d", r.Mode, r.Parallelism)
			}
			row("%s", line)
		}
	})
}
