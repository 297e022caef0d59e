// Command writecost measures what one status write costs the API server:
// a batch/v1 Job's, and a SafeJob's with ledgers of growing length. It starts
// a bare kube-apiserver and etcd (envtest, KUBEBUILDER_ASSETS), installs the
// SafeJob CRD, and for each object makes the same status write (the ready
// count flipping) many times over, reading the CPU time of kube-apiserver and
// etcd from /proc before and after. -variants repeats it with parts of the
// CRD's validation taken out (its CEL rules, the pod template's schema), each
// on a fresh API server, to tell what each part costs.
//
//	make bench-writes    # or, with KUBEBUILDER_ASSETS set: go run ./hack/writecost -h
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	podrelease "github.com/safejob/safejob/internal/release"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

func main() {
	writes := flag.Int("writes", 400, "status writes measured per object and round")
	rounds := flag.Int("rounds", 3, "rounds, each measuring every object in turn (the median is printed, and the range)")
	sizes := flag.String("entries", "0,2,10,20,40,80,200", "ledger lengths to measure, comma-separated")
	crdDir := flag.String("crd-dir", "config/crd/bases", "directory of the SafeJob CRD")
	profile := flag.String("profile", "",
		"write a CPU profile of kube-apiserver, taken while the last length is measured in the last round, to this file")
	variants := flag.String("variants", variantAsIs, "the CRD's variants to measure, comma-separated, each on its own API server: "+
		strings.Join(variantNames, ", ")+" (what its validation costs a status write)")
	releases := flag.Int("releases", 0, "also measure this many pod finalizer releases of each kind in each round: "+
		"the JSON patch that tests the finalizer's index, and the strategic merge patch that deletes it by value")
	creates := flag.Int("creates", 0, "also measure this many creates of a Job and of a SafeJob in each round, "+
		"one-pod jobs as the benchmark's W1 creates them (deleted again, not measured)")
	untracked := flag.Bool("untracked", false, "also measure a twin of each object whose managedFields were stripped "+
		"(the API server then tracks no fields on its updates): what field tracking costs a status write")
	patch := flag.Bool("patch", false, "also measure a SafeJob of each length whose status writes are JSON merge patches "+
		"of the change with its resourceVersion, as the operator writes them, beside the updates")
	flag.Parse()
	logf.SetLogger(logr.Discard()) // envtest's own messages
	c := config{writes: *writes, rounds: *rounds, profile: *profile, untracked: *untracked, patch: *patch, releases: *releases,
		creates: *creates}
	if err := run(c, *sizes, *crdDir, *variants); err != nil {
		fmt.Fprintf(os.Stderr, "writecost: %v\n", err)
		os.Exit(1)
	}
}

// The CRD's variants: as installed, and with parts of its validation taken
// out, to tell what each part costs a status write. Only the first is a CRD
// to run SafeJob with.
const (
	variantAsIs       = "as-is"
	variantNoRules    = "no-cel-rules"
	variantNoTemplate = "no-template-schema"
	variantBare       = "neither"
)

var variantNames = []string{variantAsIs, variantNoRules, variantNoTemplate, variantBare}

// config is what every variant measures, and how.
type config struct {
	writes, rounds int
	lengths        []int
	profile        string
	untracked      bool
	// patch adds, for each length, a SafeJob written by merge patches.
	patch bool
	// releases is how many pod finalizer releases of each kind each round
	// measures (none: no pods).
	releases int
	// creates is how many creates of each kind of job each round measures.
	creates int
}

