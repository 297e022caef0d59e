package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, batchv1alpha1.AddToScheme,
		kueue.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// newFake is a fake API server holding objs. Like the real one, it refuses
// a pod patch that carries a UID other than the pod's (the fake client
// would change the UID).
func newFake(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	patch := funcs.Patch
	funcs.Patch = func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if patch != nil {
			if err := patch(ctx, cl, obj, p, opts...); err != nil {
				return err
			}
		}
		if err := refuseOtherUID(ctx, cl, obj, p); err != nil {
			return err
		}
		return cl.Patch(ctx, obj, p, opts...)
	}
	return interceptor.NewClient(fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build(), funcs)
}

// refuseOtherUID answers a strategic merge patch of a pod whose
// metadata.uid is not the stored pod's as the API server does: Invalid,
// field metadata.uid.
func refuseOtherUID(ctx context.Context, cl client.Client, obj client.Object, p client.Patch) error {
	if _, ok := obj.(*corev1.Pod); !ok || p.Type() != types.StrategicMergePatchType {
		return nil
	}
	data, err := p.Data(obj)
	if err != nil {
		return err
	}
	var body struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return err
	}
	cur := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return err
	}
	if body.Metadata.UID != "" && body.Metadata.UID != cur.UID {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, obj.GetName(),
			field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), body.Metadata.UID, "field is immutable")})
	}
	return nil
}

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func launched(seq int64, pod string, i int32) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: batchv1alpha1.EntryLaunched, Index: i, Pod: pod, Time: metav1.NewTime(now)}
}

func ended(seq int64, typ batchv1alpha1.EntryType, pod string, i int32) batchv1alpha1.LedgerEntry {
	return batchv1alpha1.LedgerEntry{Seq: seq, Type: typ, Index: i, Pod: pod, Time: metav1.NewTime(now), Reason: reasonOf(typ)}
}

func reasonOf(typ batchv1alpha1.EntryType) string {
	if typ == batchv1alpha1.EntryFailed {
		return batchv1alpha1.FailReasonCounted
	}
	return ""
}

func safeJob(ns, name string, uid types.UID) *batchv1alpha1.SafeJob {
	return &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec: batchv1alpha1.SafeJobSpec{Completions: ptr.To[int32](4), Parallelism: ptr.To[int32](4)}}
}

// podOf is a pod sj created for attempt 0 of index i, holding the ledger
// finalizer, in phase.
func podOf(sj *batchv1alpha1.SafeJob, i int32, phase corev1.PodPhase) *corev1.Pod {
	name := fmt.Sprintf("%s-%d-0", sj.Name, i)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sj.Namespace, Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{batchv1alpha1.SafeJobNameLabel: sj.Name, batchv1alpha1.ControllerUIDLabel: string(sj.UID),
			batchv1alpha1.CompletionIndexLabel: fmt.Sprint(i), batchv1alpha1.AttemptLabel: "0"},
		Finalizers:      []string{batchv1alpha1.LedgerFinalizer},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sj, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}},
		Status: corev1.PodStatus{Phase: phase}}
}

// etlCluster is a namespace where SafeJob etl's ledger recorded the
// outcome of etl-0-0, folded that of etl-3-0 into its checkpoint, and not
// those of etl-1-0 (running) and etl-2-0 (ended); SafeJob gone is gone,
// its pod gone-0-0 left; run etl-run holds the run finalizer and a Workload
// of etl the resource-in-use one. A stranger's pod holds the ledger
// finalizer without being a SafeJob's.
func etlCluster() []client.Object {
	etl := safeJob("ns", "etl", "etl-uid")
	etl.Status.Ledger = batchv1alpha1.Ledger{Seq: 5,
		Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 2, SucceededIndexes: "3"},
		Entries: []batchv1alpha1.LedgerEntry{
			launched(3, "etl-0-0", 0), launched(4, "etl-1-0", 1), launched(5, "etl-2-0", 2), ended(6, batchv1alpha1.EntrySucceeded, "etl-0-0", 0),
		}}
	etl.Status.Ledger.Seq = 6
	gone := safeJob("ns", "gone", "gone-uid")
	run := safeJob("ns", "etl-run", "run-uid")
	run.Finalizers = []string{batchv1alpha1.RunFinalizer}
	stranger := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "stranger", UID: "s",
		Finalizers: []string{batchv1alpha1.LedgerFinalizer}}}
	wl := &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "safejob-etl-abcde", UID: "wl-uid",
		Finalizers:      []string{WorkloadFinalizer},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(etl, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}}}
	return []client.Object{etl, run, stranger, wl,
		podOf(etl, 0, corev1.PodSucceeded), podOf(etl, 1, corev1.PodRunning), podOf(etl, 2, corev1.PodFailed),
		podOf(etl, 3, corev1.PodSucceeded), podOf(gone, 0, corev1.PodSucceeded)}
}

