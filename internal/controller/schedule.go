package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/internal/ledger/runs"
)

// reconcileParent runs one scheduled SafeJob: it records the outcomes of its
// runs, commits the next due time as a run, and creates a run only once the
// commit that authorises it is observed (I8).
func (r *SafeJobReconciler) reconcileParent(ctx context.Context, sj *batchv1alpha1.SafeJob) (reconcile.Result, error) {
	if sj.DeletionTimestamp != nil {
		// Deleting: no new run starts; the runs go with the parent.
		return reconcile.Result{}, nil
	}
	in, err := r.gatherRuns(ctx, sj)
	if err != nil {
		return reconcile.Result{}, err
	}
	plan, err := runs.Decide(in)
	if err != nil {
		return reconcile.Result{}, r.markLedgerInvalid(ctx, sj, err)
	}
	st, _ := runs.Replay(&sj.Status.Ledger) // valid: runs.Decide read it
	open := map[string]bool{}
	for name := range st.Open {
		open[name] = true
	}
	r.tracker.sawRuns(client.ObjectKeyFromObject(sj), sj.UID, open, func(name string) types.UID {
		if run := in.Runs[name]; run != nil {
			return run.UID
		}
		return ""
	})
	if err := r.actRuns(ctx, sj, plan, in.Runs); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writeParentStatus(ctx, sj, plan); err != nil {
		return reconcile.Result{}, err
	}
	if plan.RequestWaits != "" {
		log.FromContext(ctx).Info("Run asked for by hand not started", "reason", plan.RequestWaits)
		r.Recorder.Eventf(sj, nil, corev1.EventTypeWarning, "RunRequestWaits", "RunNow", "%s", plan.RequestWaits)
	}
	return reconcile.Result{RequeueAfter: plan.RequeueAfter}, nil
}

// gatherRuns builds the input of runs.Decide from the cache: the parent's
// runs, the runs seen and created before, for open runs the cache does not
// show once no create of them can land a live read of the API server, and
// the pods of its runs that still run.
func (r *SafeJobReconciler) gatherRuns(ctx context.Context, sj *batchv1alpha1.SafeJob) (*runs.Input, error) {
	var children batchv1alpha1.SafeJobList
	if err := r.Client.List(ctx, &children, client.InNamespace(sj.Namespace),
		client.MatchingFields{controllerUIDIndex: string(sj.UID)}); err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	key := client.ObjectKeyFromObject(sj)
	in := &runs.Input{
		Name:       sj.Name,
		Namespace:  sj.Namespace,
		Created:    sj.CreationTimestamp.Time,
		Spec:       &sj.Spec,
		Status:     &sj.Status,
		Runs:       map[string]*batchv1alpha1.SafeJob{},
		Busy:       map[string]int{},
		Seen:       r.tracker.seenRuns(key, sj.UID),
		Issued:     r.tracker.issuedRuns(key, sj.UID),
		Gone:       map[string]bool{},
		Taken:      map[string]bool{},
		RunRequest: sj.Annotations[batchv1alpha1.RunNowAnnotation],
		Fence:      r.fence(),
		Now:        r.Clock.Now(),
	}
	for i := range children.Items {
		in.Runs[children.Items[i].Name] = &children.Items[i]
	}
	if err := r.confirmRuns(ctx, sj, in); err != nil {
		return nil, err
	}
	if err := r.countBusy(ctx, sj, in); err != nil {
		return nil, err
	}
	return in, nil
}

// countBusy counts, by run, the pods still running or terminating of the
// runs the parent knows (runs.UIDs), found by their controller's UID:
// a pod that merely carries the parent's label or annotation never counts.
func (r *SafeJobReconciler) countBusy(ctx context.Context, sj *batchv1alpha1.SafeJob, in *runs.Input) error {
	for uid, name := range runs.UIDs(in) {
		pods, err := r.podsOf(ctx, sj.Namespace, uid)
		if err != nil {
			return fmt.Errorf("run %s: %w", name, err)
		}
		for _, pod := range pods {
			if !jobs.IsTerminal(pod) {
				in.Busy[name]++
			}
		}
	}
	return nil
}

