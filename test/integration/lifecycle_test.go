package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// newerFormat is a ledger format above this build's, as a newer build writes.
const newerFormat = batchv1alpha1.LedgerFormat + 1

// TestNewerBuildsStatusKept runs this build on an API server whose CRD is
// a newer build's: its status has fields this build's types lack
// (status.futureCounter, status.ledger.checkpoint.futureMark) and it takes
// a ledger format above this build's. A build never erases a status field
// it does not know: the fields a newer build wrote survive this build's
// writes, the ones that commit launches included. A SafeJob whose ledger
// the newer build wrote in a newer format is left alone (LedgerValid
// False, LedgerFormatUnknown): no pod, nothing else written.
func TestNewerBuildsStatusKept(t *testing.T) {
	t.Parallel() // its own API server
	c := newerCRDServer(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sj-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kept := testutil.MakeSafeJob("kept", ns.Name).Completions(2).Parallelism(2).Obj()
	newer := testutil.MakeSafeJob("newer", ns.Name).Completions(1).Obj()
	for _, sj := range []*batchv1alpha1.SafeJob{kept, newer} {
		if err := c.Create(ctx, sj); err != nil {
			t.Fatal(err)
		}
	}
	// What the newer build wrote, before this build runs.
	writeStatus(t, c, kept, map[string]any{"futureCounter": int64(7),
		"ledger": map[string]any{"checkpoint": map[string]any{"seq": int64(0), "futureMark": "x"}}})
	writeStatus(t, c, newer, map[string]any{"ledger": map[string]any{"format": int64(newerFormat), "seq": int64(3)}})

	startManager(t, ns.Name, managerOptions{config: c.config, noKueue: true})

	waitFor(t, 30*time.Second, "both launches of kept committed, its pods created", func() (bool, error) {
		sj := &batchv1alpha1.SafeJob{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(kept), sj); err != nil {
			return false, err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns.Name), client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: "kept"}); err != nil {
			return false, err
		}
		return sj.Status.Ledger.Seq >= 2 && len(pods.Items) == 2, nil
	})
	checkFieldsKept(t, readStatus(t, c, kept))
	checkNewerLeftAlone(t, c, newer)
}

// checkFieldsKept checks a status that a newer build wrote and this build
// wrote over: the newer build's fields are there, and this build's format.
func checkFieldsKept(t *testing.T, got map[string]any) {
	t.Helper()
	if v, _, _ := unstructured.NestedInt64(got, "futureCounter"); v != 7 {
		t.Errorf("status.futureCounter = %v after this build's writes, want 7 (status: %v)", v, got)
	}
	if v, _, _ := unstructured.NestedString(got, "ledger", "checkpoint", "futureMark"); v != "x" {
		t.Errorf("status.ledger.checkpoint.futureMark = %q after this build's writes, want x", v)
	}
	if v, _, _ := unstructured.NestedInt64(got, "ledger", "format"); v != batchv1alpha1.LedgerFormat {
		t.Errorf("status.ledger.format = %d, want %d", v, batchv1alpha1.LedgerFormat)
	}
}

// checkNewerLeftAlone waits until this build marks the SafeJob whose
// ledger is of a newer format LedgerFormatUnknown, and checks that it wrote
// nothing else and created no pod.
func checkNewerLeftAlone(t *testing.T, c newerCRDClient, newer *batchv1alpha1.SafeJob) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 30*time.Second, "newer marked LedgerFormatUnknown", func() (bool, error) {
		sj := &batchv1alpha1.SafeJob{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(newer), sj); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(sj.Status.Conditions, batchv1alpha1.ConditionLedgerValid)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == batchv1alpha1.ReasonLedgerFormatUnknown, nil
	})
	sj := &batchv1alpha1.SafeJob{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(newer), sj); err != nil {
		t.Fatal(err)
	}
	if sj.Status.Ledger.Format != newerFormat || sj.Status.Ledger.Seq != 3 || len(sj.Status.Ledger.Entries) != 0 {
		t.Errorf("the newer ledger was written: %+v", sj.Status.Ledger)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(newer.Namespace), client.MatchingLabels{batchv1alpha1.SafeJobNameLabel: "newer"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods created for a ledger of a newer format", len(pods.Items))
	}
}

// newerCRDClient is a client of an API server of its own, and its config.
type newerCRDClient struct {
	client.Client
	config *rest.Config
}

