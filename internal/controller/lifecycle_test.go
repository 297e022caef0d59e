package controller

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// lifecycleReconciler is a reconciler over a fake client holding objs, with
// its recorder; patch, if set, intercepts status patches.
func lifecycleReconciler(t *testing.T, patch func(context.Context, client.Client, string, client.Object, client.Patch,
	...client.SubResourcePatchOption) error, objs ...client.Object) (*SafeJobReconciler, *events.FakeRecorder) {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, batchv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&batchv1alpha1.SafeJob{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: patch}).Build()
	rec := events.NewFakeRecorder(20)
	return &SafeJobReconciler{Client: c, APIReader: c, Recorder: rec, Metrics: NewMetrics(),
		Clock: clocktesting.NewFakePassiveClock(time.Unix(1000, 0)), tracker: newTracker()}, rec
}

func getSafeJob(t *testing.T, c client.Client, key types.NamespacedName) *batchv1alpha1.SafeJob {
	t.Helper()
	sj := &batchv1alpha1.SafeJob{}
	if err := c.Get(context.Background(), key, sj); err != nil {
		t.Fatal(err)
	}
	return sj
}

// TestStatusWriteRefusedIsReported: a status the API server refuses for
// what it carries (too large, or a value the CRD does not allow) is refused
// again on every retry. It is said in the StatusWriteFailure condition and
// an event, and counted; the next write that is stored removes it.
func TestStatusWriteRefusedIsReported(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns", UID: "u"}}
	refuse := true
	r, rec := lifecycleReconciler(t, func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch,
		opts ...client.SubResourcePatchOption) error {
		body, err := p.Data(obj)
		if err != nil {
			return err
		}
		if refuse && strings.Contains(string(body), `"ledger"`) {
			return apierrors.NewInvalid(schema.GroupKind{Group: "batch.safejob.dev", Kind: "SafeJob"}, "sj",
				field.ErrorList{field.TooLong(field.NewPath("status", "conditions").Index(0).Child("message"), "", 32768)})
		}
		return c.SubResource(sub).Patch(ctx, obj, p, opts...)
	}, sj)
	key := client.ObjectKeyFromObject(sj)
	cur := getSafeJob(t, r.Client, key)
	status := *cur.Status.DeepCopy()
	status.Ledger.Seq = 1
	status.Ledger.Entries = []batchv1alpha1.LedgerEntry{{Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "sj-0-0"}}
	if _, err := r.commit(context.Background(), cur, status, status.Ledger.Entries); err == nil || errors.Is(err, errSuperseded) {
		t.Fatalf("commit = %v, want the refusal", err)
	}
	got := getSafeJob(t, r.Client, key)
	checkRefusalReported(t, r, rec, got)
	refuse = false
	if _, err := r.commit(context.Background(), got, status, status.Ledger.Entries); err != nil {
		t.Fatal(err)
	}
	got = getSafeJob(t, r.Client, key)
	if c := meta.FindStatusCondition(got.Status.Conditions, batchv1alpha1.ConditionStatusWriteFailure); c != nil {
		t.Errorf("StatusWriteFailure kept after a write was stored: %+v", c)
	}
	if got.Status.Ledger.Seq != 1 || got.Status.Ledger.Format != batchv1alpha1.LedgerFormat {
		t.Errorf("ledger seq %d format %d, want 1 and %d", got.Status.Ledger.Seq, got.Status.Ledger.Format, batchv1alpha1.LedgerFormat)
	}
}