// confirmRuns reads live the open runs the cache does not show once their
// create window, create timeout and clock margin have passed: a run found
// absent then can never be created any more (every create of it carries an
// earlier deadline), so runs.Decide may close it.
func (r *SafeJobReconciler) confirmRuns(ctx context.Context, sj *batchv1alpha1.SafeJob, in *runs.Input) error {
	unobserved, _, err := runs.Unobserved(in)
	if err != nil {
		return nil // runs.Decide reports the invalid ledger
	}
	if len(unobserved) == 0 {
		return nil
	}
	names := make([]string, len(unobserved))
	for i, ref := range unobserved {
		names[i] = ref.Name
	}
	reads, err := readAllLive(ctx, r, sj, names, func() *batchv1alpha1.SafeJob { return &batchv1alpha1.SafeJob{} })
	if err != nil {
		return fmt.Errorf("confirming runs: %w", err)
	}
	in.Now = r.Clock.Now() // decided after the reads, which may take seconds (gather)
	for i, read := range reads {
		run, name := read.obj, names[i]
		switch read.holder {
		case heldByNone:
			in.Gone[name] = true
		case heldByOwn:
			in.Runs[name] = run // the cache lags behind
		default:
			// The name is held by an object this parent does not control:
			// never adopted or touched; the run is recorded NameTaken.
			log.FromContext(ctx).Info("Run name held by an object the parent does not control",
				"run", name, "holderUID", run.UID)
			in.Taken[name] = true
		}
	}
	return nil
}

// actRuns carries out the plan's run work: release the finalizers of runs
// whose outcome is committed, delete runs, create committed runs. Releases
// and deletes act only on the runs the parent controls (children, from its UID),
// each under that run's UID: an object that took the name meanwhile is
// never touched.
func (r *SafeJobReconciler) actRuns(ctx context.Context, sj *batchv1alpha1.SafeJob, plan *runs.Plan,
	children map[string]*batchv1alpha1.SafeJob) error {
	var errs []error
	for _, name := range plan.Release {
		if run := children[name]; run != nil && batchv1alpha1.IsRunOf(run, sj) {
			errs = append(errs, r.removeRunFinalizer(ctx, client.ObjectKeyFromObject(run), run.UID))
		}
	}
	for _, name := range plan.Delete {
		run := children[name]
		if run == nil || !batchv1alpha1.IsRunOf(run, sj) {
			continue
		}
		err := r.Client.Delete(ctx, run, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptr.To(run.UID)})
		switch {
		case err == nil:
			r.Recorder.Eventf(sj, run, corev1.EventTypeNormal, "SuccessfulDelete", "DeleteRun", "Deleted run %s", name)
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err):
			log.FromContext(ctx).Info("Run not deleted: its name is held by another object now", "run", name)
		default:
			errs = append(errs, fmt.Errorf("deleting run %s: %w", name, err))
		}
	}
	for _, ref := range plan.Create {
		errs = append(errs, r.createRun(ctx, sj, ref))
	}
	return errors.Join(errs...)
}

