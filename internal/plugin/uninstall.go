package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// CRDName is the SafeJob CustomResourceDefinition.
const CRDName = "safejobs.batch.safejob.dev"

// Policies are the ValidatingAdmissionPolicies SafeJob ships
// (config/policy, dist/chart), each with a binding of the same name.
var Policies = []string{"safejob-immutable-spec", "safejob-managed-job", "safejob-min-parallelism", "safejob-queue-name", "safejob-run-now"}

// The operator's Deployment: labelled so by config/manager and the chart,
// and named so by config/operator's prefix and the chart.
const (
	operatorLabel, operatorLabelValue = "control-plane", "controller-manager"
	operatorDeployment                = "safejob-controller-manager"
)

// UninstallOptions are the flags of `kubectl safejob uninstall`.
type UninstallOptions struct {
	// Stop stops the schedules and deletes the SafeJobs that run.
	Stop bool
	// DeleteCRD deletes the SafeJob CRD and SafeJob's admission policies.
	DeleteCRD         bool
	OperatorNamespace string
	// Timeout bounds the wait for the operator to let everything go;
	// Interval is how often to look (a second when zero).
	Timeout, Interval time.Duration
	// Workloads says the API server serves Kueue's Workloads.
	Workloads bool
	Now       time.Time
}

// Running lists the SafeJobs that have not finished: no Complete or Failed
// condition True; a schedule runs unless it is suspended.
func Running(sjs []batchv1alpha1.SafeJob) []*batchv1alpha1.SafeJob {
	var out []*batchv1alpha1.SafeJob
	for k := range sjs {
		sj := &sjs[k]
		if sj.Spec.Schedule != nil {
			if sj.Spec.Suspend == nil || !*sj.Spec.Suspend {
				out = append(out, sj)
			}
			continue
		}
		if ledger.Finished(sj.Status.Conditions) == nil {
			out = append(out, sj)
		}
	}
	return out
}

// ErrRunning is uninstall's refusal while SafeJobs run.
var ErrRunning = errors.New("SafeJobs run (listed above): wait for them to finish, " +
	"or pass --stop to stop the schedules and delete every SafeJob")

// Uninstall removes SafeJob from a cluster whose operator runs: it
// refuses while SafeJobs run unless o.Stop, which suspends the schedules
// first; deletes the runs and the other SafeJobs without a schedule and,
// once they are gone, the schedules: a parent lives until it has recorded
// its runs and let them go (a run deleted after its parent would keep its
// finalizer until the operator happens to look at it again). It waits until
// the operator has let go of every SafeJob, pod and Workload, then deletes
// the operator's Deployments and, with o.DeleteCRD, the CRD and the
// policies.
func Uninstall(ctx context.Context, cl client.Client, w io.Writer, o UninstallOptions) error {
	out := &errWriter{w: w}
	sjs, err := listSafeJobs(ctx, cl, "")
	if err != nil {
		return err
	}
	if err := refuseRunning(w, out, sjs, o.Stop); err != nil {
		return err
	}
	noteNoOperator(ctx, cl, out, o, sjs)
	if o.Stop {
		if err := suspendSchedules(ctx, cl, out, sjs); err != nil {
			return err
		}
		// A run a schedule started before it was suspended is deleted too.
		if sjs, err = listSafeJobs(ctx, cl, ""); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(o.Timeout)
	if err := deleteSafeJobs(ctx, cl, out, sjs, false); err != nil {
		return err
	}
	if slices.ContainsFunc(sjs, func(sj batchv1alpha1.SafeJob) bool { return sj.Spec.Schedule != nil }) {
		if err := waitReleased(ctx, cl, out, o, deadline, false); err != nil {
			return err
		}
	}
	if err := waitReleased(ctx, cl, out, o, deadline, true); err != nil {
		return err
	}
	if err := removeOperator(ctx, cl, out, o); err != nil {
		return err
	}
	out.printf("SafeJob is uninstalled.\n")
	return out.err
}

// refuseRunning returns ErrRunning, after listing them to w, when SafeJobs
// of sjs run and uninstall is not to stop them.
func refuseRunning(w io.Writer, out *errWriter, sjs []batchv1alpha1.SafeJob, stop bool) error {
	running := Running(sjs)
	if len(running) == 0 || stop {
		return nil
	}
	out.printf("%s run:\n", plural(len(running), "SafeJob"))
	if err := printSafeJobs(w, running); err != nil {
		return err
	}
	return ErrRunning
}

// noteNoOperator warns on out when there are SafeJobs sjs and it can tell
// that no operator's Lease is fresh: the SafeJobs uninstall deletes then
// wait for an operator. It says nothing when it cannot tell.
func noteNoOperator(ctx context.Context, cl client.Client, out *errWriter, o UninstallOptions, sjs []batchv1alpha1.SafeJob) {
	if alive, err := OperatorAlive(ctx, cl, o.OperatorNamespace, o.Now); err == nil && alive == nil && len(sjs) > 0 {
		out.printf("Note: no operator's Lease %s is fresh (an operator without leader election has none): "+
			"the SafeJobs deleted wait for a running operator; if there is none, see kubectl safejob release.\n", LeaseName)
	}
}

// printSafeJobs writes a table of sjs to w, with what kind of SafeJob each is.
func printSafeJobs(w io.Writer, sjs []*batchv1alpha1.SafeJob) error {
	return writeTable(w, TableOptions{}, "NAMESPACE\tNAME\tKIND", func(row func(string, ...any)) {
		for _, sj := range sjs {
			kind := "job"
			switch {
			case sj.Spec.Schedule != nil:
				kind = "schedule"
			case batchv1alpha1.RunParent(sj) != nil:
				kind = "run of " + batchv1alpha1.RunParent(sj).Name
			}
			row("%s\t%s\t%s", sj.Namespace, sj.Name, kind)
		}
	})
}

// suspendSchedules sets spec.suspend on every schedule that is not
// suspended, so that it starts no new run.
func suspendSchedules(ctx context.Context, cl client.Client, out *errWriter, sjs []batchv1alpha1.SafeJob) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))
	for k := range sjs {
		sj := &sjs[k]
		if sj.Spec.Schedule == nil || (sj.Spec.Suspend != nil && *sj.Spec.Suspend) || sj.DeletionTimestamp != nil {
			continue
		}
		if err := cl.Patch(ctx, sj, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("suspending schedule %s/%s: %w", sj.Namespace, sj.Name, err)
		}
		out.printf("Suspended schedule %s/%s.\n", sj.Namespace, sj.Name)
	}
	return out.err
}

