package plugin

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/runs"
)

// Started is what `kubectl safejob run -o json` prints: the run asked for
// by hand, as the parent's ledger records it; its fields are stable.
type Started struct {
	Namespace string `json:"namespace"`
	Parent    string `json:"parent"`
	Name      string `json:"name"`
	// RequestedAt is when the parent committed the run (the entry's
	// scheduledTime).
	RequestedAt time.Time `json:"requestedAt"`
	// Seq is the ledger seq of the entry that authorised the run.
	Seq int64 `json:"seq"`
}

// manualSuffix is what a generated manual run name adds to the parent's.
const manualSuffix = "-manual-"

// ManualRunName returns a name for a run of parent asked for by hand, as
// kubectl create job --from=cronjob/... names one: the parent's name
// (shortened to fit), "-manual-" and five random letters (letters only, so
// that it never has the -<digits> form of a scheduled run's name).
func ManualRunName(parent string, rng *rand.Rand) string {
	const letters = "bcdfghjklmnpqrstvwxz"
	suffix := make([]byte, 5)
	for k := range suffix {
		suffix[k] = letters[rng.IntN(len(letters))]
	}
	return ledger.ShortName(parent, ledger.MaxNameLen-len(manualSuffix)-len(suffix)) + manualSuffix + string(suffix)
}

// CheckRunRequest says why a run named name cannot be asked for by hand on
// parent, whose runs (the SafeJobs it controls) are children: it has no
// schedule, the name is not valid, the ledger records a run of that name or
// one exists, or an earlier request is not recorded yet.
func CheckRunRequest(parent *batchv1alpha1.SafeJob, children []batchv1alpha1.SafeJob, name string) error {
	if parent.Spec.Schedule == nil {
		return fmt.Errorf("SafeJob %s/%s has no schedule: it has no runs to start", parent.Namespace, parent.Name)
	}
	if err := runs.ValidateManualName(name); err != nil {
		return fmt.Errorf("run name: %w", err)
	}
	st, err := runs.Replay(&parent.Status.Ledger)
	if err != nil {
		return fmt.Errorf("SafeJob %s/%s: ledger: %w", parent.Namespace, parent.Name, err)
	}
	if st.HasRun(name) {
		return fmt.Errorf("SafeJob %s/%s has recorded a run named %s already", parent.Namespace, parent.Name, name)
	}
	for k := range children {
		if children[k].Name == name && batchv1alpha1.IsRunOf(&children[k], parent) {
			return fmt.Errorf("SafeJob %s/%s has a run named %s already", parent.Namespace, parent.Name, name)
		}
	}
	if prev := parent.Annotations[batchv1alpha1.RunNowAnnotation]; prev != "" && !st.HasRun(prev) {
		return fmt.Errorf("SafeJob %s/%s: the run %s asked for earlier is not started yet; "+
			"see its events (kubectl describe safejob %s)", parent.Namespace, parent.Name, prev, parent.Name)
	}
	return nil
}

// RunRecorded returns the run named name as parent's ledger records it
// (nil while it does not).
func RunRecorded(parent *batchv1alpha1.SafeJob, name string) *Started {
	for _, e := range parent.Status.Ledger.Entries {
		if e.Type == batchv1alpha1.EntryScheduled && e.Run == name && e.ScheduledTime != nil {
			return &Started{Namespace: parent.Namespace, Parent: parent.Name, Name: name,
				RequestedAt: e.ScheduledTime.UTC(), Seq: e.Seq}
		}
	}
	return nil
}

// PrintStarted writes the run as kubectl create prints what it made.
func PrintStarted(w io.Writer, s *Started) error {
	_, err := fmt.Fprintf(w, "safejob.batch.safejob.dev/%s created (ledger seq %d of %s)\n", s.Name, s.Seq, s.Parent)
	return err //nolint:wrapcheck // a failed write to stdout says enough
}