// checkRefusalReported checks that a refused status write left the ledger
// as it was and was said once: the condition naming the refused field, a
// warning event, the metric.
func checkRefusalReported(t *testing.T, r *SafeJobReconciler, rec *events.FakeRecorder, got *batchv1alpha1.SafeJob) {
	t.Helper()
	c := meta.FindStatusCondition(got.Status.Conditions, batchv1alpha1.ConditionStatusWriteFailure)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != batchv1alpha1.ReasonStatusRefused ||
		!strings.Contains(c.Message, "status.conditions[0].message") {
		t.Errorf("StatusWriteFailure condition = %+v, want True, StatusRefused, naming the field", c)
	}
	if got.Status.Ledger.Seq != 0 {
		t.Errorf("the refused ledger was stored: seq %d", got.Status.Ledger.Seq)
	}
	if e := drain(rec); !strings.Contains(e, batchv1alpha1.ReasonStatusRefused) {
		t.Errorf("events %q, want a %s warning", e, batchv1alpha1.ReasonStatusRefused)
	}
	if n := testutil.ToFloat64(r.Metrics.LedgersRefused.WithLabelValues(refusedInvalid)); n != 1 {
		t.Errorf("refusals counted: %v, want 1", n)
	}
}

// TestNewerLedgerFormatLeftAlone: a SafeJob whose ledger a newer build
// wrote (format above LedgerFormat) gets nothing from this build but
// LedgerValid=False with reason LedgerFormatUnknown and an event: its
// ledger, format and pods stay as they are.
func TestNewerLedgerFormatLeftAlone(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns", UID: "u"}}
	sj.Status.Ledger = batchv1alpha1.Ledger{Format: batchv1alpha1.LedgerFormat + 1, Seq: 7}
	r, rec := lifecycleReconciler(t, nil, sj)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sj)}
	for range 2 { // the same twice: one condition write, one event
		if _, err := r.reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	got := getSafeJob(t, r.Client, req.NamespacedName)
	c := meta.FindStatusCondition(got.Status.Conditions, batchv1alpha1.ConditionLedgerValid)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != batchv1alpha1.ReasonLedgerFormatUnknown {
		t.Errorf("LedgerValid = %+v, want False, %s", c, batchv1alpha1.ReasonLedgerFormatUnknown)
	}
	if got.Status.Ledger.Format != batchv1alpha1.LedgerFormat+1 || got.Status.Ledger.Seq != 7 {
		t.Errorf("ledger changed: %+v", got.Status.Ledger)
	}
	if e := drain(rec); strings.Count(e, batchv1alpha1.ReasonLedgerFormatUnknown) != 1 {
		t.Errorf("events %q, want one %s", e, batchv1alpha1.ReasonLedgerFormatUnknown)
	}
}

// TestRolledBackLedgerStopsLaunches: once this process has seen a
// SafeJob's ledger at seq 5, a version at seq 3 (a restore, a hand edit)
// is refused (I4): LedgerValid=False, reason LedgerRolledBack, an event,
// and no decision is made on it. A later version at or past 5 is decided
// again.
func TestRolledBackLedgerStopsLaunches(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns", UID: "u"}}
	sj.Status.Ledger = batchv1alpha1.Ledger{Seq: 5, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 4}}
	if err := newTracker().sawLedger(sj); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	if err := tr.sawLedger(sj); err != nil {
		t.Fatalf("first sight refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		ledger batchv1alpha1.Ledger
		want   bool // refused
	}{
		{"seq lower", batchv1alpha1.Ledger{Seq: 3}, true},
		{"checkpoint lower", batchv1alpha1.Ledger{Seq: 5, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 2}}, true},
		{"same", sj.Status.Ledger, false},
		{"further", batchv1alpha1.Ledger{Seq: 9, Checkpoint: &batchv1alpha1.LedgerCheckpoint{Seq: 8}}, false},
		{"back to the old high", sj.Status.Ledger, true}, // 9 was seen since
	} {
		v := sj.DeepCopy()
		v.Status.Ledger = tc.ledger
		if err := tr.sawLedger(v); (err != nil) != tc.want {
			t.Errorf("%s: sawLedger = %v, want refused %v", tc.name, err, tc.want)
		}
	}
	// Through the reconcile: the rolled-back version gets the condition
	// alone, its ledger untouched.
	r, rec := lifecycleReconciler(t, nil, sj)
	r.tracker.with(client.ObjectKeyFromObject(sj), sj.UID, func(m *jobMemo) { m.high.saw(&batchv1alpha1.Ledger{Seq: 9}) })
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sj)}
	if _, err := r.reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := getSafeJob(t, r.Client, req.NamespacedName)
	c := meta.FindStatusCondition(got.Status.Conditions, batchv1alpha1.ConditionLedgerValid)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != batchv1alpha1.ReasonLedgerRolledBack ||
		!strings.Contains(c.Message, "seq is 5, and was 9") {
		t.Errorf("LedgerValid = %+v, want False, %s, naming the seqs", c, batchv1alpha1.ReasonLedgerRolledBack)
	}
	if got.Status.Ledger.Seq != 5 {
		t.Errorf("ledger changed: %+v", got.Status.Ledger)
	}
	if e := drain(rec); !strings.Contains(e, batchv1alpha1.ReasonLedgerRolledBack) {
		t.Errorf("events %q, want %s", e, batchv1alpha1.ReasonLedgerRolledBack)
	}
}

