package controller

import (
	"context"
	"crypto/sha1" //nolint:gosec // the Workload name hash of Kueue, not a security use
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// Keys Kueue defines for the jobs it queues.
const (
	QueueNameLabel         = "kueue.x-k8s.io/queue-name"
	PriorityClassLabel     = "kueue.x-k8s.io/priority-class"
	MaxExecTimeLabel       = "kueue.x-k8s.io/max-exec-time-seconds"
	JobUIDLabel            = "kueue.x-k8s.io/job-uid"
	PodSetLabel            = "kueue.x-k8s.io/podset"
	WorkloadAnnotation     = "kueue.x-k8s.io/workload"
	ResourceInUseFinalizer = kueue.ResourceInUseFinalizerName
	mainPodSet             = kueue.DefaultPodSetName

	// workloadOwnerIndex indexes Workloads by the UID of their SafeJob.
	workloadOwnerIndex = "metadata.ownerReferences.safejobUID"
)

// Reasons of the Admitted condition beyond Kueue's own.
const (
	reasonKueueMissing    = "KueueNotInstalled"
	reasonWorkloadMissing = "WorkloadMissing"
	reasonWorkloadDeleted = "WorkloadDeleted"
)

// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/finalizers,verbs=update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=resourceflavors;workloadpriorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;list;watch

// queueName is the LocalQueue a SafeJob is queued in, "" when it is not queued.
func queueName(sj *batchv1alpha1.SafeJob) string { return sj.Labels[QueueNameLabel] }

// WorkloadName is the name Kueue gives the Workload of a job:
// "safejob-<name>-<hash>", hash over kind, group, name and UID.
func WorkloadName(sj *batchv1alpha1.SafeJob) string {
	prefix := "safejob-" + sj.Name
	if len(prefix) > 253-6 {
		prefix = prefix[:253-6]
	}
	// Kueue hashes "Kind\nGroup\nname\nuid".
	h := sha1.New() //nolint:gosec // Kueue's naming scheme
	h.Write([]byte(strings.Join([]string{"SafeJob", batchv1alpha1.GroupVersion.Group, sj.Name, string(sj.UID)}, "\n")))
	sum := h.Sum(nil)
	return strings.ToLower(prefix) + "-" + hex.EncodeToString(sum)[:5]
}

// queued is what the Kueue side gathered for one queued SafeJob.
type queued struct {
	wl   *kueue.Workload // nil when there is none
	gate *ledger.QueueGate
	// podInfo is applied to every pod created while admitted.
	podInfo *podSetInfo
}

// podSetInfo is what an admission adds to the pods of the main pod set.
type podSetInfo struct {
	labels, annotations, nodeSelector map[string]string
	tolerations                       []corev1.Toleration
}

// syncWorkload makes sure a queued SafeJob has its Workload and says whether
// pods may run: only while the Workload is Admitted and not Evicted.
func (r *SafeJobReconciler) syncWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob) (*queued, error) {
	q := &queued{}
	if !r.Kueue {
		q.gate = &ledger.QueueGate{Reason: reasonKueueMissing,
			Message: fmt.Sprintf("label %s is set but the Workload API (kueue.x-k8s.io/v1beta2) is not served; install Kueue", QueueNameLabel)}
		return q, nil
	}
	wl, err := r.ownWorkload(ctx, sj)
	if err != nil {
		return nil, err
	}
	q.wl = wl
	switch {
	case wl == nil && sj.Status.Active > 0:
		q.gate = &ledger.QueueGate{Reason: reasonWorkloadMissing, Message: "the Workload is gone; stopping pods before queueing again"}
		return q, nil
	case wl == nil:
		if finishedJob(sj) {
			return q, nil // nothing left to queue
		}
		if q.wl, err = r.createWorkload(ctx, sj); err != nil {
			return nil, err
		}
		q.gate = &ledger.QueueGate{Reason: batchv1alpha1.ReasonQueued,
			Message: fmt.Sprintf("Workload %s created in LocalQueue %s", q.wl.Name, queueName(sj))}
		return q, nil
	case wl.DeletionTimestamp != nil:
		q.gate = &ledger.QueueGate{Reason: reasonWorkloadDeleted, Message: "the Workload is being deleted"}
		return q, nil
	}
	if err := r.syncWorkloadSpec(ctx, sj, wl); err != nil {
		return nil, err
	}
	q.gate = gateOf(wl)
	if q.gate.Admitted {
		if q.podInfo, err = r.podSetInfo(ctx, wl); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// gateOf reads a Workload's admission.
func gateOf(wl *kueue.Workload) *ledger.QueueGate {
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted); c != nil && c.Status == metav1.ConditionTrue {
		return &ledger.QueueGate{Reason: c.Reason, Message: c.Message}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		return &ledger.QueueGate{Reason: c.Reason, Message: "the Workload is finished: " + c.Message}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadAdmitted); c != nil && c.Status == metav1.ConditionTrue &&
		wl.Status.Admission != nil {
		return &ledger.QueueGate{Admitted: true,
			Message: fmt.Sprintf("Workload %s admitted by ClusterQueue %s", wl.Name, wl.Status.Admission.ClusterQueue)}
	}
	if c := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil {
		if c.Status == metav1.ConditionTrue {
			return &ledger.QueueGate{Reason: "WaitingForAdmissionChecks", Message: c.Message + "; waiting for admission checks"}
		}
		return &ledger.QueueGate{Reason: batchv1alpha1.ReasonQueued, Message: c.Message}
	}
	return &ledger.QueueGate{Reason: batchv1alpha1.ReasonQueued,
		Message: fmt.Sprintf("Workload %s waits in LocalQueue %s", wl.Name, wl.Spec.QueueName)}
}

// ownWorkload returns the SafeJob's Workload, deleting any other Workload it owns.
func (r *SafeJobReconciler) ownWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob) (*kueue.Workload, error) {
	var list kueue.WorkloadList
	if err := r.Client.List(ctx, &list, client.InNamespace(sj.Namespace),
		client.MatchingFields{workloadOwnerIndex: string(sj.UID)}); err != nil {
		return nil, fmt.Errorf("listing Workloads: %w", err)
	}
	name := WorkloadName(sj)
	var own *kueue.Workload
	var errs []error
	for i := range list.Items {
		wl := &list.Items[i]
		if wl.Name == name {
			own = wl
			continue
		}
		errs = append(errs, r.dropWorkload(ctx, wl))
	}
	return own, errors.Join(errs...)
}

