package controller

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/batchjob"
)

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs/status,verbs=patch
// +kubebuilder:rbac:groups=batch,resources=jobs/finalizers,verbs=update

// JobReconciler runs the batch/v1 Jobs that name SafeJob in spec.managedBy
// (the built-in Job controller leaves those alone). It keeps each Job's
// ledger in a SafeJob of the Job's name that the Job controls, made from
// the Job's spec; the SafeJob reconciler runs that SafeJob as any other,
// pods included, and so every invariant of the ledger holds for the Job.
// This reconciler only keeps the two in step: the ledger's spec follows
// the fields of the Job that may change (suspend, parallelism, elastic
// completions, activeDeadlineSeconds), and the Job's status follows the
// ledger's (batchjob.Status). It never creates or deletes a pod.
type JobReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// Kueue is set when the Workload API is served: a Job with a queue
	// name then runs only once Kueue has admitted its Workload.
	Kueue bool
	// MaxConcurrentReconciles is the number of Jobs kept in step at once:
	// each writes the Job's status after its ledger's, so one at a time
	// would make every managed Job wait for the others' writes.
	MaxConcurrentReconciles int
}

// Reasons of a managed Job's JobConditionRefused condition.
const (
	reasonUnsupported   = "UnsupportedField"
	reasonNameTaken     = "NameTaken"
	reasonLedgerDeleted = "LedgerDeleted"
)

func (r *JobReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	job := &batchv1.Job{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			// A Job deleted takes its ledger with it (the garbage
			// collector: the ledger's owner reference), or orphans it.
			return reconcile.Result{}, r.dropOrphan(ctx, req.NamespacedName, "")
		}
		return reconcile.Result{}, fmt.Errorf("reading Job %s: %w", req, err)
	}
	if !batchv1alpha1.ManagesJob(job) || job.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	spec, notes, err := batchjob.LedgerSpec(job)
	if err != nil {
		return reconcile.Result{}, r.refuse(ctx, job, reasonUnsupported, err.Error())
	}
	ledger := &batchv1alpha1.SafeJob{}
	err = r.Client.Get(ctx, req.NamespacedName, ledger)
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, r.start(ctx, job, spec, notes)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading the ledger of Job %s: %w", req, err)
	}
	if orphaned(ledger, job.UID) {
		// The ledger of an earlier Job of this name, orphaned.
		// Its deletion queues the Job again (the orphan watch).
		return reconcile.Result{}, r.dropOrphan(ctx, req.NamespacedName, job.UID)
	}
	if ref := batchv1alpha1.ManagedJobOf(ledger); ref == nil || ref.UID != job.UID {
		return reconcile.Result{}, r.refuse(ctx, job, reasonNameTaken, fmt.Sprintf(
			"SafeJob %s/%s exists and is not this Job's ledger: SafeJob keeps a Job's ledger in a SafeJob of the Job's name",
			job.Namespace, job.Name))
	}
	if err := r.follow(ctx, job, ledger, spec); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.writeStatus(ctx, job, batchjob.Status(job, &ledger.Status, metav1.NewTime(r.Clock.Now())))
}