// TestCRDFormatMaximumIsThisBuilds: the CRD allows ledger formats up to
// LedgerFormat, so that a newer build's writes against this CRD are
// refused naming the field, not pruned. Raising LedgerFormat without
// regenerating the CRD fails here.
func TestCRDFormatMaximumIsThisBuilds(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/batch.safejob.dev_safejobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]struct {
								Properties map[string]struct {
									Maximum *float64 `json:"maximum"`
								} `json:"properties"`
							} `json:"properties"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) == 0 {
		t.Fatal("no versions in the CRD")
	}
	format := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["ledger"].Properties["format"]
	if format.Maximum == nil || *format.Maximum != batchv1alpha1.LedgerFormat {
		t.Errorf("status.ledger.format maximum %v, want %d (LedgerFormat)", format.Maximum, batchv1alpha1.LedgerFormat)
	}
}

// TestTruncateCopiedMessages: what the operator copies from others is cut
// at a rune boundary to what a condition takes.
func TestTruncateCopiedMessages(t *testing.T) {
	long := strings.Repeat("é", ledger.MaxConditionMessage) // 2 bytes a rune
	got := ledger.Truncate(long, 11)
	if got != "éééé..." {
		t.Errorf("Truncate = %q", got)
	}
	if ledger.Truncate("short", 11) != "short" {
		t.Error("a short message was cut")
	}
	var conds []metav1.Condition
	ledger.SetCondition(&conds, "X", metav1.ConditionTrue, "R", long, time.Unix(1, 0))
	if n := len(conds[0].Message); n > ledger.MaxConditionMessage {
		t.Errorf("condition message of %d bytes, over %d", n, ledger.MaxConditionMessage)
	}
	if m := refusalMessage(errors.New(strings.Repeat("x", 5000)), "p"); len(m) > maxCopiedMessage {
		t.Errorf("a refusal copied at %d bytes, over %d", len(m), maxCopiedMessage)
	}
}

// drain returns the events recorded so far, one a line.
func drain(rec *events.FakeRecorder) string {
	var b strings.Builder
	for {
		select {
		case e := <-rec.Events:
			b.WriteString(e + "\n")
		default:
			return b.String()
		}
	}
}

// TestDeletedParentQueuesItsRuns: a scheduled parent deleted while its runs
// wait for it to record them queues them, whether MultiKueue dispatched it
// or not: each then finds its parent gone and lets go of its finalizer.
func TestDeletedParentQueuesItsRuns(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	parent := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "p-uid"},
		Spec: batchv1alpha1.SafeJobSpec{Schedule: ptr.To("@every 1m")}}
	run := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "p-1", Namespace: "ns", UID: "r-uid",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, batchv1alpha1.GroupVersion.WithKind("SafeJob"))},
		Finalizers:      []string{batchv1alpha1.RunFinalizer}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(run).
		WithIndex(&batchv1alpha1.SafeJob{}, controllerUIDIndex, indexRunParent).Build()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	(&runHandler{cache: c}).Delete(context.Background(), event.TypedDeleteEvent[client.Object]{Object: parent}, q)
	queued := map[string]bool{}
	for q.Len() > 0 {
		req, _ := q.Get()
		queued[req.Name] = true
		q.Done(req)
	}
	if !queued["p-1"] {
		t.Errorf("queued %v, want the run p-1", queued)
	}
}

// TestOlderCRDReported: an API server whose CRD predates
// status.ledger.format prunes it from what the operator writes: the
// answer, decoded apart from what was sent, shows it gone, and the
// operator says so (an event, the metric).
func TestOlderCRDReported(t *testing.T) {
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "sj", Namespace: "ns", UID: "u"}}
	r, rec := lifecycleReconciler(t, func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch,
		opts ...client.SubResourcePatchOption) error {
		if err := c.SubResource(sub).Patch(ctx, obj, p, opts...); err != nil {
			return err
		}
		pruned := obj.(*batchv1alpha1.SafeJob)
		pruned.Status.Ledger.Format = 0 // as an older CRD's schema prunes it
		return c.SubResource(sub).Update(ctx, pruned)
	}, sj)
	cur := getSafeJob(t, r.Client, client.ObjectKeyFromObject(sj))
	status := *cur.Status.DeepCopy()
	status.Active = 1
	got, err := r.commit(context.Background(), cur, status, nil)
	if err != nil || got == nil {
		t.Fatalf("commit = %v, %v; want the stored answer", got, err)
	}
	if got.Status.Ledger.Format != 0 {
		t.Errorf("the answer shows format %d, which the API server dropped", got.Status.Ledger.Format)
	}
	if e := drain(rec); !strings.Contains(e, batchv1alpha1.ReasonCRDOutdated) {
		t.Errorf("events %q, want %s", e, batchv1alpha1.ReasonCRDOutdated)
	}
	if n := testutil.ToFloat64(r.Metrics.LedgersRefused.WithLabelValues(refusedCRDOutdated)); n != 1 {
		t.Errorf("crd_outdated counted %v, want 1", n)
	}
}

// TestHeldNamesForgotten: a predecessor's pod holds its name for the
// successor until it is deleted; its delete event forgets it (after the
// event noted it again), and a note whose pod the cache no longer holds is
// dropped when read, so the names of SafeJobs replaced again and again do
// not pile up.
func TestHeldNamesForgotten(t *testing.T) {
	successor := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "ns", UID: "new"}}
	old := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: "etl", Namespace: "ns", UID: "old"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etl-0-0", Namespace: "ns", UID: "p0",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(old, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}}}
	r, _ := lifecycleReconciler(t, nil, successor)
	h := &podHandler{tracker: r.tracker, cache: r.Client}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	key := client.ObjectKeyFromObject(successor)
	always := func(string, types.UID) bool { return true }
	h.Create(context.Background(), event.CreateEvent{Object: pod}, q)
	if got := r.tracker.heldNames(key, always); !got["etl-0-0"] {
		t.Fatalf("held %v, want etl-0-0 held for the successor", got)
	}
	h.Delete(context.Background(), event.DeleteEvent{Object: pod}, q)
	if got := r.tracker.heldNames(key, always); len(got) != 0 {
		t.Errorf("held %v after the pod's delete, want none", got)
	}
	r.tracker.sawHeld(key, "etl-1-0", "p1")
	if got := r.tracker.heldNames(key, func(string, types.UID) bool { return false }); len(got) != 0 {
		t.Errorf("held %v for a pod the cache does not hold", got)
	}
	if len(r.tracker.predecessorPods) != 0 {
		t.Errorf("tracker keeps %v", r.tracker.predecessorPods)
	}
}

// TestOutliveStretchesOnce: a context outlive made is not stretched again,
// so the drain bounds a release begun inside it.
func TestOutliveStretchesOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	work, stop := outlive(ctx, 50*time.Millisecond)
	defer stop()
	inner, stopInner := outlive(work, time.Hour)
	defer stopInner()
	cancel()
	select {
	case <-inner.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a release inside the drain outlived it")
	}
}
