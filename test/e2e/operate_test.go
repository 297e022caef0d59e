package e2e

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/cluster"
	"github.com/safejob/safejob/test/testutil"
)

// The operator as config/default installs it.
const (
	operatorNS    = testutil.OperatorNamespace
	operatorSA    = "safejob-controller-manager"
	operatorUser  = "system:serviceaccount:" + operatorNS + ":" + operatorSA
	leaseName     = "safejob.batch.safejob.dev"
	leaseDuration = 15 * time.Second // controller-runtime's default
	leaseRetry    = 2 * time.Second  // controller-runtime's default
	// A follower tries to take the lease every leaseRetry, jittered by
	// client-go's factor 1.2: up to 2.2 times as long between two tries.
	leaseRetryMax  = leaseRetry * 22 / 10
	metricsReadSA  = "scraper"
	metricsOtherSA = "stranger"
)

// replica is one operator process and the token it runs with.
type replica struct {
	proc       *cluster.Process
	credential string // "JTI=<jti>", as the audit log names the token
	metrics    string // host:port of its metrics endpoint
}

// TestOperatorAsShipped runs the operator as config/default installs it:
// its own ServiceAccount (a token, no more rights than the shipped RBAC),
// on an API server with OwnerReferencesPermissionEnforcement, two replicas
// with --leader-elect and secure metrics. A plain, an Indexed, a scheduled
// and a Kueue-queued SafeJob and a Job managed by SafeJob complete; no request of the operator is
// forbidden (audit log); only the leader writes; the metrics serve an
// authorised reader only; SIGKILLed, the leader is replaced within the
// lease duration, with no extra pod and no lost completion.
func TestOperatorAsShipped(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{Kueue: true})
	ctx := context.Background()
	e.installOperatorObjects(t)
	cs, err := kubernetes.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	a := e.startShippedReplica(t, cs, "a")
	waitUntil(t, time.Minute, "replica a to lead", func() bool {
		lease, err := cs.CoordinationV1().Leases(operatorNS).Get(ctx, leaseName, metav1.GetOptions{})
		return err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != ""
	})
	b := e.startShippedReplica(t, cs, "b")
	// Deferred, so that a refused request is named even when a wait below
	// times out because of it.
	defer checkNoForbidden(t, e)

	t.Run("SafeJobs of every kind complete", func(t *testing.T) { e.runEveryKind(t) })
	t.Run("metrics", func(t *testing.T) { checkMetrics(t, cs, a.metrics) })

	// The leader is the one replica that wrote; SIGKILL it mid-run.
	leader, follower := a, b
	if wrote(t, e, b.credential, time.Time{}) {
		leader, follower = b, a
	}
	sj := plainSafeJob("after-kill", 4, 2, "3s")
	if err := e.cl.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "a pod of after-kill to run", func() bool { return runningPods(t, e, "after-kill") > 0 })
	killed := time.Now()
	leader.proc.Kill()
	waitUntil(t, leaseDuration+leaseRetryMax+10*time.Second, "the follower to take the lease", func() bool {
		return wroteLease(t, e, follower.credential, killed)
	})
	took := firstLeaseWrite(t, e, follower.credential, killed).Sub(killed)
	t.Logf("the follower took the lease %s after the leader was killed", took.Round(100*time.Millisecond))
	// The follower counts the lease from when it saw the last renewal (it
	// looks every leaseRetryMax at most, and the renewal came before the
	// kill), so it expires for the follower within leaseDuration +
	// leaseRetryMax of the kill; its next try comes within leaseRetryMax,
	// and that write may take seconds on a busy machine.
	if took > leaseDuration+2*leaseRetryMax+3*time.Second {
		t.Errorf("the follower took the lease %s after the kill, beyond the lease duration %s and two of the longest retries %s",
			took, leaseDuration, leaseRetryMax)
	}
	waitUntil(t, 2*time.Minute, "after-kill to complete", func() bool {
		got := &batchv1alpha1.SafeJob{}
		return e.cl.Get(ctx, client.ObjectKeyFromObject(sj), got) == nil && complete(got)
	})
	got := &batchv1alpha1.SafeJob{}
	if err := e.cl.Get(ctx, client.ObjectKeyFromObject(sj), got); err != nil {
		t.Fatal(err)
	}
	if created := podCreatesWithPrefix(t, e, "after-kill-"); got.Status.Succeeded != 4 || created != 4 {
		t.Errorf("after the takeover: %d succeeded, %d pods created; want 4 and 4 (no extra pod, none lost)",
			got.Status.Succeeded, created)
	}
	checkOnlyLeaderWrote(t, e, leader.credential, follower.credential, killed)
}