// createRun creates a committed, observed run. It keeps the fence as pod
// creates do (ledger.Fence): no create starts once the run's create window
// has passed, and each carries the deadline of the window plus the create
// timeout, so that none lands after the run's absence may be trusted
// (confirmRuns). A create the API server answered is not issued again by
// this process, so a run removed by hand right after it was created is not
// created a second time.
func (r *SafeJobReconciler) createRun(ctx context.Context, sj *batchv1alpha1.SafeJob, ref runs.Ref) error {
	key := client.ObjectKeyFromObject(sj)
	fence := r.fence()
	logger := log.FromContext(ctx).WithValues("run", ref.Name)
	if !fence.MayCreate(ref.Time, r.Clock.Now()) {
		logger.Info("Run create window passed; the run will be recorded Lost once it is confirmed absent")
		return nil
	}
	ctx, cancel := withServerDeadline(ctx, fence.CreateDeadline(ref.Time))
	defer cancel()
	run := newRun(sj, ref)
	err := r.Client.Create(ctx, run)
	switch {
	case err == nil:
		r.tracker.issuedRun(key, sj.UID, ref.Name, run.UID)
		r.Recorder.Eventf(sj, run, corev1.EventTypeNormal, "SuccessfulCreate", "CreateRun", "Created run %s for %s",
			ref.Name, ref.ScheduledTime.UTC().Format(time.RFC3339))
		return nil
	case apierrors.IsAlreadyExists(err):
		// Names are deterministic: created before, or held by someone else.
		// The cache shows the first; a live read after the window tells.
		r.tracker.issuedRun(key, sj.UID, ref.Name, "")
		logger.V(1).Info("Run already exists")
		return nil
	default:
		// Retried within the window: a create that did land meets
		// AlreadyExists, so a retry never makes a second run.
		r.Recorder.Eventf(sj, nil, corev1.EventTypeWarning, "FailedCreate", "CreateRun", "Error creating run %s: %v", ref.Name, err)
		return fmt.Errorf("creating run %s: %w", ref.Name, err)
	}
}

// newRun builds the child SafeJob of one scheduled time: the parent's job
// fields and labels, without the schedule, controlled by the parent and held
// by the run finalizer until the parent has recorded its outcome. A run
// MultiKueue dispatches names its parent in annotations instead of an owner
// reference (batchv1alpha1.ParentUIDAnnotation); the operator deletes it
// once the parent is gone (reconcileDispatched), as the garbage collector
// deletes the others.
func newRun(parent *batchv1alpha1.SafeJob, ref runs.Ref) *batchv1alpha1.SafeJob {
	spec := parent.Spec.DeepCopy()
	spec.Schedule, spec.TimeZone, spec.ConcurrencyPolicy, spec.StartingDeadlineSeconds = nil, nil, "", nil
	spec.SuccessfulRunsHistoryLimit, spec.FailedRunsHistoryLimit, spec.Suspend = nil, nil, nil
	at := ref.ScheduledTime.UTC()
	labels := maps.Clone(parent.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[batchv1alpha1.ParentLabel] = ledger.ShortName(parent.Name, 63)
	labels[batchv1alpha1.ScheduledTimeLabel] = strconv.FormatInt(at.Unix(), 10)
	annotations := map[string]string{
		batchv1alpha1.ScheduledTimeAnnotation: at.Format(time.RFC3339),
		batchv1alpha1.ParentLabel:             parent.Name,
	}
	if ref.Manual {
		annotations[batchv1alpha1.InstantiateAnnotation] = batchv1alpha1.InstantiateManual
	}
	// The pods carry the parent too, so that the parent sees pods of runs
	// that are gone (Forbid and Replace wait for them).
	if spec.Template.Labels == nil {
		spec.Template.Labels = map[string]string{}
	}
	if spec.Template.Annotations == nil {
		spec.Template.Annotations = map[string]string{}
	}
	spec.Template.Labels[batchv1alpha1.ParentLabel] = labels[batchv1alpha1.ParentLabel]
	spec.Template.Annotations[batchv1alpha1.ParentLabel] = parent.Name
	run := &batchv1alpha1.SafeJob{
		ObjectMeta: metav1.ObjectMeta{
			Name:        ref.Name,
			Namespace:   parent.Namespace,
			Labels:      labels,
			Annotations: annotations,
			Finalizers:  []string{batchv1alpha1.RunFinalizer},
		},
		Spec: *spec,
	}
	if run.Dispatched() {
		annotations[batchv1alpha1.ParentUIDAnnotation] = string(parent.UID)
	} else {
		run.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(parent,
			batchv1alpha1.GroupVersion.WithKind("SafeJob"))}
	}
	return run
}

