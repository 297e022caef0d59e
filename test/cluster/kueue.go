package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// kueueMetricsCertDir is where the Kueue manager reads its metrics certificate
// when its internal certificate management is off (a fixed path).
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// kueueConfig is the Kueue manager's configuration: no leader election, no
// internal certificates, no visibility server, everything on 127.0.0.1.
// FinishOrphanedWorkloads stays at its default (on); SafeJob recovers a
// Workload finished as an orphan (see the README).
const kueueConfig = `apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection:
  leaderElect: false
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
internalCertManagement:
  enable: false
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
`

// multiKueueConfig dispatches SafeJobs through MultiKueue's generic adapter.
const multiKueueConfig = `multiKueue:
  origin: %q
  gcInterval: 10s
  workerLostTimeout: %s
  externalFrameworks:
  - name: SafeJob.v1alpha1.batch.safejob.dev
`

// waitForPodsReadyConfig evicts a Workload whose pods are not all ready
// within the timeout, requeues it once (after a second) and deactivates it
// when it times out again.
const waitForPodsReadyConfig = `waitForPodsReady:
  timeout: %s
  blockAdmission: false
  requeuingStrategy:
    backoffLimitCount: 1
    backoffBaseSeconds: 1
    backoffMaxSeconds: 2
`

// startKueue runs the Kueue manager and waits until it is ready.
func (c *Cluster) startKueue(bin string) error {
	certDir := filepath.Join(c.opts.Dir, "kueue-certs")
	if err := writeSelfSignedCert(certDir); err != nil {
		return err
	}
	if err := ensureKueueMetricsCert(certDir); err != nil {
		return err
	}
	health, err := freePort()
	if err != nil {
		return err
	}
	webhook, err := freePort()
	if err != nil {
		return err
	}
	cfg := filepath.Join(c.opts.Dir, "kueue-config.yaml")
	if err := os.WriteFile(cfg, []byte(c.kueueConfig(health, webhook, certDir)), 0o600); err != nil {
		return fmt.Errorf("writing Kueue configuration: %w", err)
	}
	if err := c.run(bin, "kueue", "--config="+cfg, "--kubeconfig="+c.Kubeconfig, "--zap-log-level=2"); err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", health)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url) //nolint:gosec,noctx // a loopback readiness probe
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := c.checkAlive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kueue not ready after 2m; last lines of its log:\n%s", c.proc("kueue").Tail(20))
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the readiness probe
	}
}

// kueueConfig is the Kueue manager's configuration for the cluster's options.
func (c *Cluster) kueueConfig(health, webhook int, certDir string) string {
	config := fmt.Sprintf(kueueConfig, health, webhook, certDir)
	if c.opts.MultiKueue {
		lost := c.opts.KueueWorkerLostTimeout
		if lost == 0 {
			lost = 15 * time.Minute // Kueue's default
		}
		config += fmt.Sprintf(multiKueueConfig, c.opts.KueueOrigin, lost)
	}
	if c.opts.KueuePodsReadyTimeout > 0 {
		config += fmt.Sprintf(waitForPodsReadyConfig, c.opts.KueuePodsReadyTimeout)
	}
	if c.opts.KueueQPS > 0 {
		config += fmt.Sprintf("clientConnection:\n  qps: %d\n  burst: %d\n", c.opts.KueueQPS, 2*c.opts.KueueQPS)
	}
	return config
}

// ensureKueueMetricsCert puts a certificate where Kueue insists on reading
// one. The directory is outside the work directory; a certificate already
// there is kept.
// Clusters started at once, in this process or another, take a lock so that
// the pair is written once, whole.
func ensureKueueMetricsCert(from string) error {
	if _, err := os.Stat(filepath.Join(kueueMetricsCertDir, "tls.key")); err == nil {
		return nil
	}
	if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
		return fmt.Errorf("the Kueue manager reads %s/tls.{crt,key} and it cannot be created (run as root or create it): %w",
			kueueMetricsCertDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(kueueMetricsCertDir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("locking the Kueue metrics certificate: %w", err)
	}
	defer func() { _ = lock.Close() }() // closing releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking the Kueue metrics certificate: %w", err)
	}
	if _, err := os.Stat(filepath.Join(kueueMetricsCertDir, "tls.key")); err == nil {
		return nil // written by another cluster meanwhile
	}
	// The key goes last: once it is there, the pair is whole.
	for _, f := range []string{"tls.crt", "tls.key"} {
		raw, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return fmt.Errorf("reading certificate: %w", err)
		}
		if err := os.WriteFile(filepath.Join(kueueMetricsCertDir, f), raw, 0o600); err != nil {
			return fmt.Errorf("writing Kueue metrics certificate: %w", err)
		}
	}
	return nil
}

// writeSelfSignedCert writes tls.crt and tls.key for 127.0.0.1 into dir.
func writeSelfSignedCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("creating certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating certificate directory: %w", err)
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600),
		os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
}