func run(c config, sizes, crdDir, variants string) error {
	var err error
	if c.lengths, err = parseLengths(sizes); err != nil {
		return err
	}
	if c.writes < 1 || c.rounds < 1 || c.releases < 0 || c.creates < 0 {
		return fmt.Errorf("-writes %d and -rounds %d must be at least 1, -releases %d and -creates %d at least 0",
			c.writes, c.rounds, c.releases, c.creates)
	}
	crd, err := loadCRD(crdDir)
	if err != nil {
		return err
	}
	fmt.Printf("%-20s %-32s %10s %22s %10s %8s\n", "CRD", "object", "JSON bytes", "apiserver ms (range)", "etcd ms", "÷ Job")
	names := strings.Split(variants, ",")
	for _, v := range names {
		v = strings.TrimSpace(v)
		modified, err := variant(crd, v)
		if err != nil {
			return err
		}
		vc := c
		if c.profile != "" && len(names) > 1 {
			vc.profile = c.profile + "." + v // one profile per variant
		}
		if err := runVariant(v, modified, vc); err != nil {
			return fmt.Errorf("CRD %s: %w", v, err)
		}
	}
	return nil
}

// runVariant starts an API server with the CRD and measures a Job's status
// write and a SafeJob's at each ledger length, in rounds that take each
// object in turn, so that what else the machine does falls on all of them;
// it prints the median of the rounds.
func runVariant(name string, crd *apiextensionsv1.CustomResourceDefinition, vc config) error {
	env, cfg, err := testutil.StartControlPlane(func() *envtest.Environment {
		return &envtest.Environment{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}}
	})
	if err != nil {
		return fmt.Errorf("starting a control plane for %s: %w", name, err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = -1, 0
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	objects, err := createObjects(ctx, c, vc.lengths, vc.untracked, vc.patch)
	if err != nil {
		return err
	}
	releases, creations := releaseKinds(), creationKinds()
	if vc.releases == 0 {
		releases = nil
	}
	if vc.creates == 0 {
		creations = nil
	}
	if err := measureRounds(ctx, cfg, c, vc, objects, releases, creations); err != nil {
		return err
	}
	jobMs := median(objects[0].api)
	for _, o := range objects {
		raw, err := json.Marshal(o.obj)
		if err != nil {
			return fmt.Errorf("%s: encoding: %w", o.label, err)
		}
		printRow(name, o.label, len(raw), o.api, o.etcd, jobMs)
	}
	for _, rk := range releases {
		printRow(name, rk.label, rk.bytes, rk.api, rk.etcd, jobMs)
	}
	for _, ck := range creations {
		printRow(name, ck.label, ck.bytes, ck.api, ck.etcd, jobMs)
	}
	return nil
}

// measureRounds measures every release kind, creation kind and object in
// turn, vc.rounds times; the last round's last object is profiled if vc
// asks for it.
func measureRounds(ctx context.Context, cfg *rest.Config, c client.Client, vc config, objects []measured, releases []release,
	creations []creation) error {
	ps, err := findPIDs()
	if err != nil {
		return err
	}
	for r := range vc.rounds {
		for k := range releases {
			if err := releases[k].measure(ctx, c, ps, vc.releases, r); err != nil {
				return err
			}
		}
		for k := range creations {
			if err := creations[k].measure(ctx, c, ps, vc.creates, r); err != nil {
				return err
			}
		}
		for k := range objects {
			if vc.profile != "" && r == vc.rounds-1 && k == len(objects)-1 {
				done, err := startProfile(ctx, cfg, vc.profile)
				if err != nil {
					return err
				}
				defer func() { <-done }()
			}
			if err := objects[k].measure(ctx, c, ps, vc.writes); err != nil {
				return err
			}
		}
	}
	return nil
}

// printRow prints one measured object's median CPU per write, its range,
// and its ratio to the Job's status write.
func printRow(variant, label string, bytes int, api, etcd []float64, jobMs float64) {
	m := median(api)
	fmt.Printf("%-20s %-32s %10d %8.2f (%.2f-%.2f) %10.2f %8.2f\n", variant, label, bytes, m,
		slices.Min(api), slices.Max(api), median(etcd), m/jobMs)
}

// release is a way to remove the ledger finalizer of a pod, and what it
// cost in each round: kube-apiserver's and etcd's CPU ms per release.
type release struct {
	name, label string
	patch       func(pod *corev1.Pod) client.Patch
	bytes       int // the pod's JSON size
	samples
}

// releaseKinds are the two patches that can remove the ledger finalizer
// without clobbering another's edit of the list: a JSON patch that tests
// the entry at its index before removing it, and the strategic merge patch
// the operator sends, which deletes the value wherever it is (as the Job
// controller does) from the pod of its UID.
func releaseKinds() []release {
	return []release{
		{name: "json", label: "pod release, JSON patch", patch: func(pod *corev1.Pod) client.Patch {
			k := slices.Index(pod.Finalizers, batchv1alpha1.LedgerFinalizer)
			return client.RawPatch(types.JSONPatchType, fmt.Appendf(nil,
				`[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`,
				k, batchv1alpha1.LedgerFinalizer, k))
		}},
		{name: "smp", label: "pod release, merge patch", patch: func(pod *corev1.Pod) client.Patch {
			return client.RawPatch(types.StrategicMergePatchType, podrelease.PodPatch(pod.UID))
		}},
	}
}

// measure creates n finished pods that hold the ledger finalizer (not
// measured), releases each (measured) and deletes them again.
func (rk *release) measure(ctx context.Context, c client.Client, pids pids, n, round int) error {
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod, err := finishedPod(ctx, c, fmt.Sprintf("%s-%d-%d", rk.name, round, i), rk.label)
		if err != nil {
			return err
		}
		pods = append(pods, pod)
	}
	if raw, err := json.Marshal(pods[0]); err == nil {
		rk.bytes = len(raw)
	}
	err := rk.sample(pids, n, func() error {
		for _, pod := range pods {
			if err := c.Patch(ctx, pod, rk.patch(pod)); err != nil {
				return fmt.Errorf("%s of %s: %w", rk.label, pod.Name, err)
			}
			if slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) || !slices.Contains(pod.Finalizers, otherFinalizer) {
				return fmt.Errorf("%s of %s left finalizers %v", rk.label, pod.Name, pod.Finalizers)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	done := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	for _, pod := range pods {
		if err := c.Patch(ctx, pod, done); err != nil {
			return fmt.Errorf("releasing %s: %w", pod.Name, err)
		}
		if err := c.Delete(ctx, pod); err != nil {
			return fmt.Errorf("deleting %s: %w", pod.Name, err)
		}
	}
	return nil
}

// creation is a kind of job whose creates are measured, as the benchmark's
// W1 creates them (one pod, the same template), and what they cost in each
// round: kube-apiserver's and etcd's CPU ms per create.
type creation struct {
	name, label string
	object      func(name string) client.Object
	bytes       int
	samples
}

// creationKinds are a Job and a SafeJob of one pod.
func creationKinds() []creation {
	return []creation{
		{name: "job", label: "Job create, one pod", object: func(name string) client.Object {
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
				Spec: batchv1.JobSpec{Template: template(), Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)}}
		}},
		{name: "sj", label: "SafeJob create, one pod", object: func(name string) client.Object {
			return &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
				Spec: batchv1alpha1.SafeJobSpec{Template: template(), Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)}}
		}},
	}
}