func finalizersOf(t *testing.T, cl client.Client, obj client.Object) []string {
	t.Helper()
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj.GetFinalizers()
}

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// TestReleaseListsOutcomesNotRecorded: release says which pods' outcomes
// it gives up (running, ended but not in the ledger, of a SafeJob that is
// gone) and not those the ledger recorded or folded, then frees every pod,
// run and Workload of SafeJob's, and never a stranger's pod.
func TestReleaseListsOutcomesNotRecorded(t *testing.T) {
	cl := newFake(t, interceptor.Funcs{}, etlCluster()...)
	var out bytes.Buffer
	if err := Release(context.Background(), cl, &out, ReleaseOptions{Workloads: true, Now: now}); err != nil {
		t.Fatal(err)
	}
	lost := out.String()[:strings.Index(out.String(), "Releasing the finalizers")]
	for _, want := range []string{"releasing these 3 pods gives up", "etl-1-0", unrecordedRunning, "etl-2-0", unrecordedEnded,
		"gone-0-0", unrecordedGone} {
		if !strings.Contains(lost, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, recorded := range []string{"etl-0-0", "etl-3-0", "stranger"} {
		if strings.Contains(out.String(), recorded) {
			t.Errorf("output lists %s, whose outcome is recorded or that is not a SafeJob's:\n%s", recorded, out.String())
		}
	}
	if !strings.Contains(out.String(), "Released 5 pods, 1 SafeJob and 1 Workload.") {
		t.Errorf("output:\n%s", out.String())
	}
	for _, name := range []string{"etl-0-0", "etl-1-0", "etl-2-0", "etl-3-0", "gone-0-0"} {
		if f := finalizersOf(t, cl, pod(name)); len(f) != 0 {
			t.Errorf("pod %s keeps finalizers %v", name, f)
		}
	}
	if f := finalizersOf(t, cl, pod("stranger")); !slices.Equal(f, []string{batchv1alpha1.LedgerFinalizer}) {
		t.Errorf("the stranger's pod has finalizers %v", f)
	}
	if f := finalizersOf(t, cl, &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etl-run"}}); len(f) != 0 {
		t.Errorf("run keeps finalizers %v", f)
	}
	if f := finalizersOf(t, cl, &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "safejob-etl-abcde"}}); len(f) != 0 {
		t.Errorf("Workload keeps finalizers %v", f)
	}
}

// TestReleaseByName: with a name, only that SafeJob's pods are freed; and
// without the Workload API served no Workload is touched.
func TestReleaseByName(t *testing.T) {
	cl := newFake(t, interceptor.Funcs{}, etlCluster()...)
	var out bytes.Buffer
	if err := Release(context.Background(), cl, &out, ReleaseOptions{Name: "gone", Namespace: "ns", Now: now}); err != nil {
		t.Fatal(err)
	}
	if f := finalizersOf(t, cl, pod("gone-0-0")); len(f) != 0 {
		t.Errorf("pod gone-0-0 keeps finalizers %v", f)
	}
	if f := finalizersOf(t, cl, pod("etl-1-0")); len(f) != 1 {
		t.Errorf("pod etl-1-0 of another SafeJob has finalizers %v", f)
	}
	cl = newFake(t, interceptor.Funcs{}, etlCluster()...)
	if err := Release(context.Background(), cl, &out, ReleaseOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	if f := finalizersOf(t, cl, &kueue.Workload{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "safejob-etl-abcde"}}); len(f) != 1 {
		t.Errorf("a Workload was touched though the Workload API is not served: %v", f)
	}
}