// newerCRDServer starts an API server whose SafeJob CRD is this build's
// with what a newer build would add: status.futureCounter,
// status.ledger.checkpoint.futureMark, and ledger formats up to newerFormat.
func newerCRDServer(t *testing.T) newerCRDClient {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "batch.safejob.dev_safejobs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	status := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	status.Properties["futureCounter"] = apiextensionsv1.JSONSchemaProps{Type: "integer"}
	ledgerSchema := status.Properties["ledger"]
	format := ledgerSchema.Properties["format"]
	format.Maximum = ptr.To(float64(newerFormat))
	ledgerSchema.Properties["format"] = format
	checkpoint := ledgerSchema.Properties["checkpoint"]
	checkpoint.Properties["futureMark"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	ledgerSchema.Properties["checkpoint"] = checkpoint
	status.Properties["ledger"] = ledgerSchema
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"] = status
	assets, err := kubebuilderAssets()
	if err != nil {
		t.Fatal(err)
	}
	env, c, err := testutil.StartControlPlane(func() *envtest.Environment {
		return &envtest.Environment{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}, BinaryAssetsDirectory: assets}
	})
	if err != nil {
		t.Fatalf("starting an API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cl, err := client.New(c, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return newerCRDClient{Client: cl, config: c}
}

var safeJobGVK = schema.GroupVersionKind{Group: batchv1alpha1.GroupVersion.Group, Version: batchv1alpha1.GroupVersion.Version, Kind: "SafeJob"}

// writeStatus sets the SafeJob's status to status, as raw JSON.
func writeStatus(t *testing.T, c client.Client, sj *batchv1alpha1.SafeJob, status map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(safeJobGVK)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(sj), u); err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = status
	if err := c.Status().Update(context.Background(), u); err != nil {
		t.Fatalf("writing status: %v", err)
	}
}

// readStatus reads the SafeJob's status as raw JSON.
func readStatus(t *testing.T, c client.Client, sj *batchv1alpha1.SafeJob) map[string]any {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(safeJobGVK)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(sj), u); err != nil {
		t.Fatal(err)
	}
	status, _, _ := unstructured.NestedMap(u.Object, "status")
	return status
}

// TestRecreatedWhileStoppedReleasesPredecessorsPods: a SafeJob with two
// running pods is deleted and created again under the same name while no
// operator runs, and no garbage collector deletes the old pods. The
// operator that starts then never sees the old SafeJob gone (its cache
// goes straight to the new one): the old pods' ledger finalizers must be
// released all the same, and the new SafeJob's pods must keep theirs.
func TestRecreatedWhileStoppedReleasesPredecessorsPods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, hold, false)
	stop := startManager(t, h.ns, managerOptions{})
	old := testutil.MakeSafeJob("again", h.ns).Completions(3).Parallelism(3).Obj()
	if err := k8s.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitRunningPods(t, h.ns, 3)
	stop()
	if err := k8s.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	again := testutil.MakeSafeJob("again", h.ns).Completions(3).Parallelism(3).Obj()
	if err := k8s.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	startManager(t, h.ns, managerOptions{})
	waitFor(t, 30*time.Second, "the old SafeJob's pods released, the new one's launches committed", func() (bool, error) {
		if held, err := holdingFinalizer(ctx, h.ns, old.UID); err != nil || held > 0 {
			return false, err
		}
		sj := &batchv1alpha1.SafeJob{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(again), sj); err != nil {
			return false, err
		}
		return sj.Status.Ledger.Seq >= 3, nil
	})
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.UID == again.UID && pod.DeletionTimestamp == nil &&
			!slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) && !jobs.IsTerminal(pod) {
			t.Errorf("the new SafeJob's running pod %s lost its ledger finalizer", pod.Name)
		}
	}
}

// holdingFinalizer counts the pods in ns that the SafeJob of uid created
// and that hold the ledger finalizer.
func holdingFinalizer(ctx context.Context, ns string, uid types.UID) (int, error) {
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return 0, err
	}
	n := 0
	for i := range pods.Items {
		if ref := metav1.GetControllerOf(&pods.Items[i]); ref != nil && ref.UID == uid &&
			slices.Contains(pods.Items[i].Finalizers, batchv1alpha1.LedgerFinalizer) {
			n++
		}
	}
	return n, nil
}

// TestReplacedSafeJobDoesNotWaitForItsNames: a running SafeJob deleted and
// created again under its name at once (kubectl replace --force) with its
// old pods still there (no garbage collector here; a slow one elsewhere):
// the new SafeJob's launches must not take the names the old pods hold
// (each would wait out the create fence to be recorded Lost, NameTaken),
// and the old pods' finalizers are released.
func TestReplacedSafeJobDoesNotWaitForItsNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, hold, false)
	startManager(t, h.ns, managerOptions{})
	old := testutil.MakeSafeJob("swap", h.ns).Completions(2).Parallelism(2).Obj()
	if err := k8s.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitRunningPods(t, h.ns, 2)
	h.kubelet.SetFate(func(p *corev1.Pod) testutil.Fate {
		ref := metav1.GetControllerOf(p)
		return testutil.Fate{Hold: ref != nil && ref.UID == old.UID}
	})
	if err := k8s.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the old SafeJob's pods released", func() (bool, error) {
		var pods corev1.PodList
		if err := k8s.List(ctx, &pods, client.InNamespace(h.ns)); err != nil {
			return false, err
		}
		for i := range pods.Items {
			if slices.Contains(pods.Items[i].Finalizers, batchv1alpha1.LedgerFinalizer) {
				return false, nil
			}
		}
		return true, nil
	})
	again := testutil.MakeSafeJob("swap", h.ns).Completions(2).Parallelism(2).Obj()
	if err := k8s.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(again), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 2 {
		t.Fatalf("want Complete with 2 succeeded, got %+v", got.Status)
	}
	if n := countEntries(got, batchv1alpha1.EntryLost); n != 0 {
		t.Errorf("%d launches recorded Lost: the new SafeJob took names the old pods hold", n)
	}
	if started, done := got.Status.StartTime, got.Status.CompletionTime; started == nil || done == nil ||
		done.Sub(started.Time) >= ledger.DefaultFence.LostGrace() {
		t.Errorf("the new SafeJob took from %v to %v, as long as the create fence", started, done)
	}
}