// deleteSafeJobs deletes the SafeJobs not yet deleting: the runs and the
// other SafeJobs without a schedule first, then, with withSchedules, the
// schedules.
func deleteSafeJobs(ctx context.Context, cl client.Client, out *errWriter, sjs []batchv1alpha1.SafeJob, withSchedules bool) error {
	n := 0
	for _, schedules := range []bool{false, true} {
		if schedules && !withSchedules {
			break
		}
		for k := range sjs {
			sj := &sjs[k]
			if (sj.Spec.Schedule != nil) != schedules || sj.DeletionTimestamp != nil {
				continue
			}
			if err := cl.Delete(ctx, sj, client.PropagationPolicy(metav1.DeletePropagationBackground),
				client.Preconditions{UID: &sj.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting SafeJob %s/%s: %w", sj.Namespace, sj.Name, err)
			}
			n++
		}
	}
	if n > 0 {
		out.printf("Deleted %s.\n", plural(n, "SafeJob"))
	}
	return out.err
}

// left is what still holds SafeJob's finalizers.
type left struct{ safeJobs, pods, workloads int }

func (l left) none() bool { return l == left{} }

// describe is String, or without all the number of SafeJobs without a
// schedule, the only things counted then.
func (l left) describe(all bool) string {
	if all {
		return l.String()
	}
	return plural(l.safeJobs, "SafeJob")
}

func (l left) String() string {
	return fmt.Sprintf("%s, %s holding finalizer %s, %s holding finalizer %s", plural(l.safeJobs, "SafeJob"),
		plural(l.pods, "pod"), batchv1alpha1.LedgerFinalizer, plural(l.workloads, "Workload"), WorkloadFinalizer)
}

// maxNamed is how many of what is left a timed out wait names.
const maxNamed = 10

// leftNow counts what is left, names the first of them, and deletes the
// SafeJobs created since the last look. Without all, only the SafeJobs
// without a schedule count, and no schedule is deleted.
func leftNow(ctx context.Context, cl client.Client, out *errWriter, workloads, all bool) (left, []string, error) {
	var l left
	var names []string
	name := func(kind string, obj metav1.Object) {
		if len(names) < maxNamed {
			names = append(names, fmt.Sprintf("%s %s/%s (finalizers %v)", kind, obj.GetNamespace(), obj.GetName(), obj.GetFinalizers()))
		}
	}
	sjs, err := listSafeJobs(ctx, cl, "")
	if err != nil {
		return l, nil, err
	}
	for k := range sjs {
		if all || sjs[k].Spec.Schedule == nil {
			l.safeJobs++
			name(KindSafeJob, &sjs[k])
		}
	}
	if err := deleteSafeJobs(ctx, cl, out, sjs, all); err != nil {
		return l, nil, err
	}
	if !all {
		return l, names, nil
	}
	if l.pods, err = leftPods(ctx, cl, name); err != nil {
		return l, nil, err
	}
	if workloads {
		if l.workloads, err = leftWorkloads(ctx, cl, name); err != nil {
			return l, nil, err
		}
	}
	return l, names, nil
}

// leftPods counts the pods of SafeJobs that still hold the ledger
// finalizer, passing each to name.
func leftPods(ctx context.Context, cl client.Client, name func(kind string, obj metav1.Object)) (int, error) {
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PodList"))
	pods.APIVersion = "v1"
	if err := cl.List(ctx, pods); err != nil {
		return 0, fmt.Errorf("listing pods: %w", err)
	}
	n := 0
	for k := range pods.Items {
		// A pod that is no SafeJob's is not the operator's to let go.
		if sj, _ := safeJobOf(&pods.Items[k]); sj != "" && slices.Contains(pods.Items[k].Finalizers, batchv1alpha1.LedgerFinalizer) {
			n++
			name(KindPod, &pods.Items[k])
		}
	}
	return n, nil
}

// leftWorkloads counts the Workloads a SafeJob controls that still hold
// the resource-in-use finalizer, passing each to name.
func leftWorkloads(ctx context.Context, cl client.Client, name func(kind string, obj metav1.Object)) (int, error) {
	var wls kueue.WorkloadList
	if err := cl.List(ctx, &wls); err != nil {
		return 0, fmt.Errorf("listing Workloads: %w", err)
	}
	n := 0
	for k := range wls.Items {
		ref := metav1.GetControllerOfNoCopy(&wls.Items[k])
		if ref != nil && batchv1alpha1.IsSafeJobRef(ref) && slices.Contains(wls.Items[k].Finalizers, WorkloadFinalizer) {
			n++
			name(KindWorkload, &wls.Items[k])
		}
	}
	return n, nil
}

// waitReleased waits until no SafeJob is left and the operator has let go
// of every pod and Workload, saying how many are left as that changes;
// without all, until no SafeJob without a schedule is left.
func waitReleased(ctx context.Context, cl client.Client, out *errWriter, o UninstallOptions, deadline time.Time, all bool) error {
	interval := o.Interval
	if interval <= 0 {
		interval = time.Second
	}
	var last left
	var named []string
	first := true
	what := "Waiting for the operator to let go"
	if !all {
		what = "Waiting for the runs and the other SafeJobs without a schedule to go before deleting the schedules"
	}
	look := func(ctx context.Context) (bool, error) {
		l, names, err := leftNow(ctx, cl, out, o.Workloads, all)
		if err != nil {
			return false, err
		}
		if !l.none() && (first || l != last) {
			out.printf("%s: %s left.\n", what, l.describe(all))
		}
		first, last, named = false, l, names
		return l.none(), out.err
	}
	err := wait.PollUntilContextTimeout(ctx, interval, max(time.Until(deadline), time.Millisecond), true, look)
	if err == nil {
		if all {
			out.printf("No SafeJob is left, and nothing holds a finalizer of SafeJob's.\n")
		}
		return out.err
	}
	if ctx.Err() == nil && wait.Interrupted(err) {
		return fmt.Errorf("after %s, %s left (%s): the operator lets them go as it records each outcome; is it running "+
			"(kubectl -n %s get pods)? If it is gone, `kubectl safejob release -A` frees them, giving up the outcomes not recorded",
			o.Timeout, last.describe(all), strings.Join(named, "; "), o.OperatorNamespace)
	}
	return fmt.Errorf("waiting for the operator to let go: %w", err)
}

// removeOperator deletes the operator's Deployments and, with DeleteCRD,
// the SafeJob CRD and SafeJob's admission policies and their bindings.
func removeOperator(ctx context.Context, cl client.Client, out *errWriter, o UninstallOptions) error {
	var deps appsv1.DeploymentList
	if err := cl.List(ctx, &deps, client.InNamespace(o.OperatorNamespace),
		client.MatchingLabels{operatorLabel: operatorLabelValue}); err != nil {
		return fmt.Errorf("listing the operator's Deployments in %s: %w", o.OperatorNamespace, err)
	}
	byName := &appsv1.Deployment{}
	switch err := cl.Get(ctx, client.ObjectKey{Namespace: o.OperatorNamespace, Name: operatorDeployment}, byName); {
	case err == nil:
		if !slices.ContainsFunc(deps.Items, func(d appsv1.Deployment) bool { return d.Name == byName.Name }) {
			deps.Items = append(deps.Items, *byName)
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Deployment %s/%s: %w", o.OperatorNamespace, operatorDeployment, err)
	}
	if len(deps.Items) == 0 {
		out.printf("No operator Deployment in namespace %s (labelled %s=%s or named %s): if the operator runs elsewhere, stop it there.\n",
			o.OperatorNamespace, operatorLabel, operatorLabelValue, operatorDeployment)
	}
	for k := range deps.Items {
		d := &deps.Items[k]
		if err := cl.Delete(ctx, d, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the operator's Deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		out.printf("Deleted the operator's Deployment %s/%s.\n", d.Namespace, d.Name)
	}
	if !o.DeleteCRD {
		return out.err
	}
	type named struct {
		kind string
		obj  client.Object
	}
	var objs []named
	for _, name := range Policies {
		objs = append(objs, named{"ValidatingAdmissionPolicyBinding",
			&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}})
	}
	for _, name := range Policies {
		objs = append(objs, named{"ValidatingAdmissionPolicy",
			&admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}})
	}
	objs = append(objs, named{"CustomResourceDefinition",
		&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: CRDName}}})
	for _, n := range objs {
		switch err := cl.Delete(ctx, n.obj); {
		case err == nil:
			out.printf("Deleted %s %s.\n", n.kind, n.obj.GetName())
		case !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
			return fmt.Errorf("deleting %s %s: %w", n.kind, n.obj.GetName(), err)
		}
	}
	return out.err
}