// writeParentStatus commits a parent plan's status, then reports what it
// committed.
func (r *SafeJobReconciler) writeParentStatus(ctx context.Context, sj *batchv1alpha1.SafeJob, plan *runs.Plan) error {
	updated, err := r.commit(ctx, sj, plan.Status, plan.Append)
	if err != nil || updated == nil {
		return err
	}
	// Reaching the cap of open runs is said once, when it begins.
	if c := meta.FindStatusCondition(plan.Status.Conditions, batchv1alpha1.ConditionScheduling); c != nil &&
		c.Reason == batchv1alpha1.ReasonTooManyActiveRuns {
		if prev := meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionScheduling); prev == nil || prev.Reason != c.Reason {
			log.FromContext(ctx).Info("Too many active runs: due times do not start", "max", runs.MaxOpen)
			r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, batchv1alpha1.ReasonTooManyActiveRuns, "Schedule", "%s", c.Message)
		}
	}
	for _, e := range plan.Append {
		at := e.ScheduledTime.UTC().Format(time.RFC3339)
		switch {
		case e.Type == batchv1alpha1.EntryScheduled && e.Reason == batchv1alpha1.ReasonManual:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeNormal, batchv1alpha1.ReasonManual, "RunNow",
				"Run %s started by hand at %s", e.Run, at)
		case e.Type == batchv1alpha1.EntryScheduled:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeNormal, batchv1alpha1.ReasonScheduled, "Schedule",
				"Run %s scheduled for %s", e.Run, at)
			if e.Missed > 0 {
				reason := batchv1alpha1.ReasonMissedSchedule
				if e.Missed > runs.MissedStall {
					reason = batchv1alpha1.ReasonTooManyMissedTimes
				}
				r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, reason, "Schedule",
					"%d scheduled time(s) before %s were not run", e.Missed, at)
			}
		case e.Type == batchv1alpha1.EntrySucceeded:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeNormal, "SawCompletedRun", "RecordOutcome",
				"Run %s (scheduled for %s) completed", e.Run, at)
		default:
			r.Recorder.Eventf(updated, nil, corev1.EventTypeWarning, "Run"+string(e.Type), "RecordOutcome",
				"Run %s (scheduled for %s): %s (%s)", e.Run, at, e.Type, e.Reason)
		}
	}
	return nil
}

// releaseRun frees a run that is being deleted once no parent can record
// its outcome any more: the parent is gone, replaced or deleting, or the
// run names no parent here (its owner reference was removed, or it is a
// worker cluster's copy of a run MultiKueue dispatched).
func (r *SafeJobReconciler) releaseRun(ctx context.Context, run *batchv1alpha1.SafeJob) error {
	gone, err := r.parentGone(ctx, run)
	if err != nil || !gone {
		return err
	}
	log.FromContext(ctx).V(1).Info("Releasing a run no parent records")
	return r.removeRunFinalizer(ctx, client.ObjectKeyFromObject(run), run.UID)
}

// parentGone reports, from a live read, whether no parent can record run's
// outcome any more: it names none, or its parent is gone, replaced or
// deleting.
func (r *SafeJobReconciler) parentGone(ctx context.Context, run *batchv1alpha1.SafeJob) (bool, error) {
	owner := batchv1alpha1.RunParent(run)
	if owner == nil {
		return true, nil
	}
	parent := &batchv1alpha1.SafeJob{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: owner.Name}, parent)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading parent of run: %w", err)
	}
	return parent.UID != owner.UID || parent.DeletionTimestamp != nil, nil
}

// removeRunFinalizer removes the run finalizer of the run with this UID
// only: a JSON patch that tests the UID and the entry it removes, so that
// neither another object of the same name nor a concurrent finalizer edit
// is ever touched. A failed test on a cached copy retries once on a live
// read.
func (r *SafeJobReconciler) removeRunFinalizer(ctx context.Context, key client.ObjectKey, uid types.UID) error {
	// A run of another UID in the cache may be a cache that lags: read live.
	err := r.removeFinalizerOf(ctx, key, uid, batchv1alpha1.RunFinalizer, func() client.Object { return &batchv1alpha1.SafeJob{} }, true)
	if err != nil {
		return fmt.Errorf("removing the run finalizer of %s: %w", key.Name, err)
	}
	return nil
}