// dropWorkload releases and deletes a Workload that is not the SafeJob's.
func (r *SafeJobReconciler) dropWorkload(ctx context.Context, wl *kueue.Workload) error {
	if err := r.releaseWorkload(ctx, wl); err != nil {
		return err
	}
	if err := r.Client.Delete(ctx, wl); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Workload %s: %w", wl.Name, err)
	}
	return nil
}

// releaseWorkload removes the resource-in-use finalizer.
func (r *SafeJobReconciler) releaseWorkload(ctx context.Context, wl *kueue.Workload) error {
	if !slices.Contains(wl.Finalizers, ResourceInUseFinalizer) {
		return nil
	}
	return r.removeFinalizer(ctx, func() client.Object { return &kueue.Workload{} }, client.ObjectKeyFromObject(wl), ResourceInUseFinalizer)
}

// createWorkload creates the Workload of a SafeJob, as Kueue builds one for
// a batch/v1 Job: one pod set "main" of min(parallelism, completions left)
// pods, the queue, the priority and the maximum execution time.
func (r *SafeJobReconciler) createWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob) (*kueue.Workload, error) {
	left := ptr.Deref(sj.Spec.Completions, 1) - sj.Status.Succeeded
	count := max(min(ptr.Deref(sj.Spec.Parallelism, 1), left), 1)
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{
			Name:       WorkloadName(sj),
			Namespace:  sj.Namespace,
			Labels:     map[string]string{JobUIDLabel: string(sj.UID)},
			Finalizers: []string{ResourceInUseFinalizer},
		},
		Spec: kueue.WorkloadSpec{
			QueueName: kueue.LocalQueueName(queueName(sj)),
			PodSets:   []kueue.PodSet{{Name: mainPodSet, Count: count, Template: *sj.Spec.Template.DeepCopy()}},
			Active:    ptr.To(!ptr.Deref(sj.Spec.Suspend, false)),
		},
	}
	if v, err := strconv.ParseInt(sj.Labels[MaxExecTimeLabel], 10, 32); err == nil && v > 0 {
		wl.Spec.MaximumExecutionTimeSeconds = ptr.To(int32(v))
	}
	if err := r.setPriority(ctx, sj, wl); err != nil {
		return nil, err
	}
	if err := controllerutil.SetControllerReference(sj, wl, r.Client.Scheme()); err != nil {
		return nil, fmt.Errorf("owning Workload: %w", err)
	}
	err := r.Client.Create(ctx, wl)
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating Workload %s: the previous one is still there: %w", wl.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("creating Workload %s: %w", wl.Name, err)
	}
	r.Recorder.Eventf(sj, wl, corev1.EventTypeNormal, "CreatedWorkload", "Queue", "Created Workload %s in LocalQueue %s",
		wl.Name, queueName(sj))
	return wl, nil
}