// measure creates n jobs of the kind (measured) and deletes them again.
// No controller runs: nothing else writes them meanwhile.
func (ck *creation) measure(ctx context.Context, c client.Client, pids pids, n, round int) error {
	objs := make([]client.Object, n)
	for i := range objs {
		objs[i] = ck.object(fmt.Sprintf("create-%s-%d-%d", ck.name, round, i))
	}
	if raw, err := json.Marshal(objs[0]); err == nil {
		ck.bytes = len(raw)
	}
	err := ck.sample(pids, n, func() error {
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("%s %s: %w", ck.label, o.GetName(), err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, o := range objs {
		// In the background: no garbage collector runs here to take an
		// orphaning finalizer off a Job.
		if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return fmt.Errorf("deleting %s: %w", o.GetName(), err)
		}
	}
	return nil
}

// otherFinalizer is a finalizer of someone else's, listed before the
// ledger's, that every release must leave in place.
const otherFinalizer = "example.com/keep"

// finishedPod creates a pod like one the operator creates for a W3 SafeJob,
// holding the ledger finalizer, and gives it the status of a pod that
// succeeded.
func finishedPod(ctx context.Context, c client.Client, name, label string) (*corev1.Pod, error) {
	tpl := template()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + name, Namespace: metav1.NamespaceDefault,
		Labels:      map[string]string{batchv1alpha1.SafeJobNameLabel: "sj", batchv1alpha1.CompletionIndexLabel: "3"},
		Annotations: tpl.Annotations, Finalizers: []string{otherFinalizer, batchv1alpha1.LedgerFinalizer},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: batchv1alpha1.GroupVersion.String(), Kind: "SafeJob", Name: "sj",
			UID: "0e7d4c1a-5f2b-4b8e-9d3c-2a1f6e8b7c90", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: tpl.Spec}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("%s: creating pod: %w", label, err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, StartTime: &now, HostIP: "10.0.0.1", PodIP: "10.0.0.2",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted",
			LastTransitionTime: now}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Image: "busybox", ImageID: "docker://busybox", Ready: false,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: now, FinishedAt: now}}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		return nil, fmt.Errorf("%s: writing pod status: %w", label, err)
	}
	return pod, nil
}

