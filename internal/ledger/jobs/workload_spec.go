package jobs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// SuspendedAnnotation marks a Workload SafeJob deactivated because its
// SafeJob was suspended. It is written in the same update that sets
// spec.active to false, so SafeJob re-activates only a Workload it
// deactivated itself: a deactivation by Kueue (a rejected admission check,
// the requeuing limit, the maximum execution time) or by an admin (kubectl
// kueue stop workload) carries no mark and is Kueue's decision to undo.
const SuspendedAnnotation = "batch.safejob.dev/deactivated-for-suspend"

// specUpdate carries a change of user suspend to the Workload and, while
// it holds no quota, a changed queue label and a larger pod set (Kueue's
// integrations update a queued Workload to match its job, keeping its place
// in the queue). With the reservation held the queue stays, and an event
// says so. It returns the new spec (nil when unchanged) and whether the
// Workload is then marked deactivated for suspend.
func specUpdate(in *WorkloadInput) (*kueue.WorkloadSpec, bool, *WorkloadEvent) {
	wl := in.Workload
	active, marked := activation(in)
	reserved := meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	pending := !reserved && wl.Status.Admission == nil
	queue := kueue.LocalQueueName(in.Queue)
	growPodSet := pending && WorkloadCount(in.Spec, in.Status) > podSetCount(wl) && podSetCount(wl) > 0
	if ptr.Deref(wl.Spec.Active, true) == active && suspendMarked(wl) == marked && (wl.Spec.QueueName == queue || reserved) && !growPodSet {
		if wl.Spec.QueueName != queue {
			return nil, marked, &WorkloadEvent{Warning: true, Reason: EventQueueChangeIgnored, Message: fmt.Sprintf(
				"The Workload holds quota in LocalQueue %s; the new queue %s applies only if it is evicted", wl.Spec.QueueName, queue)}
		}
		return nil, marked, nil
	}
	spec := wl.Spec.DeepCopy()
	spec.Active = ptr.To(active)
	if !reserved {
		spec.QueueName = queue
	}
	if growPodSet {
		for i := range spec.PodSets {
			if spec.PodSets[i].Name == kueue.DefaultPodSetName {
				spec.PodSets[i].Count = WorkloadCount(in.Spec, in.Status)
			}
		}
	}
	return spec, marked, nil
}

// activation decides the Workload's spec.active and its suspend mark. A
// suspended SafeJob deactivates an active Workload and marks it; a resumed
// one re-activates only a Workload it marked. A Workload deactivated by
// anyone else stays inactive whatever the SafeJob's suspend: as Kueue's own
// job integrations do, SafeJob stops and says why, and never overrides
// Kueue's decision.
func activation(in *WorkloadInput) (active, marked bool) {
	wl := in.Workload
	active, marked = ptr.Deref(wl.Spec.Active, true), suspendMarked(wl)
	switch suspend := ptr.Deref(in.Spec.Suspend, false); {
	case suspend && active:
		return false, true
	case !suspend && marked:
		return true, false
	}
	return active, marked
}

// suspendMarked reports whether SafeJob deactivated the Workload for suspend.
func suspendMarked(wl *kueue.Workload) bool { return wl.Annotations[SuspendedAnnotation] == "true" }

// Deactivated reports whether someone other than SafeJob deactivated the
// Workload: it stays stopped until the Workload is activated again.
func Deactivated(wl *kueue.Workload) bool {
	return wl != nil && !ptr.Deref(wl.Spec.Active, true) && !suspendMarked(wl)
}
