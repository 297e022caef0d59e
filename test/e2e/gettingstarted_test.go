package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// TestGettingStarted follows docs/getting-started.md on a cluster of its
// own: it installs the chart with the pinned helm, runs the operator as
// the chart's Deployment runs it (its ServiceAccount's token, its flags),
// applies the page's SafeJobs as written, and runs the page's kubectl
// commands: the first completes, and `kubectl safejob why` says the second
// waits, and why.
func TestGettingStarted(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{Nodes: 2})
	ctx := context.Background()
	first, second := docSafeJobs(t, filepath.Join(root, "docs", "getting-started.md"))

	helmOut, err := exec.Command(filepath.Join(root, "hack", "helm.sh")).Output()
	if err != nil {
		t.Fatalf("building helm: %v", err)
	}
	// The local cluster has the CRD and the admission policies installed
	// already; helm skips an existing CRD and takes the policies over.
	install := exec.Command(strings.TrimSpace(string(helmOut)), "install", "safejob", filepath.Join(root, "dist", "chart"),
		"--namespace", operatorNS, "--create-namespace", "--take-ownership", "--kubeconfig", e.c.Kubeconfig, "--wait=false")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "rollout status deployment/safejob-controller-manager") {
		t.Errorf("helm install printed no notes:\n%s", out)
	}
	cs, err := kubernetes.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e.startShippedReplica(t, cs, "chart")

	p := buildPlugin(t, e)
	run := func(want int, args ...string) string {
		t.Helper()
		stdout, stderr, code := p.run(t, "", args...)
		if code != want {
			t.Fatalf("kubectl %v: exit code %d, want %d\n%s%s", args, code, want, stdout, stderr)
		}
		return stdout
	}
	for _, sj := range []*batchv1alpha1.SafeJob{first, second} {
		sj.Namespace = nsSafeJob
		if err := e.cl.Create(ctx, sj); err != nil {
			t.Fatalf("creating the page's SafeJob %s: %v", sj.Name, err)
		}
	}
	run(0, "wait", "sj/"+first.Name, "--for=condition=Complete", "--timeout=2m", "-n", nsSafeJob)
	if out := run(0, "safejob", "ledger", first.Name, "-n", nsSafeJob); !strings.Contains(out, "Succeeded") {
		t.Errorf("kubectl safejob ledger %s shows no success:\n%s", first.Name, out)
	}
	out := run(2, "safejob", "why", second.Name, "-n", nsSafeJob)
	if !regexp.MustCompile(`Waiting[\s\S]*Suspended`).MatchString(out) {
		t.Errorf("kubectl safejob why %s does not say it waits because it is suspended:\n%s", second.Name, out)
	}
	waitUntil(t, time.Minute, "the operator to record "+second.Name, func() bool {
		got := &batchv1alpha1.SafeJob{}
		return e.cl.Get(ctx, client.ObjectKeyFromObject(second), got) == nil && len(got.Status.Conditions) > 0
	})
}

// docSafeJobs returns the first two SafeJobs of a page's yaml blocks.
func docSafeJobs(t *testing.T, page string) (first, second *batchv1alpha1.SafeJob) {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var found []*batchv1alpha1.SafeJob
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
		objs, err := testutil.DecodeManifests([]byte(m[1]))
		if err != nil {
			t.Fatalf("%s: a yaml block does not decode: %v\n%s", page, err, m[1])
		}
		for _, obj := range objs {
			if obj.GetKind() != "SafeJob" {
				continue
			}
			sj := &batchv1alpha1.SafeJob{}
			if err := cluster.Scheme().Convert(obj, sj, nil); err != nil {
				t.Fatal(err)
			}
			found = append(found, sj)
		}
	}
	if len(found) < 2 {
		t.Fatalf("%s has %d SafeJobs in its yaml blocks, want two: a first one and one that waits", page, len(found))
	}
	return found[0], found[1]
}