// TestReleaseLeavesObjectOfAnotherUID: a pod and a run deleted and
// created again under the same name after release listed them keep their
// finalizers: each patch carries the UID release read.
func TestReleaseLeavesObjectOfAnotherUID(t *testing.T) {
	recreate := recreator{}.recreate
	cl := newFake(t, interceptor.Funcs{
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
			if obj.GetName() == "etl-1-0" {
				return recreate(ctx, cl, obj)
			}
			return nil
		},
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "etl-run" {
				if err := recreate(ctx, cl, &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}); err != nil {
					return err
				}
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	}, etlCluster()...)
	var out bytes.Buffer
	if err := Release(context.Background(), cl, &out, ReleaseOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	p := pod("etl-1-0")
	if f := finalizersOf(t, cl, p); p.UID != "successor" || !slices.Equal(f, []string{batchv1alpha1.LedgerFinalizer}) {
		t.Errorf("the pod that took the name (uid %s) has finalizers %v", p.UID, f)
	}
	run := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etl-run"}}
	if f := finalizersOf(t, cl, run); run.UID != "successor" || !slices.Equal(f, []string{batchv1alpha1.RunFinalizer}) {
		t.Errorf("the SafeJob that took the name (uid %s) has finalizers %v", run.UID, f)
	}
	for _, want := range []string{"Pod ns/etl-1-0 left alone: its name is held by another Pod now",
		"SafeJob ns/etl-run left alone", "Released 4 pods, 0 SafeJobs and 0 Workloads."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// recreator replaces objects by successors, each name once: as if another
// object had taken the name of the one release read.
type recreator map[string]bool

// recreate deletes the object of obj's name and creates another of that
// name with the same finalizers and UID "successor"; it does nothing for a
// name it has recreated before.
func (r recreator) recreate(ctx context.Context, cl client.WithWatch, obj client.Object) error {
	if r[obj.GetName()] {
		return nil
	}
	r[obj.GetName()] = true
	fresh, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return errors.New("not an object")
	}
	if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
		return err
	}
	fins := fresh.GetFinalizers()
	fresh.SetFinalizers(nil)
	if err := cl.Update(ctx, fresh); err != nil {
		return err
	}
	if err := cl.Delete(ctx, fresh); err != nil {
		return err
	}
	fresh.SetFinalizers(fins)
	fresh.SetUID("successor")
	fresh.SetResourceVersion("")
	return cl.Create(ctx, fresh)
}

func lease(ns, holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: renewed}}}
}

// TestReleaseRefusesWhileOperatorAlive: a Lease renewed within its
// duration, in any namespace, makes release refuse and change nothing;
// --force releases all the same, and so does a stale or released Lease.
func TestReleaseRefusesWhileOperatorAlive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lease  *coordinationv1.Lease
		force  bool
		refuse bool
	}{
		{"fresh", lease("ops", "op-1", now.Add(-5*time.Second)), false, true},
		{"fresh, forced", lease("ops", "op-1", now.Add(-5*time.Second)), true, false},
		{"stale", lease("ops", "op-1", now.Add(-20*time.Second)), false, false},
		{"released", lease("ops", "", now), false, false},
		{"another name", func() *coordinationv1.Lease { l := lease("ops", "x", now); l.Name = "other"; return l }(), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newFake(t, interceptor.Funcs{}, append(etlCluster(), tc.lease)...)
			var out bytes.Buffer
			err := Release(context.Background(), cl, &out, ReleaseOptions{Force: tc.force, OperatorNamespace: "safejob-system", Now: now})
			var alive *OperatorAliveError
			if got := errors.As(err, &alive); got != tc.refuse {
				t.Fatalf("refused: %v (%v), want %v", got, err, tc.refuse)
			}
			if err != nil && !tc.refuse {
				t.Fatal(err)
			}
			f := finalizersOf(t, cl, pod("etl-1-0"))
			if released := len(f) == 0; released == tc.refuse {
				t.Errorf("pod finalizers %v after release (refused %v)", f, tc.refuse)
			}
			if tc.refuse && (!strings.Contains(err.Error(), "ops/"+LeaseName) || !strings.Contains(err.Error(), "loses those outcomes")) {
				t.Errorf("the refusal does not say why: %v", err)
			}
		})
	}
}

