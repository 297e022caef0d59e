package plugin

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func finished(sj *batchv1alpha1.SafeJob) *batchv1alpha1.SafeJob {
	meta.SetStatusCondition(&sj.Status.Conditions, metav1.Condition{Type: batchv1alpha1.ConditionComplete,
		Status: metav1.ConditionTrue, Reason: "Done"})
	return sj
}

func schedule(ns, name string, uid types.UID) *batchv1alpha1.SafeJob {
	sj := safeJob(ns, name, uid)
	sj.Spec.Schedule = ptr.To("*/5 * * * *")
	return sj
}

func runOf(parent *batchv1alpha1.SafeJob, name string) *batchv1alpha1.SafeJob {
	run := safeJob(parent.Namespace, name, types.UID(name+"-uid"))
	run.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(parent, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}
	return run
}

// operator is an operator's Deployment of the given name in the default
// operator namespace, labelled as config/manager and the chart label it.
func operator(name string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultOperatorNamespace, Name: name,
		Labels: map[string]string{operatorLabel: operatorLabelValue}}}
}

// shipped is what SafeJob installs cluster-wide: its CRD and policies.
func shipped() []client.Object {
	objs := []client.Object{&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: CRDName}}}
	for _, name := range Policies {
		objs = append(objs, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
			&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	return objs
}

func exists(t *testing.T, cl client.Client, obj client.Object) bool {
	t.Helper()
	err := cl.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func uninstallOpts() UninstallOptions {
	return UninstallOptions{OperatorNamespace: DefaultOperatorNamespace, Timeout: time.Second, Interval: time.Millisecond, Now: now}
}

// TestUninstallRefusesWhileSafeJobsRun: a SafeJob not finished, or a
// schedule not suspended, makes uninstall refuse, list them and change
// nothing; once only finished SafeJobs and suspended schedules are left it
// deletes them and removes the operator.
func TestUninstallRefusesWhileSafeJobsRun(t *testing.T) {
	suspended := schedule("b", "paused", "p")
	suspended.Spec.Suspend = ptr.To(true)
	done := finished(safeJob("a", "done", "d"))
	for _, tc := range []struct {
		name    string
		running []*batchv1alpha1.SafeJob
	}{
		{"a SafeJob runs", []*batchv1alpha1.SafeJob{safeJob("a", "busy", "b")}},
		{"a schedule runs", []*batchv1alpha1.SafeJob{schedule("b", "nightly", "n")}},
		{"none runs", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{done.DeepCopy(), suspended.DeepCopy(), operator(operatorDeployment)}
			for _, sj := range tc.running {
				objs = append(objs, sj.DeepCopy())
			}
			cl := newFake(t, interceptor.Funcs{}, objs...)
			var out bytes.Buffer
			err := Uninstall(context.Background(), cl, &out, uninstallOpts())
			opDeployment := operator(operatorDeployment)
			if len(tc.running) > 0 {
				if !errors.Is(err, ErrRunning) {
					t.Fatalf("err %v, want ErrRunning", err)
				}
				for _, sj := range tc.running {
					if !strings.Contains(out.String(), sj.Name) {
						t.Errorf("output does not list %s:\n%s", sj.Name, out.String())
					}
				}
				if !exists(t, cl, done) || !exists(t, cl, opDeployment) {
					t.Errorf("a refused uninstall deleted something")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if exists(t, cl, done) || exists(t, cl, suspended.DeepCopy()) || exists(t, cl, opDeployment) {
				t.Errorf("finished SafeJobs or the operator are left:\n%s", out.String())
			}
		})
	}
}

// TestUninstallStopsSchedulesThenDeletesRunsFirst: with --stop, every
// schedule is suspended before any SafeJob is deleted, and each run is
// deleted before its parent; then the operator, the CRD and the policies
// go.
func TestUninstallStopsSchedulesThenDeletesRunsFirst(t *testing.T) {
	nightly := schedule("a", "nightly", "n")
	hourly := schedule("b", "hourly", "h")
	var ops []string
	cl := newFake(t, interceptor.Funcs{
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
			ops = append(ops, "suspend "+obj.GetName())
			return nil
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*batchv1alpha1.SafeJob); ok {
				ops = append(ops, "delete "+obj.GetName())
			}
			return cl.Delete(ctx, obj, opts...)
		},
	}, append(shipped(), nightly, hourly, runOf(nightly, "nightly-1"), runOf(hourly, "hourly-1"),
		finished(runOf(hourly, "hourly-0")), safeJob("a", "etl", "e"), operator("manager"))...)
	var out bytes.Buffer
	o := uninstallOpts()
	o.Stop, o.DeleteCRD = true, true
	if err := Uninstall(context.Background(), cl, &out, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	at := func(op string) int {
		k := slices.Index(ops, op)
		if k < 0 {
			t.Fatalf("no %q among %v", op, ops)
		}
		return k
	}
	firstDelete := slices.IndexFunc(ops, func(op string) bool { return strings.HasPrefix(op, "delete ") })
	for _, s := range []string{"nightly", "hourly"} {
		if at("suspend "+s) > firstDelete {
			t.Errorf("schedule %s suspended after a delete: %v", s, ops)
		}
		for _, run := range []string{s + "-1"} {
			if at("delete "+run) > at("delete "+s) {
				t.Errorf("run %s deleted after its parent: %v", run, ops)
			}
		}
	}
	if at("delete etl") < 0 || at("delete hourly-0") > at("delete hourly") {
		t.Errorf("ops %v", ops)
	}
	for _, obj := range append(shipped(), operator("manager")) {
		if exists(t, cl, obj) {
			t.Errorf("%T %s is left", obj, obj.GetName())
		}
	}
}

// TestUninstallWaitsForTheOperator: uninstall removes the operator only
// once nothing holds a finalizer of SafeJob's; a wait that times out says
// what is left, names release, and leaves the operator running. A second
// uninstall, after the operator let go, finishes; a third finds nothing to
// do and says that no operator Deployment is left.
func TestUninstallWaitsForTheOperator(t *testing.T) {
	etl := finished(safeJob("a", "etl", "e"))
	held := podOf(etl, 0, corev1.PodRunning)
	held.OwnerReferences = nil // its SafeJob is deleted; the operator has not let it go
	cl := newFake(t, interceptor.Funcs{}, etl, held, operator(operatorDeployment))
	var out bytes.Buffer
	o := uninstallOpts()
	o.Timeout = 50 * time.Millisecond
	err := Uninstall(context.Background(), cl, &out, o)
	if err == nil || !strings.Contains(err.Error(), "1 pod holding") || !strings.Contains(err.Error(), "kubectl safejob release") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Waiting for the operator to let go: 0 SafeJobs, 1 pod") {
		t.Errorf("no progress shown:\n%s", out.String())
	}
	if !exists(t, cl, operator(operatorDeployment)) {
		t.Fatal("the operator was removed while a pod holds its finalizer")
	}
	held.Finalizers = nil
	if err := cl.Update(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(context.Background(), cl, &out, o); err != nil {
		t.Fatal(err)
	}
	if exists(t, cl, operator(operatorDeployment)) {
		t.Fatal("the operator is left")
	}
	out.Reset()
	if err := Uninstall(context.Background(), cl, &out, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No operator Deployment in namespace safejob-system", "SafeJob is uninstalled."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestUninstallDeletesParentsOnceRunsAreGone: a deleted run keeps its run
// finalizer until its parent has recorded it; uninstall deletes the parent
// only once the run is gone, so that the parent is there to record it.
func TestUninstallDeletesParentsOnceRunsAreGone(t *testing.T) {
	nightly := schedule("a", "nightly", "n")
	run := runOf(nightly, "nightly-1")
	run.Finalizers = []string{batchv1alpha1.RunFinalizer}
	looks, runLeft := 0, []string(nil)
	cl := newFake(t, interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*batchv1alpha1.SafeJobList); ok {
				// The operator: the parent records the deleted run a few
				// looks later and lets it go.
				cur := run.DeepCopy()
				if err := cl.Get(ctx, client.ObjectKeyFromObject(run), cur); err == nil && cur.DeletionTimestamp != nil {
					if looks++; looks == 3 {
						cur.Finalizers = nil
						if err := cl.Update(ctx, cur); err != nil {
							return err
						}
					}
				}
			}
			return cl.List(ctx, list, opts...)
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if obj.GetName() == nightly.Name {
				cur := run.DeepCopy()
				if err := cl.Get(ctx, client.ObjectKeyFromObject(run), cur); err == nil {
					runLeft = cur.Finalizers
				}
			}
			return cl.Delete(ctx, obj, opts...)
		},
	}, nightly, run)
	var out bytes.Buffer
	o := uninstallOpts()
	o.Stop = true
	if err := Uninstall(context.Background(), cl, &out, o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if looks < 3 || runLeft != nil {
		t.Errorf("the parent was deleted while its run held %v (%d looks):\n%s", runLeft, looks, out.String())
	}
	if !strings.Contains(out.String(), "Waiting for the runs and the other SafeJobs without a schedule to go before deleting the schedules: 1 SafeJob left.") {
		t.Errorf("output:\n%s", out.String())
	}
	if exists(t, cl, nightly.DeepCopy()) {
		t.Error("the parent is left")
	}
}

// TestUninstallKeepsParentsWhileRunsStay: a run the operator never lets go
// keeps its parent and the operator in place; the timeout names the run.
func TestUninstallKeepsParentsWhileRunsStay(t *testing.T) {
	nightly := schedule("a", "nightly", "n")
	run := runOf(nightly, "nightly-1")
	run.Finalizers = []string{batchv1alpha1.RunFinalizer}
	cl := newFake(t, interceptor.Funcs{}, nightly, run, operator(operatorDeployment))
	var out bytes.Buffer
	o := uninstallOpts()
	o.Stop, o.Timeout = true, 50*time.Millisecond
	err := Uninstall(context.Background(), cl, &out, o)
	if err == nil || !strings.Contains(err.Error(), "after 50ms, 1 SafeJob left (SafeJob a/nightly-1 (finalizers [batch.safejob.dev/run]))") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
	if !exists(t, cl, nightly.DeepCopy()) || !exists(t, cl, operator(operatorDeployment)) {
		t.Error("the parent or the operator was deleted while a run stays")
	}
}