// installOperatorObjects applies what config/default installs besides the
// CRD and the admission policies (the cluster has those) and the
// Deployment (the test runs the operator as processes): namespace,
// ServiceAccount, RBAC and the metrics Service.
func (e *env) installOperatorObjects(t *testing.T) {
	t.Helper()
	out, err := exec.Command(filepath.Join(e.c.BinDir, "kubectl"), "kustomize", filepath.Join(root, "config", "default")).Output()
	if err != nil {
		t.Fatalf("rendering config/default: %v", err)
	}
	objs, err := testutil.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	applied := map[string]bool{}
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if obj.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s %s is rendered in namespace %s", obj.GetKind(), obj.GetName(), obj.GetNamespace())
			}
			continue
		case "Deployment":
			checkPodSecurity(t, e, obj)
			continue
		case "", "CustomResourceDefinition":
			continue
		case "Namespace":
			if obj.GetLabels()["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("namespace %s is not labelled for the restricted Pod Security level", obj.GetName())
			}
		}
		if err := e.cl.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		applied[obj.GetKind()+"/"+obj.GetName()] = true
	}
	for _, want := range []string{"Namespace/" + operatorNS, "ServiceAccount/" + operatorSA, "ClusterRole/safejob-manager-role",
		"Role/safejob-leader-election-role", "ClusterRole/safejob-metrics-reader", "Service/safejob-controller-manager-metrics-service"} {
		if !applied[want] {
			t.Errorf("config/default does not install %s", want)
		}
	}
}

// checkPodSecurity creates the Deployment's pod, dry run, in the operator's
// namespace, where the API server enforces the restricted Pod Security
// level (the Namespace is created before the Deployment comes).
func checkPodSecurity(t *testing.T, e *env, deploy *unstructured.Unstructured) {
	t.Helper()
	tmpl, found, err := unstructured.NestedMap(deploy.Object, "spec", "template")
	if err != nil || !found {
		t.Fatalf("the Deployment has no pod template: %v", err)
	}
	pod := &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, pod); err != nil {
		t.Fatal(err)
	}
	pod.Name, pod.Namespace = "pod-security-probe", operatorNS
	if err := e.cl.Create(context.Background(), pod, client.DryRunAll); err != nil {
		t.Errorf("the operator's pod is refused in its namespace: %v", err)
	}
	if c := pod.Spec.Containers[0].SecurityContext; c == nil || !ptr.Deref(c.ReadOnlyRootFilesystem, false) {
		t.Error("the manager's root filesystem is not read-only")
	}
}

