package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

// TestBadInputRefused checks that the API server itself refuses bad SafeJobs
// with a message that names the field.
func TestBadInputRefused(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cases := map[string]struct {
		sj       *batchv1alpha1.SafeJob
		wantMsgs []string
	}{
		"negative parallelism": {
			sj:       testutil.MakeSafeJob("neg", ns).Parallelism(-1).Obj(),
			wantMsgs: []string{"spec.parallelism"},
		},
		"Indexed without completions": {
			sj:       testutil.MakeSafeJob("nocomp", ns).Indexed().WorkQueue().Obj(),
			wantMsgs: []string{"spec.completions", "must be set when completionMode is Indexed"},
		},
		"restartPolicy Always": {
			sj:       testutil.MakeSafeJob("always", ns).RestartPolicy(corev1.RestartPolicyAlways).Obj(),
			wantMsgs: []string{"spec.template.spec.restartPolicy", `valid values: "OnFailure", "Never"`},
		},
		"unknown completionMode": {
			sj: func() *batchv1alpha1.SafeJob {
				sj := testutil.MakeSafeJob("mode", ns).Obj()
				sj.Spec.CompletionMode = "Sometimes"
				return sj
			}(),
			wantMsgs: []string{"spec.completionMode", "Sometimes"},
		},
		"backoffLimitPerIndex without Indexed": {
			sj:       testutil.MakeSafeJob("perindex", ns).BackoffLimitPerIndex(1).Obj(),
			wantMsgs: []string{"spec.backoffLimitPerIndex", "requires indexed completion mode"},
		},
		"schedule with six fields": {
			sj:       testutil.MakeSafeJob("six", ns).Schedule("* * * * * *").Obj(),
			wantMsgs: []string{"spec.schedule"},
		},
		"unknown macro": {
			sj:       testutil.MakeSafeJob("macro", ns).Schedule("@fortnightly").Obj(),
			wantMsgs: []string{"spec.schedule"},
		},
		"unknown time zone": {
			sj:       testutil.MakeSafeJob("tz", ns).Schedule("@hourly").TimeZone("Mars/Olympus_Mons").Obj(),
			wantMsgs: []string{"spec.timeZone", "IANA time zone"},
		},
		"concurrencyPolicy without schedule": {
			sj:       testutil.MakeSafeJob("policy", ns).ConcurrencyPolicy(batchv1alpha1.ForbidConcurrent).Obj(),
			wantMsgs: []string{"require schedule"},
		},
		"unknown concurrencyPolicy": {
			sj:       testutil.MakeSafeJob("policy2", ns).Schedule("@hourly").ConcurrencyPolicy("Sometimes").Obj(),
			wantMsgs: []string{"spec.concurrencyPolicy", "Sometimes"},
		},
		"parallelism above the largest": {
			sj:       testutil.MakeSafeJob("par-over", ns).Parallelism(maxParallelism + 1).Obj(),
			wantMsgs: []string{"spec.parallelism", "2000"},
		},
		"completions above the largest": {
			sj:       testutil.MakeSafeJob("comp-over", ns).Indexed().Completions(maxCompletions + 1).Obj(),
			wantMsgs: []string{"spec.completions"},
		},
		"per-index limit above 20000 completions without a cap on failed indexes": {
			sj:       testutil.MakeSafeJob("per-index-over", ns).Indexed().Completions(perIndexCompletions + 1).BackoffLimitPerIndex(3).Obj(),
			wantMsgs: []string{"spec.maxFailedIndexes", "20000"},
		},
		"per-index limit with too high a cap on failed indexes": {
			sj: testutil.MakeSafeJob("per-index-cap-over", ns).Indexed().Completions(maxCompletions).BackoffLimitPerIndex(3).
				MaxFailedIndexes(maxFailedIndexesLarge + 1).Obj(),
			wantMsgs: []string{"spec.maxFailedIndexes", "1000"},
		},
		"successPolicy without Indexed": {
			sj: testutil.MakeSafeJob("success-nonindexed", ns).Completions(3).SuccessPolicy(
				batchv1alpha1.SuccessPolicyRule{SucceededCount: ptr.To[int32](1)}).Obj(),
			wantMsgs: []string{"spec.successPolicy", "requires indexed completion mode"},
		},
		"successPolicy rule without indexes or count": {
			sj:       testutil.MakeSafeJob("success-empty", ns).Indexed().Completions(3).SuccessPolicy(batchv1alpha1.SuccessPolicyRule{}).Obj(),
			wantMsgs: []string{"spec.successPolicy.rules[0]", "at least one of succeededCount or succeededIndexes"},
		},
		"successPolicy count above completions": {
			sj: testutil.MakeSafeJob("success-count", ns).Indexed().Completions(3).SuccessPolicy(
				batchv1alpha1.SuccessPolicyRule{SucceededCount: ptr.To[int32](4)}).Obj(),
			wantMsgs: []string{"spec.successPolicy.rules", "less than or equal to the number of specified completions"},
		},
		"successPolicy indexes not intervals": {
			sj: testutil.MakeSafeJob("success-format", ns).Indexed().Completions(3).SuccessPolicy(
				batchv1alpha1.SuccessPolicyRule{SucceededIndexes: ptr.To("0;2")}).Obj(),
			wantMsgs: []string{"spec.successPolicy.rules[0].succeededIndexes"},
		},
		"managedBy not a domain-prefixed path": {
			sj:       testutil.MakeSafeJob("managed", ns).ManagedBy("other-controller").Obj(),
			wantMsgs: []string{"spec.managedBy"},
		},
		"managedBy too long": {
			sj:       testutil.MakeSafeJob("managed-long", ns).ManagedBy("example.com/" + strings.Repeat("x", 52)).Obj(),
			wantMsgs: []string{"spec.managedBy", "63"},
		},
		"negative history limit": {
			sj:       testutil.MakeSafeJob("history", ns).Schedule("@hourly").HistoryLimits(-1, 1).Obj(),
			wantMsgs: []string{"spec.successfulRunsHistoryLimit"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := k8s.Create(context.Background(), tc.sj)
			if err == nil {
				t.Fatal("created; want the API server to refuse it")
			}
			for _, want := range tc.wantMsgs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestImmutableFields checks that fields fixed at creation cannot change.
func TestImmutableFields(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	neither := func(sj *batchv1alpha1.SafeJob) { sj.Spec.Completions, sj.Spec.Parallelism = nil, nil }
	cases := map[string]struct {
		create  func(*batchv1alpha1.SafeJob) // before the create
		mutate  func(*batchv1alpha1.SafeJob)
		wantMsg string
	}{
		"parallelism above 1 without completions and parallelism at creation": {create: neither,
			mutate:  func(sj *batchv1alpha1.SafeJob) { sj.Spec.Parallelism = ptr.To[int32](2) },
			wantMsg: "spec.parallelism: a SafeJob created without completions and parallelism has one completion"},
		"completions of an Indexed SafeJob whose parallelism differs": {
			create: func(sj *batchv1alpha1.SafeJob) {
				sj.Spec.CompletionMode, sj.Spec.Completions = batchv1alpha1.IndexedCompletion, ptr.To[int32](4)
			},
			mutate: func(sj *batchv1alpha1.SafeJob) {
				sj.Spec.Completions, sj.Spec.Parallelism = ptr.To[int32](3), ptr.To[int32](3)
			},
			wantMsg: "completions is immutable, except for an Indexed SafeJob"},
		"completions of an elastic Indexed SafeJob without parallelism": {
			create: func(sj *batchv1alpha1.SafeJob) {
				sj.Spec.CompletionMode, sj.Spec.Completions, sj.Spec.Parallelism = batchv1alpha1.IndexedCompletion, ptr.To[int32](4), ptr.To[int32](4)
			},
			mutate:  func(sj *batchv1alpha1.SafeJob) { sj.Spec.Completions = ptr.To[int32](3) },
			wantMsg: "completions is immutable, except for an Indexed SafeJob"},
		"completions":    {mutate: func(sj *batchv1alpha1.SafeJob) { sj.Spec.Completions = ptr.To[int32](9) }, wantMsg: "completions is immutable"},
		"completionMode": {mutate: func(sj *batchv1alpha1.SafeJob) { sj.Spec.CompletionMode = batchv1alpha1.IndexedCompletion }, wantMsg: "completionMode is immutable"},
		"template": {mutate: func(sj *batchv1alpha1.SafeJob) { sj.Spec.Template.Spec.Containers[0].Image = "other" },
			wantMsg: "template is immutable"},
		"scheduleAdded": {mutate: func(sj *batchv1alpha1.SafeJob) { sj.Spec.Schedule = ptr.To("@hourly") },
			wantMsg: "schedule cannot be added"},
		"managedBy": {mutate: func(sj *batchv1alpha1.SafeJob) { sj.Spec.ManagedBy = ptr.To("example.com/other") },
			wantMsg: "managedBy is immutable"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sj := testutil.MakeSafeJob("immutable-"+strings.ToLower(strings.ReplaceAll(name, " ", "-")), ns).Suspend(true).Obj()
			if tc.create != nil {
				tc.create(sj)
			}
			if err := k8s.Create(context.Background(), sj); err != nil {
				t.Fatal(err)
			}
			tc.mutate(sj)
			waitRefused(t, sj)
			err := k8s.Update(context.Background(), sj)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("update error %v, want one saying %q", err, tc.wantMsg)
			}
		})
	}
	t.Run("mutable", func(t *testing.T) { checkMutable(t, ns, neither) })
}

// What stays mutable is accepted with the policy in force: parallelism,
// a scheduled parent's template (it applies to later runs), and status.
func checkMutable(t *testing.T, ns string, neither func(*batchv1alpha1.SafeJob)) {
	sj := testutil.MakeSafeJob("mutable", ns).Suspend(true).Obj()
	parent := testutil.MakeSafeJob("mutable-parent", ns).Schedule("@hourly").Suspend(true).Obj()
	for _, obj := range []*batchv1alpha1.SafeJob{sj, parent} {
		if err := k8s.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	probe := sj.DeepCopy()
	probe.Spec.Completions = ptr.To[int32](9)
	waitRefused(t, probe)
	sj.Spec.Parallelism = ptr.To[int32](3)
	if err := k8s.Update(context.Background(), sj); err != nil {
		t.Errorf("changing parallelism: %v", err)
	}
	sj.Status.Completions = "0/1"
	if err := k8s.Status().Update(context.Background(), sj); err != nil {
		t.Errorf("writing status: %v", err)
	}
	parent.Spec.Template.Spec.Containers[0].Image = "other"
	parent.Spec.Completions = ptr.To[int32](4)
	if err := k8s.Update(context.Background(), parent); err != nil {
		t.Errorf("changing a scheduled SafeJob's template and completions: %v", err)
	}
	// Elastic Indexed: completions and parallelism equal before and
	// after, they change together, down and up.
	elastic := testutil.MakeSafeJob("mutable-elastic", ns).Indexed().Completions(4).Parallelism(4).Suspend(true).Obj()
	if err := k8s.Create(context.Background(), elastic); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int32{2, 5} {
		elastic.Spec.Completions, elastic.Spec.Parallelism = ptr.To(n), ptr.To(n)
		if err := k8s.Update(context.Background(), elastic); err != nil {
			t.Errorf("scaling an elastic Indexed SafeJob to %d: %v", n, err)
		}
	}
	// Created with neither completions nor parallelism (one completion):
	// parallelism 0 pauses it and 1 resumes it, as for a batch/v1 Job.
	one := testutil.MakeSafeJob("mutable-one", ns).Suspend(true).Obj()
	neither(one)
	if err := k8s.Create(context.Background(), one); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{0, 1} {
		one.Spec.Parallelism = ptr.To(p)
		if err := k8s.Update(context.Background(), one); err != nil {
			t.Errorf("setting parallelism %d of a SafeJob created with neither: %v", p, err)
		}
	}
}

// waitRefused waits until an update to sj is refused, in dry runs: the API
// server loads the immutable-spec policy asynchronously.
func waitRefused(t *testing.T, sj *batchv1alpha1.SafeJob) {
	t.Helper()
	waitFor(t, 30*time.Second, "the immutable-spec policy to be in force", func() (bool, error) {
		return k8s.Update(context.Background(), sj.DeepCopy(), client.DryRunAll) != nil, nil
	})
}

// TestMalformedLedger writes a ledger by hand that breaks its rules: the
// controller keeps running, acts on nothing for that SafeJob and says why.
func TestMalformedLedger(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, false)
	startManager(t, h.ns, managerOptions{})
	sj := testutil.MakeSafeJob("malformed", h.ns).Suspend(true).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sj)
	waitFor(t, 30*time.Second, "the SafeJob to be suspended", func() (bool, error) {
		err := k8s.Get(context.Background(), key, sj)
		return err == nil && conditionTrue(sj, batchv1alpha1.ConditionSuspended), err
	})
	// Written by hand over whatever the operator wrote last.
	if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := k8s.Get(context.Background(), key, sj); err != nil {
			return err
		}
		sj.Status.Ledger = batchv1alpha1.Ledger{Seq: 1, Entries: []batchv1alpha1.LedgerEntry{{
			Seq: 1, Type: batchv1alpha1.EntrySucceeded, Pod: "malformed-0-0", Time: metav1.Now(),
		}}}
		return k8s.Status().Update(context.Background(), sj)
	}); err != nil {
		t.Fatal(err)
	}
	setSuspend(t, key, false)
	waitFor(t, 30*time.Second, "a LedgerValid=False condition", func() (bool, error) {
		err := k8s.Get(context.Background(), key, sj)
		c := condition(sj, batchv1alpha1.ConditionLedgerValid)
		return err == nil && c != nil && c.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, "not open"), err
	})
	// The controller is alive: another SafeJob runs to completion, and the
	// malformed one got no pod.
	other := testutil.MakeSafeJob("healthy", h.ns).Obj()
	if err := k8s.Create(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if got := waitFinished(t, client.ObjectKeyFromObject(other), time.Minute); !conditionTrue(got, batchv1alpha1.ConditionComplete) {
		t.Fatalf("healthy SafeJob did not complete: %+v", got.Status.Conditions)
	}
	creates, err := testutil.PodCreates(auditLog, h.ns)
	if err != nil {
		t.Fatal(err)
	}
	for name := range creates {
		if strings.HasPrefix(name, "malformed-") {
			t.Errorf("pod %s created for a SafeJob with a malformed ledger", name)
		}
	}
	waitForEvent(t, h.ns, "malformed", batchv1alpha1.ReasonLedgerCorrupt)
}

