package runs

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// activeRef is the reference status.activeRuns last gave an open run (empty
// when it has none): it keeps the run's UID once the run was observed.
func (d *decision) activeRef(name string) corev1.ObjectReference {
	return activeRef(d.in.Status, name)
}

func activeRef(status *batchv1alpha1.SafeJobStatus, name string) corev1.ObjectReference {
	for _, ref := range status.ActiveRuns {
		if ref.Name == name {
			return ref
		}
	}
	return corev1.ObjectReference{}
}

// runUID is the UID of an open run as far as the parent knows it: observed
// now, seen or created by this process, or recorded in status.activeRuns
// ("" when it never learned it).
func (d *decision) runUID(name string) types.UID {
	if run := d.in.Runs[name]; run != nil {
		return run.UID
	}
	if uid := d.in.Seen[name]; uid != "" {
		return uid
	}
	return d.activeRef(name).UID
}

// UIDs maps the UID of every run of the parent it knows to the run's
// name: the runs it controls (Runs), the runs this process saw or created,
// the open runs status.activeRuns records, and the listed outcome entries.
// Only a pod controlled by one of these UIDs can hold back a run under
// Forbid or Replace; a stranger's pod never does, whatever it carries. A
// run folded into the checkpoint is no longer known, nor are its pods:
// under Forbid and Replace no run is committed while a pod of a known
// earlier run is left, so a run is folded only after its pods were gone.
func UIDs(in *Input) map[types.UID]string {
	out := map[types.UID]string{}
	for _, e := range in.Status.Ledger.Entries {
		if e.UID != "" && e.Run != "" {
			out[types.UID(e.UID)] = e.Run
		}
	}
	for _, ref := range in.Status.ActiveRuns {
		if ref.UID != "" {
			out[ref.UID] = ref.Name
		}
	}
	for name, uid := range in.Seen {
		if uid != "" {
			out[uid] = name
		}
	}
	for name, run := range in.Runs {
		out[run.UID] = name
	}
	return out
}

// ScheduledTime reads a run's scheduled time from its annotation.
func ScheduledTime(run *batchv1alpha1.SafeJob) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, run.Annotations[batchv1alpha1.ScheduledTimeAnnotation])
	return t, err == nil
}