// setPriority takes the priority from the WorkloadPriorityClass label, or
// else from the pod template's priorityClassName, as Kueue does.
func (r *SafeJobReconciler) setPriority(ctx context.Context, sj *batchv1alpha1.SafeJob, wl *kueue.Workload) error {
	if name := sj.Labels[PriorityClassLabel]; name != "" {
		wpc := &kueue.WorkloadPriorityClass{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, wpc); err != nil {
			return fmt.Errorf("getting WorkloadPriorityClass %s: %w", name, err)
		}
		wl.Spec.PriorityClassRef = &kueue.PriorityClassRef{Group: kueue.WorkloadPriorityClassGroup,
			Kind: kueue.WorkloadPriorityClassKind, Name: name}
		wl.Spec.Priority = ptr.To(wpc.Value)
		return nil
	}
	if name := sj.Spec.Template.Spec.PriorityClassName; name != "" {
		pc := &schedulingv1.PriorityClass{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, pc); err != nil {
			return fmt.Errorf("getting PriorityClass %s: %w", name, err)
		}
		wl.Spec.PriorityClassRef = &kueue.PriorityClassRef{Group: kueue.PodPriorityClassGroup, Kind: kueue.PodPriorityClassKind, Name: name}
		wl.Spec.Priority = ptr.To(pc.Value)
	}
	return nil
}

// syncWorkloadSpec carries user suspend (spec.active) and, while no quota is
// reserved, a changed queue label to the Workload.
func (r *SafeJobReconciler) syncWorkloadSpec(ctx context.Context, sj *batchv1alpha1.SafeJob, wl *kueue.Workload) error {
	active := !ptr.Deref(sj.Spec.Suspend, false)
	reserved := meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadQuotaReserved)
	queue := kueue.LocalQueueName(queueName(sj))
	if ptr.Deref(wl.Spec.Active, true) == active && (wl.Spec.QueueName == queue || reserved) {
		if wl.Spec.QueueName != queue {
			r.Recorder.Eventf(sj, wl, corev1.EventTypeWarning, "QueueChangeIgnored", "Queue",
				"The Workload holds quota in LocalQueue %s; the new queue %s applies only if it is evicted", wl.Spec.QueueName, queue)
		}
		return nil
	}
	updated := wl.DeepCopy()
	updated.Spec.Active = ptr.To(active)
	if !reserved {
		updated.Spec.QueueName = queue
	}
	if err := r.Client.Update(ctx, updated); err != nil {
		return fmt.Errorf("updating Workload %s: %w", wl.Name, err)
	}
	*wl = *updated
	return nil
}

// podSetInfo builds what the admission adds to pods: the flavors' node
// labels and tolerations, the admission checks' pod set updates, the pod
// set label and the Workload annotation.
func (r *SafeJobReconciler) podSetInfo(ctx context.Context, wl *kueue.Workload) (*podSetInfo, error) {
	info := &podSetInfo{
		labels:       map[string]string{PodSetLabel: string(mainPodSet)},
		annotations:  map[string]string{WorkloadAnnotation: wl.Name},
		nodeSelector: map[string]string{},
	}
	for _, psa := range wl.Status.Admission.PodSetAssignments {
		if psa.Name != mainPodSet {
			continue
		}
		flavors := slices.Sorted(maps.Values(psa.Flavors))
		for _, name := range slices.Compact(flavors) {
			rf := &kueue.ResourceFlavor{}
			if err := r.Client.Get(ctx, client.ObjectKey{Name: string(name)}, rf); err != nil {
				return nil, fmt.Errorf("getting ResourceFlavor %s: %w", name, err)
			}
			maps.Copy(info.nodeSelector, rf.Spec.NodeLabels)
			info.tolerations = append(info.tolerations, rf.Spec.Tolerations...)
		}
	}
	for _, check := range wl.Status.AdmissionChecks {
		for _, u := range check.PodSetUpdates {
			if u.Name != mainPodSet {
				continue
			}
			maps.Copy(info.labels, u.Labels)
			maps.Copy(info.annotations, u.Annotations)
			maps.Copy(info.nodeSelector, u.NodeSelector)
			info.tolerations = append(info.tolerations, u.Tolerations...)
		}
	}
	return info, nil
}