// TestLedgerCountBounds edits a ledger by hand with a packed launch's count
// at and past its bounds: the API server takes the largest (100,000) and
// refuses what lies outside, naming the field.
func TestLedgerCountBounds(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	sj := testutil.MakeSafeJob("count", ns).Suspend(true).Indexed().Completions(maxCompletions).Obj()
	if err := k8s.Create(context.Background(), sj); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		count   int32
		wantErr string
	}{
		{count: 100001, wantErr: "should be less than or equal to 100000"},
		{count: -1, wantErr: "should be greater than or equal to 1"},
		{count: 100000},
	} {
		edited := sj.DeepCopy()
		edited.Status.Ledger = batchv1alpha1.Ledger{Seq: 100000, Entries: []batchv1alpha1.LedgerEntry{{
			Seq: 1, Type: batchv1alpha1.EntryLaunched, Pod: "count-0-0", Count: tc.count, Time: metav1.Now(),
		}}}
		err := k8s.Status().Update(context.Background(), edited)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("count %d refused: %v", tc.count, err)
		case tc.wantErr != "" && err == nil:
			t.Errorf("count %d accepted; want the API server to refuse it", tc.count)
		case tc.wantErr != "" && !strings.Contains(err.Error(), "status.ledger.entries[0].count") ||
			tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("count %d: error %q does not name status.ledger.entries[0].count and %q", tc.count, err, tc.wantErr)
		}
	}
}