// createObjects creates the Job and a SafeJob of each ledger length whose
// status writes are measured; untracked adds a twin of each whose
// managedFields were stripped.
func createObjects(ctx context.Context, c client.Client, lengths []int, untracked, patch bool) ([]measured, error) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default"}, Spec: batchv1.JobSpec{
		Template: template(), Completions: ptr.To[int32](20), Parallelism: ptr.To[int32](5), Suspend: ptr.To(true),
		CompletionMode: ptr.To(batchv1.IndexedCompletion)}}
	if err := c.Create(ctx, job); err != nil {
		return nil, fmt.Errorf("creating Job: %w", err)
	}
	job.Status = batchv1.JobStatus{StartTime: &now, Active: 5, Succeeded: 10, CompletedIndexes: "0-9"}
	objects := []measured{{label: "Job", obj: job, change: func(i int) { job.Status.Ready = ptr.To(int32(i % 2)) }}}
	for _, n := range lengths {
		sj := safeJob(n, now)
		status := sj.Status
		if err := c.Create(ctx, sj); err != nil {
			return nil, fmt.Errorf("creating SafeJob: %w", err)
		}
		sj.Status = status
		objects = append(objects, measured{label: fmt.Sprintf("SafeJob, %d entries", n), obj: sj,
			change: func(i int) { sj.Status.Ready = int32(i % 2) }})
		if !patch {
			continue
		}
		pj := safeJob(n, now)
		pstatus := pj.Status
		if err := c.Create(ctx, pj); err != nil {
			return nil, fmt.Errorf("creating SafeJob: %w", err)
		}
		pj.Status = pstatus
		// A patch carries only the change: the status it changes is stored first.
		if err := c.Status().Update(ctx, pj); err != nil {
			return nil, fmt.Errorf("writing the status of SafeJob %s: %w", pj.Name, err)
		}
		objects = append(objects, measured{label: fmt.Sprintf("SafeJob, %d entries, patch", n), obj: pj, patch: true,
			change: func(i int) { pj.Status.Ready = int32(i % 2) }})
	}
	if !untracked {
		return objects, nil
	}
	for _, o := range slices.Clone(objects) {
		twin, err := untrackedTwin(ctx, c, o)
		if err != nil {
			return nil, err
		}
		objects = append(objects, twin)
	}
	return objects, nil
}

