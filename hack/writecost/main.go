// Command writecost measures what one status write costs the API server:
// a batch/v1 Job's, and a SafeJob's with ledgers of growing length. It starts
// a bare kube-apiserver and etcd (envtest, KUBEBUILDER_ASSETS), installs the
// SafeJob CRD, and for each object makes the same status write (the ready
// count flipping) many times over, reading the CPU time of kube-apiserver and
// etcd from /proc before and after.
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
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/cluster"
)

func main() {
	writes := flag.Int("writes", 400, "status writes measured per object")
	sizes := flag.String("entries", "0,2,10,20,40,80,200", "ledger lengths to measure, comma-separated")
	crdDir := flag.String("crd-dir", "config/crd/bases", "directory of the SafeJob CRD")
	profile := flag.String("profile", "", "write a CPU profile of kube-apiserver, taken while the last length is measured, to this file")
	flag.Parse()
	if err := run(*writes, *sizes, *crdDir, *profile); err != nil {
		fmt.Fprintf(os.Stderr, "writecost: %v\n", err)
		os.Exit(1)
	}
}

func run(writes int, sizes, crdDir, profile string) error {
	lengths, err := parseLengths(sizes)
	if err != nil {
		return err
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = -1, 0
	ps, err := findPIDs()
	if err != nil {
		return err
	}
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	now := metav1.NewTime(time.Now().Truncate(time.Second))

	fmt.Printf("%-24s %10s %12s %12s\n", "object", "JSON bytes", "apiserver ms", "etcd ms")
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default"}, Spec: batchv1.JobSpec{
		Template: template(), Completions: ptr.To[int32](20), Parallelism: ptr.To[int32](5), Suspend: ptr.To(true),
		CompletionMode: ptr.To(batchv1.IndexedCompletion)}}
	if err := c.Create(ctx, job); err != nil {
		return fmt.Errorf("creating Job: %w", err)
	}
	job.Status = batchv1.JobStatus{StartTime: &now, Active: 5, Succeeded: 10, CompletedIndexes: "0-9"}
	if err := measure(ctx, c, ps, "Job", job, writes, func(i int) { job.Status.Ready = ptr.To(int32(i % 2)) }); err != nil {
		return err
	}
	for k, n := range lengths {
		if profile != "" && k == len(lengths)-1 {
			done, err := startProfile(ctx, cfg, profile)
			if err != nil {
				return err
			}
			defer func() { <-done }()
		}
		sj := safeJob(n, now)
		status := sj.Status
		if err := c.Create(ctx, sj); err != nil {
			return fmt.Errorf("creating SafeJob: %w", err)
		}
		sj.Status = status
		label := fmt.Sprintf("SafeJob, %d entries", n)
		if err := measure(ctx, c, ps, label, sj, writes, func(i int) { sj.Status.Ready = int32(i % 2) }); err != nil {
			return err
		}
	}
	return nil
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

// measure makes writes status writes of obj (after a few to warm up) and
// prints the CPU they cost kube-apiserver and etcd, per write.
func measure(ctx context.Context, c client.Client, pids pids, label string, obj client.Object, writes int, change func(int)) error {
	write := func(i int) error {
		change(i)
		if err := c.Status().Update(ctx, obj); err != nil {
			return fmt.Errorf("%s: status write: %w", label, err)
		}
		return nil
	}
	for i := range 20 {
		if err := write(i); err != nil {
			return err
		}
	}
	api0, etcd0 := cluster.CPUSeconds(pids.apiserver), cluster.CPUSeconds(pids.etcd)
	for i := range writes {
		if err := write(i); err != nil {
			return err
		}
	}
	api1, etcd1 := cluster.CPUSeconds(pids.apiserver), cluster.CPUSeconds(pids.etcd)
	raw, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("%s: encoding: %w", label, err)
	}
	fmt.Printf("%-24s %10d %12.2f %12.2f\n", label, len(raw),
		1000*(api1-api0)/float64(writes), 1000*(etcd1-etcd0)/float64(writes))
	return nil
}

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