// TestSamplesValid sends every manifest of config/samples to the API server
// as a dry run: the samples users start from are always accepted.
func TestSamplesValid(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "batch_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sj := &batchv1alpha1.SafeJob{}
		if err := yaml.UnmarshalStrict(raw, sj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sj.Namespace = ns
		if err := k8s.Create(context.Background(), sj, client.DryRunAll); err != nil {
			t.Errorf("%s refused: %v", f, err)
		}
	}
}

// TestKueueSamplesValid creates the Kueue samples (queues, priorities and
// queued SafeJobs) as a dry run.
func TestKueueSamplesValid(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"queues.yaml", "safejobs.yaml"} {
		path := filepath.Join("..", "..", "config", "samples", "kueue", f)
		if err := testutil.CreateManifests(context.Background(), client.NewDryRunClient(k8s), path); err != nil {
			t.Errorf("%s refused: %v", f, err)
		}
	}
}

// TestUnknownJobFieldsRefused: batch/v1 Job fields a SafeJob does not have
// (selector, manualSelector) are refused as unknown fields under strict
// field validation, kubectl's default, never taken in silence; and
// podReplacementPolicy takes only Failed, what SafeJob always does.
func TestUnknownJobFieldsRefused(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	cases := map[string]struct {
		spec    map[string]any
		wantMsg []string
	}{
		"selector":       {spec: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}}, wantMsg: []string{"unknown field", "spec.selector"}},
		"manualSelector": {spec: map[string]any{"manualSelector": true}, wantMsg: []string{"unknown field", "spec.manualSelector"}},
		"podReplacementPolicy TerminatingOrFailed": {spec: map[string]any{"podReplacementPolicy": "TerminatingOrFailed"},
			wantMsg: []string{"spec.podReplacementPolicy", `supported values: "Failed"`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": batchv1alpha1.GroupVersion.String(), "kind": "SafeJob",
				"metadata": map[string]any{"name": strings.ToLower(strings.Fields(name)[0]), "namespace": ns},
				"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never",
					"containers": []any{map[string]any{"name": "main", "image": "busybox"}}}}},
			}}
			for k, v := range tc.spec {
				sj.Object["spec"].(map[string]any)[k] = v
			}
			err := k8s.Create(context.Background(), sj, client.FieldValidation(metav1.FieldValidationStrict))
			if err == nil {
				t.Fatal("created; want the API server to refuse it")
			}
			for _, want := range tc.wantMsg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
	ok := testutil.MakeSafeJob("replace-failed", ns).Obj()
	ok.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
	if err := k8s.Create(context.Background(), ok, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Errorf("podReplacementPolicy Failed refused: %v", err)
	}
}