// untrackedTwin creates a copy of a measured object and strips its
// managedFields (an update that sets them to one empty entry): the API
// server tracks no fields on later updates of an object that has none, so
// the twin's writes cost what field tracking leaves out.
func untrackedTwin(ctx context.Context, c client.Client, o measured) (measured, error) {
	obj := o.obj.DeepCopyObject().(client.Object)
	obj.SetName(obj.GetName() + "-untracked")
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetManagedFields(nil)
	switch t := obj.(type) { // created without status, as every object is
	case *batchv1.Job:
		t.Status = batchv1.JobStatus{}
		t.Spec.Selector, t.Spec.Template.Labels = nil, nil // the API server's, for the original
	case *batchv1alpha1.SafeJob:
		t.Status = batchv1alpha1.SafeJobStatus{}
	}
	if err := c.Create(ctx, obj); err != nil {
		return measured{}, fmt.Errorf("creating the untracked twin of %s: %w", o.label, err)
	}
	strip := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`))
	if err := c.Patch(ctx, obj, strip); err != nil {
		return measured{}, fmt.Errorf("stripping managedFields of %s: %w", o.label, err)
	}
	twin := measured{label: o.label + ", untracked", obj: obj}
	switch t := obj.(type) {
	case *batchv1.Job:
		t.Status = *o.obj.(*batchv1.Job).Status.DeepCopy()
		twin.change = func(i int) { t.Status.Ready = ptr.To(int32(i % 2)) }
	case *batchv1alpha1.SafeJob:
		t.Status = *o.obj.(*batchv1alpha1.SafeJob).Status.DeepCopy()
		twin.change = func(i int) { t.Status.Ready = int32(i % 2) }
	}
	return twin, nil
}

// measured is an object whose status writes are measured, and what they
// cost in each round: kube-apiserver's and etcd's CPU ms per write.
type measured struct {
	label  string
	obj    client.Object
	change func(int)
	// patch writes the status as the operator does: a JSON merge patch of
	// the change, with the resourceVersion (else: an update).
	patch bool
	samples
}

// measure makes writes status writes of the object (after a few to warm
// up) and records the CPU they cost kube-apiserver and etcd, per write.
func (m *measured) measure(ctx context.Context, c client.Client, pids pids, writes int) error {
	write := func(i int) error {
		before := m.obj.DeepCopyObject().(client.Object)
		m.change(i)
		m.obj.SetManagedFields(nil) // as the operator writes: its cache keeps none
		var err error
		if m.patch {
			before.SetManagedFields(nil)
			err = c.Status().Patch(ctx, m.obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		} else {
			err = c.Status().Update(ctx, m.obj)
		}
		if err != nil {
			return fmt.Errorf("%s: status write: %w", m.label, err)
		}
		if strings.HasSuffix(m.label, "untracked") && len(m.obj.GetManagedFields()) > 0 {
			return fmt.Errorf("%s: the API server tracked fields again (%d entries)", m.label, len(m.obj.GetManagedFields()))
		}
		return nil
	}
	for i := range 20 {
		if err := write(i); err != nil {
			return err
		}
	}
	return m.sample(pids, writes, func() error {
		for i := range writes {
			if err := write(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// samples are what an operation cost kube-apiserver and etcd, in CPU ms
// per operation, one sample per round.
type samples struct{ api, etcd []float64 }

// sample runs do, which makes n operations, and records their cost.
func (s *samples) sample(pids pids, n int, do func() error) error {
	api0, etcd0 := cluster.CPUSeconds(pids.apiserver), cluster.CPUSeconds(pids.etcd)
	if err := do(); err != nil {
		return err
	}
	api1, etcd1 := cluster.CPUSeconds(pids.apiserver), cluster.CPUSeconds(pids.etcd)
	s.api = append(s.api, 1000*(api1-api0)/float64(n))
	s.etcd = append(s.etcd, 1000*(etcd1-etcd0)/float64(n))
	return nil
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadCRD reads the SafeJob CRD from dir.
func loadCRD(dir string) (*apiextensionsv1.CustomResourceDefinition, error) {
	path := filepath.Join(dir, "batch.safejob.dev_safejobs.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CRD: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return crd, nil
}

// variant returns a copy of the CRD with the named part of its validation
// taken out: every CEL rule (x-kubernetes-validations), or the pod
// template's schema (kept as an object of any fields, and the rules that
// read it with it).
func variant(crd *apiextensionsv1.CustomResourceDefinition, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	out := crd.DeepCopy()
	noRules, noTemplate := false, false
	switch name {
	case variantAsIs:
	case variantNoRules:
		noRules = true
	case variantNoTemplate:
		noTemplate = true
	case variantBare:
		noRules, noTemplate = true, true
	default:
		return nil, fmt.Errorf("unknown CRD variant %q (want one of %s)", name, strings.Join(variantNames, ", "))
	}
	for i := range out.Spec.Versions {
		root := out.Spec.Versions[i].Schema.OpenAPIV3Schema
		if noRules {
			dropRules(root)
		}
		if noTemplate {
			spec := root.Properties["spec"]
			spec.Properties["template"] = apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
			spec.XValidations = nil // some read the template
			root.Properties["spec"] = spec
		}
	}
	return out, nil
}

// dropRules removes every CEL rule from a schema and the schemas within it.
func dropRules(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.XValidations = nil
	for k, p := range s.Properties {
		dropRules(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		dropRules(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		dropRules(s.AdditionalProperties.Schema)
	}
}

// parseLengths reads the comma-separated ledger lengths of -entries.
func parseLengths(sizes string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad ledger length %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// findPIDs finds the kube-apiserver and etcd that envtest started.
func findPIDs() (pids, error) {
	var ps pids
	var err error
	if ps.apiserver, err = cluster.ChildPID("kube-apiserver"); err != nil {
		return ps, fmt.Errorf("finding kube-apiserver: %w", err)
	}
	if ps.etcd, err = cluster.ChildPID("etcd"); err != nil {
		return ps, fmt.Errorf("finding etcd: %w", err)
	}
	return ps, nil
}

// newClient returns a client that knows the built-in types and SafeJobs.
func newClient(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := batchv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// startProfile takes a 10-second CPU profile of kube-apiserver into path,
// in the background; the channel is closed once it is written (or has
// failed, which is reported on standard error).
func startProfile(ctx context.Context, cfg *rest.Config, path string) (<-chan struct{}, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("profile client: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "writecost: profile: %v\n", err)
		}
	}()
	return done, nil
}

type pids struct{ apiserver, etcd int }

// safeJob is an Indexed SafeJob like the benchmark's W3 jobs, whose ledger
// lists n entries: launches and successes of consecutive indexes.
func safeJob(n int, now metav1.Time) *batchv1alpha1.SafeJob {
	name := fmt.Sprintf("sj-%d-%d", n, rand.IntN(1<<20))
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1alpha1.SafeJobSpec{Template: template(), Completions: ptr.To[int32](int32(n/2 + 5)),
			Parallelism: ptr.To[int32](5), CompletionMode: batchv1alpha1.IndexedCompletion}}
	entries := make([]batchv1alpha1.LedgerEntry, 0, n)
	for k := range n {
		index, typ := int32(k/2), batchv1alpha1.EntryLaunched
		if k%2 == 1 {
			typ = batchv1alpha1.EntrySucceeded
		}
		entries = append(entries, batchv1alpha1.LedgerEntry{Type: typ, Pod: jobs.PodName(name, index, 0), Index: index, Time: now})
	}
	sj.Status = batchv1alpha1.SafeJobStatus{
		Ledger:    ledger.Append(&batchv1alpha1.Ledger{}, entries),
		StartTime: &now,
		Active:    5,
		Succeeded: int32(n / 2),
		Conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionLedgerValid, Status: metav1.ConditionTrue,
			Reason: batchv1alpha1.ReasonLedgerOK, Message: "Ledger is valid", LastTransitionTime: now}},
	}
	return sj
}

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": "1s"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}