// TestReleaseDryRunChangesNothing: --dry-run says what it would do and
// writes nothing, also while an operator looks alive.
func TestReleaseDryRunChangesNothing(t *testing.T) {
	for _, alive := range []bool{false, true} {
		objs := etlCluster()
		if alive {
			objs = append(objs, lease("safejob-system", "op-1", now))
		}
		writes := 0
		count := func() { writes++ }
		cl := newFake(t, interceptor.Funcs{
			Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
				count()
				return nil
			},
			Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				count()
				return cl.Update(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				count()
				return cl.Delete(ctx, obj, opts...)
			},
		}, objs...)
		var out bytes.Buffer
		if err := Release(context.Background(), cl, &out, ReleaseOptions{DryRun: true, Workloads: true, Now: now}); err != nil {
			t.Fatal(err)
		}
		if writes != 0 {
			t.Errorf("alive %v: %d writes in a dry run", alive, writes)
		}
		for _, want := range []string{"etl-1-0", "Would release the finalizers of 5 pods, 1 SafeJob and 1 Workload.", "Dry run: nothing changed."} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("alive %v: output lacks %q:\n%s", alive, want, out.String())
			}
		}
		if f := finalizersOf(t, cl, pod("etl-1-0")); len(f) != 1 {
			t.Errorf("alive %v: pod finalizers %v after a dry run", alive, f)
		}
	}
}

// TestReleaseTwice: a second release finds nothing left and says so.
func TestReleaseTwice(t *testing.T) {
	cl := newFake(t, interceptor.Funcs{}, etlCluster()...)
	var out bytes.Buffer
	for range 2 {
		out.Reset()
		if err := Release(context.Background(), cl, &out, ReleaseOptions{Workloads: true, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if got := out.String(); got != "Nothing holds a finalizer of SafeJob's: nothing to release.\n" {
		t.Errorf("second run said:\n%s", got)
	}
}

// TestReleaseWhenTheLeaseCannotBeRead: a user who may read no Lease is
// refused, since no operator can be ruled out, unless --force.
func TestReleaseWhenTheLeaseCannotBeRead(t *testing.T) {
	forbid := interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*coordinationv1.LeaseList); ok {
				return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("no"))
			}
			return cl.List(ctx, list, opts...)
		},
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, key.Name, errors.New("no"))
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	}
	for _, force := range []bool{false, true} {
		cl := newFake(t, forbid, etlCluster()...)
		var out bytes.Buffer
		err := Release(context.Background(), cl, &out, ReleaseOptions{Force: force, OperatorNamespace: DefaultOperatorNamespace, Now: now})
		if force != (err == nil) {
			t.Fatalf("force %v: err %v", force, err)
		}
		if released := len(finalizersOf(t, cl, pod("etl-1-0"))) == 0; released != force {
			t.Errorf("force %v: released %v", force, released)
		}
	}
}

// TestReleaseAndUninstallWithoutTheCRD: once the SafeJob CRD is gone, its
// pods are released as a gone SafeJob's, and uninstall finds nothing left.
func TestReleaseAndUninstallWithoutTheCRD(t *testing.T) {
	noCRD := interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*batchv1alpha1.SafeJobList); ok {
				return &meta.NoKindMatchError{GroupKind: batchv1alpha1.GroupVersion.WithKind("SafeJob").GroupKind()}
			}
			return cl.List(ctx, list, opts...)
		},
	}
	cl := newFake(t, noCRD, etlCluster()...)
	var out bytes.Buffer
	if err := Release(context.Background(), cl, &out, ReleaseOptions{Now: now}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "releasing these 5 pods gives up") || !strings.Contains(out.String(), "Released 5 pods, 0 SafeJobs") {
		t.Errorf("release without the CRD:\n%s", out.String())
	}
	out.Reset()
	if err := Uninstall(context.Background(), cl, &out, UninstallOptions{OperatorNamespace: DefaultOperatorNamespace,
		Timeout: time.Second, Interval: time.Millisecond, Now: now}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
