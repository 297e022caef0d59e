package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// Keys Kueue defines for the jobs it queues.
const (
	QueueNameLabel     = "kueue.x-k8s.io/queue-name"
	PriorityClassLabel = "kueue.x-k8s.io/priority-class"
	MaxExecTimeLabel   = "kueue.x-k8s.io/max-exec-time-seconds"
	// MinParallelismAnnotation asks Kueue for partial admission: it may
	// admit as few pods as this when quota is short, and the SafeJob then
	// runs that many at once, as a batch/v1 Job does under Kueue.
	MinParallelismAnnotation = "kueue.x-k8s.io/job-min-parallelism"
	JobUIDLabel              = "kueue.x-k8s.io/job-uid"
	PodSetLabel              = "kueue.x-k8s.io/podset"
	WorkloadAnnotation       = "kueue.x-k8s.io/workload"
	ResourceInUseFinalizer   = kueue.ResourceInUseFinalizerName
	mainPodSet               = kueue.DefaultPodSetName
)

// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=resourceflavors;workloadpriorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;list;watch

// queueName is the LocalQueue a SafeJob is queued in, "" when it is not queued.
func queueName(sj *batchv1alpha1.SafeJob) string { return sj.Labels[QueueNameLabel] }

// WorkloadName is the name Kueue gives the Workload of a job:
// "safejob-<name>-<hash>", hash over kind, group, name and UID.
func WorkloadName(sj *batchv1alpha1.SafeJob) string { return WorkloadNames(sj)[0] }

// WorkloadNames are the names the SafeJob's Workload may have, in order of
// preference: the next is used only while a Workload the SafeJob does not
// control holds the one before.
func WorkloadNames(sj *batchv1alpha1.SafeJob) []string { return jobs.WorkloadNames(sj.Name, sj.UID) }

// queued is what the Kueue side gathered for one queued SafeJob.
type queued struct {
	wl   *kueue.Workload // nil when there is none; from the cache, without pod templates (CacheOptions)
	gate *jobs.QueueGate
	// podInfo is applied to every pod created while admitted.
	podInfo *podSetInfo
	// namesTaken lists the names held by Workloads the SafeJob does not
	// control when none was left for its own.
	namesTaken []string
}

