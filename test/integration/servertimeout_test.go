package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
	"github.com/safejob/safejob/test/testutil"
)

// TestCreateDeadlineReachesAPIServer: a pod create must end at the API
// server by its launch's create deadline, not only at the client. The
// operator reaches the API server through a proxy that does not pass a
// client's going away on (as some load balancers do), and an admission
// webhook holds the first pod's create far past the deadline. The API
// server must give up on it at the deadline (it answers 504 and stores
// nothing); had it waited for the webhook, the pod would be stored after
// its launch was recorded Lost, beside the attempt that replaced it.
func TestCreateDeadlineReachesAPIServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, succeed, false)
	sj := testutil.MakeSafeJob("late", h.ns).Obj()
	held := jobs.PodName(sj.Name, 0, 0)
	// A window wide enough that the create starts within it on a loaded
	// machine; the timeout short, so that the API server's deadline comes
	// long before the webhook answers.
	fence := ledger.Fence{CreateWindow: 10 * time.Second, CreateTimeout: 2 * time.Second}
	hold := fence.LostGrace() + 5*time.Second
	webhookDone := slowWebhook(t, h.ns, held, hold)
	startManager(t, h.ns, managerOptions{config: proxyKeepingRequests(t), fence: fence})
	if err := k8s.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, client.ObjectKeyFromObject(sj), time.Minute)
	if !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 {
		t.Fatalf("want Complete with 1 succeeded, got %+v", got.Status)
	}
	select {
	case <-webhookDone:
	case <-time.After(time.Minute):
		t.Fatal("the webhook did not answer the held create within a minute")
	}
	var answered *testutil.Request
	waitFor(t, 30*time.Second, "the held create's answer in the audit log", func() (bool, error) {
		writes, err := testutil.Writes(auditLog, "pods", "")
		for i := range writes {
			if w := &writes[i]; w.Verb == "create" && w.Namespace == h.ns && w.Name == held {
				answered = w
			}
		}
		return answered != nil, err
	})
	if answered.Code == 201 {
		t.Errorf("the create of %s was stored after its deadline (the API server waited for the webhook)", held)
	}
	if u, err := url.Parse(answered.URI); err != nil || u.Query().Get("timeout") == "" {
		t.Errorf("the create of %s carried no timeout: %s", held, answered.URI)
	}
	h.finalCheck(t, got)
}

// slowWebhook serves a validating webhook for pod creates in ns that holds
// the create of the pod named held for hold (or until the API server gives
// up on it) and allows every create; the returned channel is closed once it
// answered the held one.
func slowWebhook(t *testing.T, ns, held string, hold time.Duration) <-chan struct{} {
	t.Helper()
	certPEM, keyPEM := selfSigned(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var reviewed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		reviewed.Add(1)
		if review.Request.Name == held || strings.Contains(string(review.Request.Object.Raw), `"name":"`+held+`"`) {
			defer close(done)
			select {
			case <-time.After(hold):
			case <-r.Context().Done():
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		_ = json.NewEncoder(w).Encode(review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "slow-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "slow.safejob.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(srv.URL + "/validate"), CABundle: certPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(30)),
		}},
	}
	if err := k8s.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })
	// The API server loads webhook configurations asynchronously: a create
	// that came first would never be held. Dry-run creates probe until
	// the webhook reviews one.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe", Namespace: ns}, Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	waitFor(t, 30*time.Second, "the webhook to review a create", func() (bool, error) {
		if err := k8s.Create(context.Background(), probe.DeepCopy(), client.DryRunAll); err != nil {
			return false, fmt.Errorf("dry-run create of a probe pod: %w", err)
		}
		return reviewed.Load() > 0, nil
	})
	return done
}

// proxyKeepingRequests returns a config that reaches the suite's API server
// through a plain HTTP proxy on loopback that authenticates as the suite
// and, for pod creates, does not pass a client's going away on: the API
// server sees the request to its end, whatever the client does.
func proxyKeepingRequests(t *testing.T) *rest.Config {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: transport,
	}
	// A context of its own, ended only when the test ends: with none,
	// ReverseProxy would follow the client's connection instead.
	kept, stop := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/pods") {
			r = r.WithContext(kept)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { stop(); srv.Close() })
	return &rest.Config{Host: srv.URL, QPS: cfg.QPS, Burst: cfg.Burst}
}

// selfSigned returns a certificate and key for 127.0.0.1, valid for an hour.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