// start creates the Job's ledger, unless the Job waits suspended before it
// ever ran: then it only writes the Job's status, and the ledger is made
// when the Job is resumed, from its template as it is then (Kueue writes
// the admitted flavors' node selectors into it just before it resumes it).
// A Job that ran and has lost its ledger (deleted by hand, or by kubectl
// safejob uninstall) is refused, never given a new one.
func (r *JobReconciler) start(ctx context.Context, job *batchv1.Job, spec batchv1alpha1.SafeJobSpec, notes []string) error {
	if ptr.Deref(job.Spec.Suspend, false) && job.Status.StartTime == nil {
		return r.writeStatus(ctx, job, batchjob.Unstarted(job, metav1.NewTime(r.Clock.Now())))
	}
	if batchjob.Finished(job) {
		return nil // its ledger was deleted after it finished: there is nothing left to run
	}
	if admitted, err := r.admitted(ctx, job); err != nil || !admitted {
		return err // queued and not admitted: a Workload event brings it back
	}
	if job.Status.StartTime != nil || job.Status.Succeeded+job.Status.Failed > 0 {
		// A new ledger would run again what the deleted one ran: it knew
		// which pods ran and which succeeded, and nothing else does.
		return r.refuse(ctx, job, reasonLedgerDeleted, "its ledger was deleted while it ran: SafeJob does not run it again, "+
			"as it can no longer tell which of its pods ran; delete the Job")
	}
	ledger := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace,
		Labels: ledgerLabels(job), Annotations: maps.Clone(job.Annotations)}, Spec: spec}
	if err := controllerutil.SetControllerReference(job, ledger, r.Client.Scheme()); err != nil {
		return fmt.Errorf("owning the ledger of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	if err := r.Client.Create(ctx, ledger); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the ledger of Job %s/%s: a SafeJob of its name appeared meanwhile: %w", job.Namespace, job.Name, err)
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return r.refuse(ctx, job, reasonUnsupported, fmt.Sprintf("the API server refuses its ledger: %v", err))
		}
		return fmt.Errorf("creating the ledger of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Created the ledger of a managed Job", "job", client.ObjectKeyFromObject(job))
	for _, note := range notes {
		r.Recorder.Eventf(job, ledger, corev1.EventTypeNormal, "RunAs", "Start", "%s", note)
	}
	return nil
}

// orphaned reports a Job ledger whose Job was deleted with the orphan
// propagation policy (its owner reference is gone): of no Job, or of
// another Job than the one of UID current.
func orphaned(ledger *batchv1alpha1.SafeJob, current types.UID) bool {
	uid, ok := ledger.Labels[batchv1alpha1.ManagedJobLabel]
	return ok && batchv1alpha1.ManagedJobOf(ledger) == nil && types.UID(uid) != current
}

