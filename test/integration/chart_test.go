package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/test/testutil"
)

// TestHelmChart renders dist/chart with the pinned helm (hack/helm.sh),
// values overridden, checks that the values took effect, and applies every
// object to the API server; rendered with its defaults, the chart runs two
// replicas under a PodDisruptionBudget. `make verify` keeps the chart equal
// to what config/default installs (hack/chart generates it).
func TestHelmChart(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	helmOut, err := exec.Command(filepath.Join(root, "hack", "helm.sh")).Output()
	if err != nil {
		t.Fatalf("building helm: %v", err)
	}
	helm := strings.TrimSpace(string(helmOut))
	ns := newNamespace(t) // a name of its own, so that the test can run again on the same API server
	rendered, err := exec.Command(helm, "template", "safejob", filepath.Join(root, "dist", "chart"), "--namespace", ns,
		"--include-crds", "--set", "replicas=3", "--set", "image.repository=registry.example/safejob", "--set", "image.tag=v9",
		"--set", "metrics.enabled=false", "--set-json", `extraArgs=["--concurrent-reconciles=8"]`).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, rendered)
	}
	objs, err := testutil.DecodeManifests(rendered)
	if err != nil {
		t.Fatal(err)
	}
	checkRendered(t, objs, ns)
	checkDefaults(t, helm, filepath.Join(root, "dist", "chart"))
	ctx := context.Background()
	for _, obj := range objs {
		// Server-side apply: the CRD and the admission policies are already
		// installed here, identical.
		if err := k8s.Patch(ctx, obj, client.Apply, client.ForceOwnership, client.FieldOwner("helm-test")); err != nil { //nolint:staticcheck // unstructured objects have no apply configuration
			t.Errorf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

func checkDeployment(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	if replicas, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); fmt.Sprint(replicas) != "3" {
		t.Errorf("replicas %v, want 3", replicas)
	}
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	if c["image"] != "registry.example/safejob:v9" {
		t.Errorf("image %v", c["image"])
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	if !slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--concurrent-reconciles=8") ||
		slices.Contains(args, "--metrics-secure") {
		t.Errorf("args %v: want --leader-elect and --concurrent-reconciles=8, no metrics", args)
	}
	sc, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem")
	if !sc {
		t.Error("the manager's root filesystem is not read-only")
	}
}

// checkRendered checks what the overridden values change, and that every
// kind config/default installs is there.
func checkRendered(t *testing.T, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj.GetKind()]++
		if obj.GetNamespace() != "" && obj.GetNamespace() != ns {
			t.Errorf("%s %s is in namespace %s, not the release's", obj.GetKind(), obj.GetName(), obj.GetNamespace())
		}
		switch obj.GetKind() {
		case "Deployment":
			checkDeployment(t, obj)
		case "Service":
			t.Errorf("metrics.enabled=false still renders Service %s", obj.GetName())
		case "PodDisruptionBudget":
			if spec, _, _ := unstructured.NestedMap(obj.Object, "spec"); fmt.Sprint(spec["maxUnavailable"]) != "1" || spec["minAvailable"] != nil {
				t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, minAvailable %v; want 1 and none",
					obj.GetName(), spec["maxUnavailable"], spec["minAvailable"])
			}
		case "ClusterRoleBinding":
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				if m := s.(map[string]any); m["namespace"] != ns {
					t.Errorf("ClusterRoleBinding %s binds a ServiceAccount of namespace %v", obj.GetName(), m["namespace"])
				}
			}
		}
	}
	for _, kind := range []string{"CustomResourceDefinition", "Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
		"Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "PodDisruptionBudget"} {
		if kinds[kind] == 0 {
			t.Errorf("the chart renders no %s", kind)
		}
	}
}

// checkDefaults renders the chart with its values.yaml: two replicas, and
// a PodDisruptionBudget that podDisruptionBudget.enabled=false removes.
func checkDefaults(t *testing.T, helm, chart string) {
	t.Helper()
	for _, pdb := range []bool{true, false} {
		rendered, err := exec.Command(helm, "template", "safejob", chart, "--set", fmt.Sprintf("podDisruptionBudget.enabled=%t", pdb)).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, rendered)
		}
		objs, err := testutil.DecodeManifests(rendered)
		if err != nil {
			t.Fatal(err)
		}
		pdbs := 0
		for _, obj := range objs {
			switch obj.GetKind() {
			case "Deployment":
				if replicas, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); fmt.Sprint(replicas) != "2" {
					t.Errorf("replicas %v by default, want 2", replicas)
				}
			case "PodDisruptionBudget":
				pdbs++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[pdb]; pdbs != want {
			t.Errorf("podDisruptionBudget.enabled=%t renders %d PodDisruptionBudgets, want %d", pdb, pdbs, want)
		}
	}
}