// startShippedReplica starts an operator process with a fresh token of the
// operator's ServiceAccount, leader election and secure metrics.
func (e *env) startShippedReplica(t *testing.T, cs kubernetes.Interface, name string) *replica {
	t.Helper()
	token, jti := serviceAccountToken(t, cs, operatorNS, operatorSA)
	kubeconfig := filepath.Join(e.dir, "kubeconfig-"+name)
	writeTokenKubeconfig(t, e, kubeconfig, token)
	metrics := freeAddr(t)
	p, err := cluster.StartProcess("shipped-"+name, filepath.Join(e.dir, "shipped-"+name+".log"), managerBin,
		"--kubeconfig="+kubeconfig, "--leader-elect", "--leader-election-namespace="+operatorNS,
		"--metrics-bind-address="+metrics, "--metrics-secure", "--health-probe-bind-address=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &replica{proc: p, credential: "JTI=" + jti, metrics: metrics}
}

// serviceAccountToken requests a token of a ServiceAccount and returns it
// with its jti claim, by which the audit log tells tokens apart.
func serviceAccountToken(t *testing.T, cs kubernetes.Interface, ns, sa string) (token, jti string) {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token of %s/%s: %v", ns, sa, err)
	}
	parts := strings.Split(tr.Status.Token, ".")
	if len(parts) != 3 {
		t.Fatalf("token of %s/%s is not a JWT", ns, sa)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		JTI string `json:"jti"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.JTI == "" {
		t.Fatalf("token of %s/%s has no jti: %v", ns, sa, err)
	}
	return tr.Status.Token, claims.JTI
}

func writeTokenKubeconfig(t *testing.T, e *env, path, token string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: e.c.Config.Host, CertificateAuthorityData: e.c.Config.CAData}
	cfg.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["operator"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "operator"}
	cfg.CurrentContext = "operator"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

func plainSafeJob(name string, completions, parallelism int32, d string) *batchv1alpha1.SafeJob {
	return &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsSafeJob},
		Spec: batchv1alpha1.SafeJobSpec{Completions: ptr.To(completions), Parallelism: ptr.To(parallelism),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": d}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}}}
}

// runEveryKind runs a plain, an Indexed, a scheduled and a queued SafeJob to
// completion, and tears the schedule down.
func (e *env) runEveryKind(t *testing.T) {
	ctx := context.Background()
	k := &kueueEnv{env: e, ctx: ctx}
	k.flavor("default", nil)
	k.clusterQueue("cq", 2, "default")
	k.localQueue("lq", "cq")
	indexed := plainSafeJob("indexed", 3, 3, "500ms")
	indexed.Spec.CompletionMode = batchv1alpha1.IndexedCompletion
	parent := plainSafeJob("every", 1, 1, "500ms")
	parent.Spec.Schedule = ptr.To("@every 5s")
	for _, sj := range []*batchv1alpha1.SafeJob{plainSafeJob("plain", 2, 2, "500ms"), indexed, job("queued", "lq", 2, 2, "500ms"), parent} {
		k.create(t, sj)
	}
	// A batch/v1 Job managed by SafeJob: its ledger, its pods and its
	// status, all through the shipped RBAC.
	managed := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "managed", Namespace: nsSafeJob}, Spec: managedJobSpec(2, "500ms")}
	if err := e.cl.Create(ctx, managed); err != nil {
		t.Fatal(err)
	}
	k.waitComplete(t, "plain", "indexed", "queued")
	waitUntil(t, time.Minute, "the managed Job to complete", func() bool {
		return e.cl.Get(ctx, client.ObjectKeyFromObject(managed), managed) == nil && unfinishedJobs([]batchv1.Job{*managed}) == 0 &&
			managed.Status.Succeeded == 2
	})
	waitUntil(t, 2*time.Minute, "a run of the schedule to complete", func() bool {
		var runs batchv1alpha1.SafeJobList
		if err := e.cl.List(ctx, &runs, client.InNamespace(nsSafeJob), client.MatchingLabels{batchv1alpha1.ParentLabel: "every"}); err != nil {
			return false
		}
		return slices.ContainsFunc(runs.Items, func(r batchv1alpha1.SafeJob) bool { return complete(&r) })
	})
	tearDownParent(t, e, parent)
}

// checkMetrics: the metrics endpoint refuses a caller without a token and
// one without the metrics-reader role, and serves one bound to it.
func checkMetrics(t *testing.T, cs kubernetes.Interface, addr string) {
	ctx := context.Background()
	for _, sa := range []string{metricsReadSA, metricsOtherSA} {
		if _, err := cs.CoreV1().ServiceAccounts(nsSafeJob).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "safejob-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: metricsReadSA, Namespace: nsSafeJob}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader, _ := serviceAccountToken(t, cs, nsSafeJob, metricsReadSA)
	other, _ := serviceAccountToken(t, cs, nsSafeJob, metricsOtherSA)
	// The endpoint's certificate is self-signed by the operator: the test
	// checks who may read, not the certificate.
	hc := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	scrape := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{{"no token", "", http.StatusUnauthorized}, {"a ServiceAccount without metrics-reader", other, http.StatusForbidden},
		{"a ServiceAccount with metrics-reader", reader, http.StatusOK}} {
		var code int
		var body string
		// The role binding reaches the authorizer's cache within a moment.
		waitUntil(t, 30*time.Second, "the metrics answer for "+tc.who, func() bool {
			code, body = scrape(tc.token)
			return code == tc.want
		})
		if tc.want == http.StatusOK && !strings.Contains(body, "safejob_pods_created_total") {
			t.Errorf("metrics served to %s lack safejob_pods_created_total", tc.who)
		}
	}
}

func runningPods(t *testing.T, e *env, prefix string) int {
	t.Helper()
	var pods corev1.PodList
	if err := e.cl.List(context.Background(), &pods, client.InNamespace(nsSafeJob)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, prefix) && p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

func podCreatesWithPrefix(t *testing.T, e *env, prefix string) int {
	t.Helper()
	creates, err := testutil.PodCreates(e.c.AuditLog, nsSafeJob)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for pod, c := range creates {
		if strings.HasPrefix(pod, prefix) {
			n += c
		}
	}
	return n
}

// operatorRequests reads the operator's requests from the audit log.
func operatorRequests(t *testing.T, e *env) []testutil.Request {
	t.Helper()
	reqs, err := testutil.UserRequests(e.c.AuditLog, operatorUser)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func isWrite(r testutil.Request) bool {
	return slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, r.Verb)
}

// wrote reports whether the credential made a write, other than to the
// leader election Lease, received after since.
func wrote(t *testing.T, e *env, credential string, since time.Time) bool {
	for _, r := range operatorRequests(t, e) {
		if r.Credential == credential && isWrite(r) && r.Resource != "leases" && !r.Received.Before(since) {
			return true
		}
	}
	return false
}

func wroteLease(t *testing.T, e *env, credential string, since time.Time) bool {
	return !firstLeaseWrite(t, e, credential, since).IsZero()
}

// firstLeaseWrite is when the credential first wrote the Lease after since.
func firstLeaseWrite(t *testing.T, e *env, credential string, since time.Time) time.Time {
	for _, r := range operatorRequests(t, e) {
		if r.Credential == credential && r.Resource == "leases" && isWrite(r) && r.Code < 300 && r.Received.After(since) {
			return r.Received
		}
	}
	return time.Time{}
}

// checkOnlyLeaderWrote: before the kill only the leader wrote (the Lease
// aside, which the follower may only read), and the follower wrote after.
func checkOnlyLeaderWrote(t *testing.T, e *env, leader, follower string, killed time.Time) {
	t.Helper()
	var before, after int
	for _, r := range operatorRequests(t, e) {
		if !isWrite(r) {
			continue
		}
		switch {
		case r.Credential == follower && r.Received.Before(killed):
			t.Errorf("the follower wrote before it led: %s %s/%s %s/%s", r.Verb, r.Resource, r.Subresource, r.Namespace, r.Name)
		case r.Credential == leader && r.Received.Before(killed) && r.Resource != "leases":
			before++
		case r.Credential == follower:
			after++
		}
	}
	t.Logf("writes: %d by the first leader, %d by the second", before, after)
	if before == 0 || after == 0 {
		t.Errorf("writes: %d by the first leader, %d by the second; want both", before, after)
	}
}

// checkNoForbidden fails on any request of the operator the API server
// refused as forbidden or unauthorized.
func checkNoForbidden(t *testing.T, e *env) {
	t.Helper()
	reqs := operatorRequests(t, e)
	var refused []string
	for _, r := range reqs {
		if r.Code == http.StatusForbidden || r.Code == http.StatusUnauthorized {
			refused = append(refused, fmt.Sprintf("%d %s %s", r.Code, r.Verb, r.URI))
		}
	}
	t.Logf("%d requests of the operator in the audit log", len(reqs))
	if len(reqs) == 0 {
		t.Error("no request of the operator in the audit log")
	}
	if len(refused) > 0 {
		t.Errorf("the shipped RBAC refused %d requests of the operator:\n%s", len(refused), strings.Join(refused, "\n"))
	}
	var lease coordinationv1.Lease
	if err := e.cl.Get(context.Background(), client.ObjectKey{Namespace: operatorNS, Name: leaseName}, &lease); err != nil {
		t.Errorf("the leader election Lease: %v", err)
	}
}

// TestOperatorWaitsForAPIServer: an operator started while the API server
// cannot be reached (nothing listens yet at the address its kubeconfig
// names) keeps trying to start instead of exiting, and runs SafeJobs once
// it reaches the API server, in the same process.
func TestOperatorWaitsForAPIServer(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	cfg, err := clientcmd.LoadFromFile(e.c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil { // reserved: nothing listens there until the proxy does
		t.Fatal(err)
	}
	var target string
	for _, kc := range cfg.Clusters {
		target, kc.Server = strings.TrimPrefix(kc.Server, "https://"), "https://"+addr
	}
	e.kubeconfig = filepath.Join(e.dir, "kubeconfig-later")
	if err := clientcmd.WriteToFile(*cfg, e.kubeconfig); err != nil {
		t.Fatal(err)
	}
	e.startOperator()
	op := e.ops[0]
	waitUntil(t, time.Minute, "the operator to fail a first start", func() bool {
		return strings.Contains(op.Tail(50), "Could not start; retrying")
	})
	if err := op.Exited(); err != nil {
		t.Fatalf("the operator exited: %v\n%s", err, op.Tail(20))
	}
	p, err := cluster.StartProxyAt(addr, target, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	k := &kueueEnv{env: e, ctx: context.Background()}
	k.create(t, plainSafeJob("late", 2, 2, "500ms"))
	k.waitComplete(t, "late")
	if err := op.Exited(); err != nil || len(e.ops) != 1 {
		t.Errorf("the operator exited (%v) or another started (%d): the first one should have run it", err, len(e.ops))
	}
}