// apply adds the admission to a pod about to be created.
func (info *podSetInfo) apply(pod *corev1.Pod) {
	if info == nil {
		return
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	maps.Copy(pod.Labels, info.labels)
	maps.Copy(pod.Annotations, info.annotations)
	if len(info.nodeSelector) > 0 {
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		maps.Copy(pod.Spec.NodeSelector, info.nodeSelector)
	}
	for _, t := range info.tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(o corev1.Toleration) bool { return o.MatchToleration(&t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
}

// finishedJob reports whether a SafeJob is Complete or Failed.
func finishedJob(sj *batchv1alpha1.SafeJob) bool { return finishedJobStatus(&sj.Status) != nil }

// afterDecide updates the Workload from what this reconcile decided and
// wrote: the reservation is given back once an evicted SafeJob has no pod
// left, PodsReady and reclaimablePods follow the pods, Finished follows the
// SafeJob, and a finished or deleted Workload loses its finalizer.
func (r *SafeJobReconciler) afterDecide(ctx context.Context, sj *batchv1alpha1.SafeJob, q *queued, plan *ledger.Plan) error {
	wl := q.wl
	if wl == nil {
		return nil
	}
	if done, err := r.settleWorkload(ctx, sj, wl, plan); done || err != nil {
		return err
	}
	updated := wl.DeepCopy()
	now := metav1.NewTime(r.Clock.Now())
	setCond := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, LastTransitionTime: now, ObservedGeneration: wl.Generation})
	}
	status := plan.Status
	switch {
	case finishedJobStatus(&status) != nil:
		c := finishedJobStatus(&status)
		reason := kueue.WorkloadFinishedReasonSucceeded
		if c.Type == batchv1alpha1.ConditionFailed {
			reason = kueue.WorkloadFinishedReasonFailed
		}
		setCond(kueue.WorkloadFinished, metav1.ConditionTrue, reason, c.Message)
	case !q.gate.Admitted:
		if giveBackQuota(updated, plan, setCond) {
			log.FromContext(ctx).Info("Giving back the Workload's quota: no pod left", "workload", klogRef(wl))
		}
	default:
		syncPodsReady(updated, status, setCond)
		updated.Status.ReclaimablePods = reclaimable(sj, wl, status)
	}
	return r.writeWorkloadStatus(ctx, sj, wl, updated)
}

// settleWorkload handles a Workload that is finished or deleted: its
// finalizer goes once no pod runs; one finished before its SafeJob (Kueue
// took it for an orphan, reason OwnerNotFound) is replaced. done is true
// when nothing else is to be done with the Workload.
func (r *SafeJobReconciler) settleWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob, wl *kueue.Workload,
	plan *ledger.Plan) (bool, error) {
	finished := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadFinished)
	switch {
	case finished != nil && finished.Status == metav1.ConditionTrue && finishedJob(sj):
		return true, r.releaseWorkload(ctx, wl)
	case finished != nil && finished.Status == metav1.ConditionTrue && plan.Stopped:
		r.Recorder.Eventf(sj, wl, corev1.EventTypeWarning, "WorkloadFinishedEarly", "Queue",
			"Workload %s was finished (%s: %s) before the SafeJob; queueing again", wl.Name, finished.Reason, finished.Message)
		return true, r.dropWorkload(ctx, wl)
	case finished != nil && finished.Status == metav1.ConditionTrue:
		return true, nil // stopping the pods first
	case wl.DeletionTimestamp != nil && plan.Stopped:
		return true, r.releaseWorkload(ctx, wl)
	case wl.DeletionTimestamp != nil:
		return true, nil
	}
	return false, nil
}

// giveBackQuota clears the reservation of an evicted Workload once no pod
// is left, as Kueue's job integrations do, and reports whether it did.
func giveBackQuota(wl *kueue.Workload, plan *ledger.Plan, setCond func(string, metav1.ConditionStatus, string, string)) bool {
	evicted := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
	if evicted == nil || evicted.Status != metav1.ConditionTrue || wl.Status.Admission == nil || !plan.Stopped {
		return false
	}
	requeued := metav1.ConditionFalse
	if evicted.Reason == kueue.WorkloadEvictedByPreemption || evicted.Reason == kueue.WorkloadEvictedDueToNodeFailures {
		requeued = metav1.ConditionTrue
	}
	setCond(kueue.WorkloadRequeued, requeued, evicted.Reason, evicted.Message)
	setCond(kueue.WorkloadQuotaReserved, metav1.ConditionFalse, "Pending", evicted.Message)
	setCond(kueue.WorkloadAdmitted, metav1.ConditionFalse, "NoReservation", "The workload has no reservation")
	wl.Status.Admission = nil
	return true
}

