package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
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
		"--include-crds", "--set", "replicas=3", "--set", "image.repository=example/safejob", "--set", "image.tag=v9",
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
	checkLintAndSchema(t, helm, filepath.Join(root, "dist", "chart"))
	checkNotes(t, helm, filepath.Join(root, "dist", "chart"))
	checkPodSecurity(t, objs)
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
	if c["image"] != "example/safejob:v9" {
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

// checkLintAndSchema runs helm lint --strict on the chart, and checks that
// values.schema.json refuses bad values, naming them.
func checkLintAndSchema(t *testing.T, helm, chart string) {
	t.Helper()
	if out, err := exec.Command(helm, "lint", "--strict", chart).CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict: %v\n%s", err, out)
	}
	monitoring := "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true," +
		"metrics.serviceMonitor.labels.release=monitoring"
	if out, err := exec.Command(helm, "lint", "--strict", chart, "--set", monitoring).CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict --set %s: %v\n%s", monitoring, err, out)
	}
	out, err := exec.Command(helm, "template", "safejob", chart, "--set", monitoring).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template --set %s: %v\n%s", monitoring, err, out)
	}
	for _, want := range []string{"kind: ServiceMonitor", "    release: monitoring", "kind: PrometheusRule",
		"{{ $value | humanizePercentage }}", "grafana_dashboard: \"1\"", `"legendFormat": "{{result}}"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helm template --set %s: no %q", monitoring, want)
		}
	}
	for set, want := range map[string]string{
		"replicas=0":                   "/replicas",
		"image.pullPolicy=Sometimes":   "/image/pullPolicy",
		"metrics.enable=true":          "'enable' not allowed",
		"extraArgs[0]=leader-elect":    "/extraArgs/0",
		"metrics.dashboard.labels.a=1": "/metrics/dashboard/labels/a",
	} {
		out, err := exec.Command(helm, "template", "safejob", chart, "--set", set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("helm template --set %s: %v, want an error naming %q:\n%s", set, err, want, out)
		}
	}
}

// checkNotes checks what helm install prints: how to see the operator run,
// and to uninstall it with the plugin first.
func checkNotes(t *testing.T, helm, chart string) {
	t.Helper()
	// A client dry run writes nothing, but still refuses the policies the
	// suite installed, of the same names, unless it may take them over.
	out, err := exec.Command(helm, "install", "safejob", chart, "--dry-run=client", "--namespace", "ops",
		"--kubeconfig", adminKubeconfig(t), "--take-ownership", "--set", "leaderElect=false").CombinedOutput()
	if err != nil {
		t.Fatalf("helm install --dry-run=client: %v\n%s", err, out)
	}
	notes := string(out[strings.Index(string(out), "NOTES:"):])
	for _, want := range []string{"kubectl -n ops rollout status deployment/safejob-controller-manager", "kubectl safejob uninstall",
		"kubectl label namespace ops pod-security.kubernetes.io/enforce=restricted", "WARNING: 2 replicas without leaderElect"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the install notes lack %q:\n%s", want, notes)
		}
	}
}

// checkPodSecurity creates (dry run) the manager's pod, as its Deployment
// makes it, in a namespace that enforces the restricted Pod Security
// Standard: the API server admits it.
func checkPodSecurity(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restricted-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" {
			continue
		}
		deploy := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deploy); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "manager", Namespace: ns.Name, Labels: deploy.Spec.Template.Labels},
			Spec: deploy.Spec.Template.Spec}
		if err := k8s.Create(ctx, pod, client.DryRunAll); err != nil {
			t.Errorf("the manager's pod in a restricted namespace: %v", err)
		}
		// Probe the check: a pod that runs as root is refused there.
		root := pod.DeepCopy()
		root.Spec.SecurityContext.RunAsNonRoot = ptr.To(false)
		if err := k8s.Create(ctx, root, client.DryRunAll); err == nil {
			t.Error("a root pod was admitted to the restricted namespace: the check proves nothing")
		}
	}
}