// syncWorkload makes sure a queued SafeJob has its Workload and says whether
// pods may run: only while the Workload is Admitted and not Evicted, and no
// more of them than it admitted. The decisions are jobs.DecideWorkload's;
// this reads and writes.
func (r *SafeJobReconciler) syncWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob) (*queued, error) {
	in := r.workloadInput(sj)
	if r.Options.Kueue {
		wl, taken, err := r.ownWorkload(ctx, sj)
		if err != nil {
			return nil, err
		}
		in.Workload, in.NamesTaken = wl, taken
	}
	wp := jobs.DecideWorkload(in)
	if wp.Create {
		wl, taken, err := r.createWorkload(ctx, sj, wp.Count)
		if err != nil {
			return nil, err
		}
		in.Workload, in.Created, in.NamesTaken = wl, wl != nil, taken
		wp = jobs.DecideWorkload(in)
	}
	if wp.Spec != nil && !in.Created {
		// A spec update sends the whole Workload, and a cached one has no pod
		// templates (CacheOptions): decide again on the live one, which is
		// also the newest.
		live, err := r.liveWorkload(ctx, in.Workload)
		if err != nil {
			return nil, err
		}
		in.Workload = live
		wp = jobs.DecideWorkload(in)
	}
	q := &queued{wl: in.Workload, gate: wp.Gate, namesTaken: in.NamesTaken}
	if wp.Event != nil {
		r.event(sj, q.wl, wp.Event)
	}
	if wp.Spec != nil {
		if err := r.updateWorkloadSpec(ctx, q.wl, wp.Spec, wp.MarkSuspended); err != nil {
			return nil, err
		}
	}
	if q.gate != nil && q.gate.Admitted {
		var err error
		if q.podInfo, err = r.podSetInfo(ctx, q.wl); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// workloadInput starts the Workload decision's input from the SafeJob.
func (r *SafeJobReconciler) workloadInput(sj *batchv1alpha1.SafeJob) *jobs.WorkloadInput {
	return &jobs.WorkloadInput{Served: r.Options.Kueue, Queue: queueName(sj), Spec: &sj.Spec, Status: &sj.Status, Now: r.Clock.Now(),
		Prebuilt: prebuiltWorkload(sj), NoPodsReady: r.Options.NoPodsReady}
}

// event records an event the Workload decision asked for.
func (r *SafeJobReconciler) event(sj *batchv1alpha1.SafeJob, wl *kueue.Workload, e *jobs.WorkloadEvent) {
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(sj, wl, typ, e.Reason, "Queue", "%s", e.Message)
}

// ownWorkload returns the SafeJob's Workload, deleting any other Workload
// it controls. Workloads are found by the UID of their controller, never by
// name: one the SafeJob does not control is never used, released or deleted.
// A worker cluster's copy of a dispatched SafeJob adopts the Workload
// MultiKueue made for it (adoptPrebuilt); taken names that Workload when
// another object controls it.
func (r *SafeJobReconciler) ownWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob) (own *kueue.Workload, taken []string, err error) {
	list, err := r.controlledWorkloads(ctx, sj.Namespace, sj.UID)
	if err != nil {
		return nil, nil, err
	}
	names, prebuilt := WorkloadNames(sj), prebuiltWorkload(sj)
	if prebuilt != "" {
		names = []string{prebuilt}
	}
	own, drop := jobs.OwnWorkload(sj.UID, names, list)
	var errs []error
	for _, wl := range drop {
		errs = append(errs, r.dropWorkload(ctx, wl))
	}
	if own == nil && prebuilt != "" {
		var err error
		own, taken, err = r.adoptPrebuilt(ctx, sj, prebuilt)
		errs = append(errs, err)
	}
	return own, taken, errors.Join(errs...)
}

// prebuiltWorkload is the name of the Workload MultiKueue made for a worker
// cluster's copy of a SafeJob, "" for any other SafeJob.
func prebuiltWorkload(sj *batchv1alpha1.SafeJob) string { return jobs.PrebuiltWorkloadName(sj) }

// adoptPrebuilt makes the SafeJob the controller of the Workload MultiKueue
// made for it, as Kueue's job integrations adopt a prebuilt Workload: a
// controller reference and the job-uid label, written under the
// resourceVersion read, its spec untouched. A Workload another object
// controls is never touched; its name is returned as taken. None yet: nil.
func (r *SafeJobReconciler) adoptPrebuilt(ctx context.Context, sj *batchv1alpha1.SafeJob, name string) (*kueue.Workload, []string, error) {
	// The cached Workload first, then the live one: the update below sends
	// the whole Workload, and a cached one has no pod templates
	// (CacheOptions).
	var wl *kueue.Workload
	for _, reader := range []client.Reader{r.Client, r.APIReader} {
		wl = &kueue.Workload{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: sj.Namespace, Name: name}, wl); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("getting prebuilt Workload %s: %w", name, err)
		}
		if ref := metav1.GetControllerOfNoCopy(wl); ref != nil {
			if ref.UID != sj.UID {
				return nil, []string{name}, nil
			}
			return wl, nil, nil // controlled, not yet in the index
		}
	}
	adopted := wl.DeepCopy()
	if err := controllerutil.SetControllerReference(sj, adopted, r.Client.Scheme()); err != nil {
		return nil, nil, fmt.Errorf("owning Workload %s: %w", name, err)
	}
	metav1.SetMetaDataLabel(&adopted.ObjectMeta, JobUIDLabel, string(sj.UID))
	if err := r.Client.Update(ctx, adopted); err != nil {
		return nil, nil, fmt.Errorf("adopting prebuilt Workload %s: %w", name, err)
	}
	r.Recorder.Eventf(sj, adopted, corev1.EventTypeNormal, "AdoptedWorkload", "Queue",
		"Runs under Workload %s, made by MultiKueue", name)
	return adopted, nil, nil
}