// dropOrphan deletes the ledger of key if its Job orphaned it, itself with
// the orphan policy: its pods stay, as a Job's do when it is deleted so,
// and none is created for it any more (its pods' ledger finalizers are
// released as for any SafeJob that is gone). current is the UID of the Job
// now of that name, if any.
func (r *JobReconciler) dropOrphan(ctx context.Context, key types.NamespacedName, current types.UID) error {
	ledger := &batchv1alpha1.SafeJob{}
	if err := r.Client.Get(ctx, key, ledger); err != nil {
		return client.IgnoreNotFound(err) //nolint:wrapcheck // only a not-found is ignored; others are the read's
	}
	if !orphaned(ledger, current) {
		return nil
	}
	if err := r.Client.Delete(ctx, ledger, client.PropagationPolicy(metav1.DeletePropagationOrphan),
		client.Preconditions{UID: &ledger.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the orphaned ledger %s: %w", key, err)
	}
	log.FromContext(ctx).Info("Deleted the ledger its Job orphaned; its pods stay", "ledger", key)
	return nil
}

// admitted reports whether a Job may start: one without a queue name may,
// one with a queue name once Kueue has admitted the Workload it made for
// the Job. Kueue's webhook creates such a Job suspended, and resumes it on
// admission; a Job that is not suspended and not admitted (a cluster whose
// API server does not call Kueue's webhook, or the moment before Kueue's
// reconciler suspends it) must not run pods outside its quota.
func (r *JobReconciler) admitted(ctx context.Context, job *batchv1.Job) (bool, error) {
	if job.Labels[QueueNameLabel] == "" || !r.Kueue {
		return true, nil
	}
	var wls kueue.WorkloadList
	if err := r.Client.List(ctx, &wls, client.InNamespace(job.Namespace)); err != nil {
		return false, fmt.Errorf("listing the Workloads of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	for k := range wls.Items {
		wl := &wls.Items[k]
		if ref := metav1.GetControllerOfNoCopy(wl); ref != nil && ref.UID == job.UID &&
			meta.IsStatusConditionTrue(wl.Status.Conditions, kueue.WorkloadAdmitted) {
			return true, nil
		}
	}
	return false, nil
}

// ledgerLabels are the labels of a Job's ledger: the Job's, with the Job's
// UID, but not Kueue's queue name: Kueue queues the Job itself (one
// Workload, admitted once), through its suspend field.
func ledgerLabels(job *batchv1.Job) map[string]string {
	labels := maps.Clone(job.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	delete(labels, QueueNameLabel)
	labels[batchv1alpha1.ManagedJobLabel] = string(job.UID)
	return labels
}

// follow brings the ledger's spec to the Job's in the fields a Job may
// change while it runs, and its template while the ledger is suspended with
// no pod running or terminating (templateFollows), in one patch: a Job
// re-admitted by Kueue (another flavor's node selector and the resume in
// one write) resumes with the new template, never with the old one. A
// change the ledger refuses is reported on the Job, not applied; a template
// the API server refuses (an immutable-spec policy older than this
// operator) never holds back the rest.
func (r *JobReconciler) follow(ctx context.Context, job *batchv1.Job, ledger *batchv1alpha1.SafeJob, spec batchv1alpha1.SafeJobSpec) error {
	want := ledger.DeepCopy()
	want.Spec.Suspend, want.Spec.Parallelism, want.Spec.ActiveDeadlineSeconds = spec.Suspend, spec.Parallelism, spec.ActiveDeadlineSeconds
	if spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		want.Spec.Completions = spec.Completions
	}
	withTemplate := false
	if !equality.Semantic.DeepEqual(spec.Template, ledger.Spec.Template) {
		switch {
		case templateFollows(ledger):
			want.Spec.Template, withTemplate = *spec.Template.DeepCopy(), true
		case ptr.Deref(ledger.Spec.Suspend, false):
			// Suspended, its pods not all gone yet: it resumes only with
			// the Job's template, once they are (the ledger's status
			// change brings the Job back here).
			want.Spec.Suspend = ledger.Spec.Suspend
		case !ptr.Deref(spec.Suspend, false):
			// Suspending is what changes the template (Kueue restores the
			// original as it stops a Job): that waits silently.
			r.Recorder.Eventf(job, ledger, corev1.EventTypeWarning, "SpecNotApplied", "Follow",
				"the pod template differs from the one the Job's pods run with: SafeJob applies a template change "+
					"only while the Job is suspended with no pod running or terminating")
		}
	}
	if equality.Semantic.DeepEqual(want.Spec, ledger.Spec) {
		return nil
	}
	err := r.patchLedger(ctx, ledger, want)
	if withTemplate && specRefused(err) {
		r.Recorder.Eventf(job, ledger, corev1.EventTypeWarning, "SpecNotApplied", "Follow",
			"the pod template change is refused (%v): the Job runs on with the template it had", err)
		want.Spec.Template = ledger.Spec.Template
		err = r.patchLedger(ctx, ledger, want)
	}
	if specRefused(err) {
		r.Recorder.Eventf(job, ledger, corev1.EventTypeWarning, "SpecNotApplied", "Follow", "%v", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("bringing the ledger of Job %s/%s to its spec: %w", job.Namespace, job.Name, err)
	}
	return nil
}

// specRefused reports a ledger spec change the API server refuses for what
// it is (its validation or an admission policy): sending it again changes
// nothing.
func specRefused(err error) bool { return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) }

// patchLedger writes want over the ledger as read, on its resourceVersion:
// the policy judges a template change by the ledger's status, so a change
// decided on a stale read conflicts and is decided again.
func (r *JobReconciler) patchLedger(ctx context.Context, ledger, want *batchv1alpha1.SafeJob) error {
	patch := client.MergeFromWithOptions(ledger, client.MergeFromWithOptimisticLock{})
	return r.Client.Patch(ctx, want.DeepCopy(), patch) //nolint:wrapcheck // follow wraps it
}

// templateFollows reports whether a ledger may take its Job's template, as
// the immutable-spec policy's followsSuspendedJob allows: suspended, no pod
// running or terminating, and either never started or Suspended. batch/v1
// lets a Job's template change then, since Kubernetes v1.36.
func templateFollows(ledger *batchv1alpha1.SafeJob) bool {
	return ptr.Deref(ledger.Spec.Suspend, false) && ledger.Status.Active == 0 && ptr.Deref(ledger.Status.Terminating, 0) == 0 &&
		(ledger.Status.StartTime == nil || meta.IsStatusConditionTrue(ledger.Status.Conditions, batchv1alpha1.ConditionSuspended))
}

// refuse reports on the Job why SafeJob does not run it, once.
func (r *JobReconciler) refuse(ctx context.Context, job *batchv1.Job, reason, message string) error {
	c := batchjob.JobCondition(job.Status.Conditions, batchv1alpha1.JobConditionRefused)
	if c == nil || c.Reason != reason || c.Message != message {
		r.Recorder.Eventf(job, nil, corev1.EventTypeWarning, reason, "Run", "%s", message)
	}
	return r.writeStatus(ctx, job, batchjob.Refused(job, reason, message, metav1.NewTime(r.Clock.Now())))
}

// writeStatus writes status to the Job, if it changes it, on the version it
// was read at: a Job changed meanwhile is read and decided again. Once
// written, the events batch/v1 records for that change are recorded, once:
// a write that fails records none, and the one that succeeds later does.
func (r *JobReconciler) writeStatus(ctx context.Context, job *batchv1.Job, status batchv1.JobStatus) error {
	if equality.Semantic.DeepEqual(job.Status, status) {
		return nil
	}
	updated := job.DeepCopy()
	updated.Status = status
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFromWithOptions(job, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing the status of Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	for _, e := range batchjob.Events(&job.Status, &updated.Status) {
		r.Recorder.Eventf(updated, nil, e.Type, e.Reason, "Sync", "%s", e.Message)
	}
	return nil
}

// SetupWithManager registers the reconciler: Jobs that SafeJob manages, and
// the ledgers they control.
func (r *JobReconciler) SetupWithManager(mgr manager.Manager) error {
	managed := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		job, ok := obj.(*batchv1.Job)
		return ok && batchv1alpha1.ManagesJob(job)
	})
	b := builder.ControllerManagedBy(mgr).
		For(&batchv1.Job{}, builder.WithPredicates(managed))
	if r.Kueue {
		// Kueue's Workload of a queued Job: its admission starts the Job.
		b = b.Watches(&kueue.Workload{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &batchv1.Job{},
			handler.OnlyControllerOwner()))
	}
	err := b.
		Watches(&batchv1alpha1.SafeJob{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &batchv1.Job{},
			handler.OnlyControllerOwner())).
		// A ledger its Job orphaned has no owner to map it to: it is
		// queued under its own name, the name of the Job it was of. So is
		// any SafeJob deleted: a Job refused for its name may run now.
		Watches(&batchv1alpha1.SafeJob{}, byName{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.MaxConcurrentReconciles, 1)}).
		Named("managedjob").
		Complete(r)
	if err != nil {
		return fmt.Errorf("building the managed Job controller: %w", err)
	}
	return nil
}

// requests is the managed Job controller's queue.
type requests = workqueue.TypedRateLimitingInterface[reconcile.Request]

// byName queues, under its own name, a SafeJob that may be the ledger of a
// Job of that name without being controlled by it: one orphaned, and one
// deleted (whatever it was).
type byName struct{}

func (byName) Create(_ context.Context, e event.TypedCreateEvent[client.Object], q requests) {
	queueOrphaned(e.Object, q)
}

func (byName) Update(_ context.Context, e event.TypedUpdateEvent[client.Object], q requests) {
	queueOrphaned(e.ObjectNew, q)
}

func (byName) Delete(_ context.Context, e event.TypedDeleteEvent[client.Object], q requests) {
	q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
}

func (byName) Generic(context.Context, event.TypedGenericEvent[client.Object], requests) {
}

func queueOrphaned(obj client.Object, q requests) {
	if sj, ok := obj.(*batchv1alpha1.SafeJob); ok && orphaned(sj, "") {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sj)})
	}
}