// writeWorkloadStatus writes a changed Workload status with UpdateStatus
// and the resourceVersion it was read at.
func (r *SafeJobReconciler) writeWorkloadStatus(ctx context.Context, sj *batchv1alpha1.SafeJob, wl, updated *kueue.Workload) error {
	if equalityOfStatus(wl, updated) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // the newer Workload brings us back
		}
		return fmt.Errorf("updating Workload %s status: %w", wl.Name, err)
	}
	if c := meta.FindStatusCondition(updated.Status.Conditions, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(sj, updated, corev1.EventTypeNormal, "FinishedWorkload", "Queue", "Workload %s is finished (%s)", wl.Name, c.Reason)
	}
	return nil
}

// finishedJobStatus returns the Complete or Failed condition when True.
func finishedJobStatus(s *batchv1alpha1.SafeJobStatus) *metav1.Condition {
	for _, t := range []string{batchv1alpha1.ConditionComplete, batchv1alpha1.ConditionFailed} {
		if c := meta.FindStatusCondition(s.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// podsReadyWaitForRecovery is Kueue's PodsReady reason after a ready pod failed.
const podsReadyWaitForRecovery = "WaitForRecovery"

// syncPodsReady sets PodsReady as Kueue's job integrations do: True once
// every pod of the pod set is ready or succeeded.
func syncPodsReady(wl *kueue.Workload, status batchv1alpha1.SafeJobStatus, setCond func(string, metav1.ConditionStatus, string, string)) {
	count := int32(0)
	for _, ps := range wl.Spec.PodSets {
		count += ps.Count
	}
	prev := meta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadPodsReady)
	if status.Ready+status.Succeeded >= count {
		reason := "Started"
		if prev != nil && (prev.Reason == podsReadyWaitForRecovery || prev.Reason == "Recovered") {
			reason = "Recovered"
		}
		if prev == nil || prev.Status != metav1.ConditionTrue || prev.Reason != reason {
			setCond(kueue.WorkloadPodsReady, metav1.ConditionTrue, reason, "All pods reached readiness and the workload is running")
		}
		return
	}
	reason, msg := "WaitForStart", "Not all pods are ready or succeeded"
	if prev != nil && (prev.Status == metav1.ConditionTrue || prev.Reason == podsReadyWaitForRecovery) {
		reason, msg = podsReadyWaitForRecovery, "At least one pod has failed, waiting for recovery"
	}
	if prev == nil || prev.Status != metav1.ConditionFalse || prev.Reason != reason {
		setCond(kueue.WorkloadPodsReady, metav1.ConditionFalse, reason, msg)
	}
}

// reclaimable is the quota a SafeJob no longer needs: pods of the pod set
// beyond the completions still to do.
func reclaimable(sj *batchv1alpha1.SafeJob, wl *kueue.Workload, status batchv1alpha1.SafeJobStatus) []kueue.ReclaimablePod {
	if len(wl.Spec.PodSets) == 0 {
		return nil
	}
	left := ptr.Deref(sj.Spec.Completions, 1) - status.Succeeded
	if n := wl.Spec.PodSets[0].Count - left; n > 0 {
		return []kueue.ReclaimablePod{{Name: mainPodSet, Count: n}}
	}
	return wl.Status.ReclaimablePods
}

func equalityOfStatus(a, b *kueue.Workload) bool {
	return slices.EqualFunc(a.Status.Conditions, b.Status.Conditions, func(x, y metav1.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
	}) && (a.Status.Admission == nil) == (b.Status.Admission == nil) &&
		slices.Equal(a.Status.ReclaimablePods, b.Status.ReclaimablePods)
}

// releaseWorkloads removes the finalizer of the Workloads of a SafeJob that
// is gone or going (uid "" when it is gone and its UID unknown).
func (r *SafeJobReconciler) releaseWorkloads(ctx context.Context, req reconcile.Request, uid types.UID) error {
	if !r.Kueue {
		return nil
	}
	var list kueue.WorkloadList
	if err := r.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return fmt.Errorf("listing Workloads: %w", err)
	}
	var errs []error
	for i := range list.Items {
		wl := &list.Items[i]
		ref := metav1.GetControllerOf(wl)
		if ref == nil || !isSafeJobRef(ref) || ref.Name != req.Name || (uid != "" && ref.UID != uid) {
			continue
		}
		errs = append(errs, r.releaseWorkload(ctx, wl))
	}
	return errors.Join(errs...)
}

// KueueServed reports whether the cluster serves Kueue's Workload API.
func KueueServed(mapper meta.RESTMapper) (bool, error) {
	_, err := mapper.RESTMapping(kueue.GroupVersion.WithKind("Workload").GroupKind(), kueue.GroupVersion.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking up the Workload API: %w", err)
	}
}