// controlledWorkloads lists the Workloads the object of uid controls.
func (r *SafeJobReconciler) controlledWorkloads(ctx context.Context, namespace string, uid types.UID) ([]*kueue.Workload, error) {
	var list kueue.WorkloadList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingFields{controllerUIDIndex: string(uid)}); err != nil {
		return nil, fmt.Errorf("listing Workloads: %w", err)
	}
	var out []*kueue.Workload
	for i := range list.Items {
		if ref := metav1.GetControllerOfNoCopy(&list.Items[i]); ref != nil && ref.UID == uid {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// dropWorkload releases and deletes a Workload the SafeJob controls and no
// longer uses; its UID is a precondition of the delete.
func (r *SafeJobReconciler) dropWorkload(ctx context.Context, wl *kueue.Workload) error {
	if err := r.releaseWorkload(ctx, wl); err != nil {
		return err
	}
	if err := r.Client.Delete(ctx, wl, client.Preconditions{UID: &wl.UID}); err != nil && !apierrors.IsNotFound(err) &&
		!apierrors.IsConflict(err) {
		return fmt.Errorf("deleting Workload %s: %w", wl.Name, err)
	}
	return nil
}

// createWorkload creates the Workload of a SafeJob, as Kueue builds one for
// a batch/v1 Job: one pod set "main" of count pods (with its minimum count
// for partial admission and its topology request), the queue, the priority
// and the maximum execution time. It takes the first of the SafeJob's
// Workload names not held by a Workload it does not control; when every one
// is, it creates nothing and returns them.
func (r *SafeJobReconciler) createWorkload(ctx context.Context, sj *batchv1alpha1.SafeJob, count int32) (*kueue.Workload, []string, error) {
	wl := &kueue.Workload{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:  sj.Namespace,
			Labels:     map[string]string{JobUIDLabel: string(sj.UID)},
			Finalizers: []string{ResourceInUseFinalizer},
		},
		Spec: kueue.WorkloadSpec{
			QueueName: kueue.LocalQueueName(queueName(sj)),
			PodSets: []kueue.PodSet{{Name: mainPodSet, Count: count, Template: *sj.Spec.Template.DeepCopy(),
				MinCount:        jobs.MinCount(sj.Annotations[MinParallelismAnnotation], count),
				TopologyRequest: jobs.TopologyRequest(&sj.Spec.Template.ObjectMeta, sj.Spec.CompletionMode)}},
			Active: ptr.To(!ptr.Deref(sj.Spec.Suspend, false)),
		},
	}
	setSuspendMark(wl, ptr.Deref(sj.Spec.Suspend, false))
	if v, err := strconv.ParseInt(sj.Labels[MaxExecTimeLabel], 10, 32); err == nil && v > 0 {
		wl.Spec.MaximumExecutionTimeSeconds = ptr.To(int32(v))
	}
	if err := r.setPriority(ctx, sj, wl); err != nil {
		return nil, nil, err
	}
	if err := controllerutil.SetControllerReference(sj, wl, r.Client.Scheme()); err != nil {
		return nil, nil, fmt.Errorf("owning Workload: %w", err)
	}
	var taken []string
	for _, name := range WorkloadNames(sj) {
		attempt := wl.DeepCopy()
		attempt.Name = name
		err := r.Client.Create(ctx, attempt)
		if err == nil {
			r.Recorder.Eventf(sj, attempt, corev1.EventTypeNormal, "CreatedWorkload", "Queue", "Created Workload %s in LocalQueue %s",
				attempt.Name, queueName(sj))
			if len(taken) > 0 {
				r.Recorder.Eventf(sj, attempt, corev1.EventTypeWarning, jobs.ReasonWorkloadNameTaken, "Queue",
					"Workload %s is not the SafeJob's; its Workload is %s", strings.Join(taken, ", "), attempt.Name)
			}
			return attempt, nil, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, nil, fmt.Errorf("creating Workload %s: %w", name, err)
		}
		holder := &kueue.Workload{}
		if gerr := r.APIReader.Get(ctx, client.ObjectKey{Namespace: sj.Namespace, Name: name}, holder); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return nil, nil, fmt.Errorf("creating Workload %s: the previous one is still there: %w", name, err)
			}
			return nil, nil, fmt.Errorf("reading Workload %s: %w", name, gerr)
		}
		if metav1.IsControlledBy(holder, sj) {
			return nil, nil, fmt.Errorf("creating Workload %s: the previous one is still there: %w", name, err)
		}
		taken = append(taken, name)
	}
	return nil, taken, nil
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

// updateWorkloadSpec writes the Workload's new spec, with or without the
// mark that SafeJob deactivated it for suspend, under the resourceVersion
// it was read at: a deactivation by Kueue that lands first makes it fail
// rather than be overwritten.
func (r *SafeJobReconciler) updateWorkloadSpec(ctx context.Context, wl *kueue.Workload, spec *kueue.WorkloadSpec,
	markSuspended bool) error {
	updated := wl.DeepCopy()
	updated.Spec = *spec
	setSuspendMark(updated, markSuspended)
	if err := r.Client.Update(ctx, updated); err != nil {
		return fmt.Errorf("updating Workload %s: %w", wl.Name, err)
	}
	*wl = *updated
	return nil
}

// liveWorkload reads a Workload from the API server. One gone, or replaced
// by another of the same name, is an error: the cache's next version of it
// brings the SafeJob back.
func (r *SafeJobReconciler) liveWorkload(ctx context.Context, wl *kueue.Workload) (*kueue.Workload, error) {
	live := &kueue.Workload{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(wl), live); err != nil {
		return nil, fmt.Errorf("reading Workload %s: %w", wl.Name, err)
	}
	if live.UID != wl.UID {
		return nil, fmt.Errorf("reading Workload %s: replaced by another of the same name (UID %s, not %s)", wl.Name, live.UID, wl.UID)
	}
	return live, nil
}

// namesTakenError is returned while Workloads the SafeJob does not control
// hold every name its Workload may have: nothing watches those Workloads,
// so the error brings the SafeJob back.
func namesTakenError(sj *batchv1alpha1.SafeJob, taken []string) error {
	return fmt.Errorf("no Workload for SafeJob %s: Workloads it does not control hold %s", sj.Name, strings.Join(taken, ", "))
}

// setSuspendMark sets or removes jobs.SuspendedAnnotation.
func setSuspendMark(wl *kueue.Workload, marked bool) {
	switch {
	case marked:
		metav1.SetMetaDataAnnotation(&wl.ObjectMeta, jobs.SuspendedAnnotation, "true")
	case wl.Annotations != nil:
		delete(wl.Annotations, jobs.SuspendedAnnotation)
	}
}

// afterDecide updates the Workload from what this reconcile decided and
// wrote (jobs.DecideWorkload after the pods): the reservation is given
// back once an evicted SafeJob has no pod left, PodsReady and
// reclaimablePods follow the pods, Finished follows the SafeJob, a finished
// or deleted Workload loses its finalizer, and one finished early or too
// small for the SafeJob is replaced once no pod runs.
func (r *SafeJobReconciler) afterDecide(ctx context.Context, sj *batchv1alpha1.SafeJob, q *queued, plan *jobs.Plan) error {
	if q.wl == nil {
		if len(q.namesTaken) > 0 {
			return namesTakenError(sj, q.namesTaken)
		}
		return nil
	}
	in := r.workloadInput(sj)
	in.Workload, in.Decided = q.wl, plan
	wp := jobs.DecideWorkload(in)
	if wp.Event != nil {
		r.event(sj, q.wl, wp.Event)
	}
	switch {
	case wp.Drop:
		return r.dropWorkload(ctx, q.wl)
	case wp.Release:
		return r.releaseWorkload(ctx, q.wl)
	case wp.Status == nil:
		return nil
	}
	if wp.GaveBack {
		log.FromContext(ctx).Info("Giving back the Workload's quota: no pod left", "workload", klog.KObj(q.wl))
	}
	updated := q.wl.DeepCopy()
	updated.Status = *wp.Status
	return r.writeWorkloadStatus(ctx, sj, q.wl, updated)
}

// writeWorkloadStatus writes a changed Workload status with UpdateStatus
// and the resourceVersion it was read at, unless the cache does not show
// this process's last write of it yet (the tracker's Workload fence).
func (r *SafeJobReconciler) writeWorkloadStatus(ctx context.Context, sj *batchv1alpha1.SafeJob, wl, updated *kueue.Workload) error {
	if !r.tracker.showsOwnWorkloadWrite(keyOf(sj), sj.UID, wl) {
		return nil // decided on the version our write replaced; the next one brings us back
	}
	if err := r.Client.Status().Update(ctx, updated); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // the newer Workload brings us back
		}
		return fmt.Errorf("updating Workload %s status: %w", wl.Name, err)
	}
	r.tracker.wroteWorkload(keyOf(sj), sj.UID, wl)
	if c := meta.FindStatusCondition(updated.Status.Conditions, kueue.WorkloadFinished); c != nil && c.Status == metav1.ConditionTrue {
		r.Recorder.Eventf(sj, updated, corev1.EventTypeNormal, "FinishedWorkload", "Queue", "Workload %s is finished (%s)", wl.Name, c.Reason)
	}
	return nil
}

// KueueServed reports whether the cluster serves Kueue's Workload API.
func KueueServed(mapper meta.RESTMapper) (bool, error) {
	_, err := mapper.RESTMapping(kueue.SchemeGroupVersion.WithKind("Workload").GroupKind(), kueue.SchemeGroupVersion.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking up the Workload API: %w", err)
	}
}
