// Package cluster starts a local Kubernetes control plane from real parts,
// all on 127.0.0.1: etcd and kube-apiserver (with an audit log of pod and
// SafeJob writes), kube-scheduler, kube-controller-manager and KWOK managing
// simulated nodes. Everything is built pinned from the Go module proxy by
// hack/ scripts and cached outside the repository.
package cluster

import (
	"context"
	_ "embed"

	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/test/testutil"
)

//go:embed stages.yaml
var kwokStages []byte

// Options shape the cluster.
type Options struct {
	// Dir holds logs, kubeconfig and the audit log. Required.
	Dir string
	// Root is the repository root (for hack/ scripts and the CRDs).
	Root string
	// Nodes is the number of simulated nodes (default 4).
	Nodes int
	// PodGCThreshold is kube-controller-manager's --terminated-pod-gc-threshold (default 12500).
	PodGCThreshold int
	// ControllerManagerQPS sets kube-controller-manager's client rate (default: its own default, 20).
	ControllerManagerQPS int
	// ControllerManagerVerbosity is kube-controller-manager's -v (default 0).
	ControllerManagerVerbosity int
	// ControllerManagerProxy, when set, makes kube-controller-manager reach
	// kube-apiserver through a proxy that delays and cuts its connections
	// (StartProxy): the built-in controllers meet the network fault a
	// SafeJob operator behind the same proxy meets.
	ControllerManagerProxy *ProxyFault
	// Progress receives one line per step (default: discarded).
	Progress io.Writer
	// Kueue installs Kueue's CRDs and runs the Kueue manager
	// (testutil.KueueVersion).
	Kueue bool
	// KueueQPS sets the Kueue manager's client rate, burst twice it
	// (default: its own default, 20 and burst 30).
	KueueQPS int
	// MultiKueue makes Kueue a MultiKueue manager that dispatches SafeJobs
	// (multiKueue.externalFrameworks), with KueueOrigin as its origin.
	MultiKueue  bool
	KueueOrigin string
	// KueueWorkerLostTimeout is how long MultiKueue waits for a worker that
	// stopped answering before it dispatches elsewhere (default Kueue's, 15m).
	KueueWorkerLostTimeout time.Duration
	// KueuePodsReadyTimeout, when set, turns on Kueue's waitForPodsReady
	// with this timeout, requeuing an evicted Workload once after a second
	// and deactivating it at the second timeout.
	KueuePodsReadyTimeout time.Duration
	// KwokPodWorkers is how many pod stages KWOK plays at once, across all
	// simulated nodes (default: KWOK's own, 4). A real cluster has a kubelet
	// per node writing its own pods' status; KWOK's few workers write them
	// all, so under a busy API server pods queue there.
	KwokPodWorkers int
}

// Cluster is a running local cluster.
type Cluster struct {
	// Config reaches the API server as cluster admin.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig.
	Kubeconfig string
	// AuditLog is the path of the API server's audit log.
	AuditLog string
	// BinDir holds the Kubernetes binaries (kubectl among them).
	BinDir string

	opts     Options
	env      *envtest.Environment
	procs    []*Process
	proxies  []*Proxy
	kueueBin string
}

// Scheme has the types the cluster's clients use.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := batchv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := kueue.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Start brings the cluster up; on error everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 4
	}
	if opts.PodGCThreshold == 0 {
		opts.PodGCThreshold = 12500
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	c := &Cluster{opts: opts, AuditLog: filepath.Join(opts.Dir, "audit.log")}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	c.step("Building Kubernetes %s binaries (cached after the first time)", testutil.K8sVersion())
	if c.BinDir, err = c.hack("k8s-binaries.sh", "etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"); err != nil {
		return nil, err
	}
	kwok, err := c.hack("kwok.sh")
	if err != nil {
		return nil, err
	}
	if err := c.startControlPlane(); err != nil {
		return nil, err
	}
	if err := c.startControllers(); err != nil {
		return nil, err
	}
	if err := c.startKwok(kwok); err != nil {
		return nil, err
	}
	if err := c.addNodes(ctx); err != nil {
		return nil, err
	}
	if opts.Kueue {
		c.step("Building and starting Kueue %s (cached after the first time)", testutil.KueueVersion())
		bin, err := c.hack("kueue.sh")
		if err != nil {
			return nil, err
		}
		c.kueueBin = bin
		if err := c.startKueue(bin); err != nil {
			return nil, err
		}
	}
	c.step("Cluster ready: %d simulated nodes; kubeconfig %s", opts.Nodes, c.Kubeconfig)
	return c, nil
}

func (c *Cluster) step(format string, args ...any) {
	_, _ = fmt.Fprintf(c.opts.Progress, "==> "+format+"\n", args...)
}

// hack runs a hack/ script and returns the last line it printed.
func (c *Cluster) hack(script string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.opts.Root, "hack", script), args...)
	cmd.Stderr = c.opts.Progress
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("running hack/%s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func (c *Cluster) startControlPlane() error {
	c.step("Starting etcd and kube-apiserver")
	policy, _, err := testutil.WriteAuditPolicy(c.opts.Dir)
	if err != nil {
		return err
	}
	crds := []string{filepath.Join(c.opts.Root, "config", "crd", "bases")}
	if c.opts.Kueue {
		dir, err := testutil.KueueCRDDir(c.opts.Root)
		if err != nil {
			return err
		}
		crds = append(crds, dir)
	}
	env, cfg, err := testutil.StartControlPlane(func() *envtest.Environment {
		env := &envtest.Environment{
			CRDDirectoryPaths:     crds,
			ErrorIfCRDPathMissing: true,
			BinaryAssetsDirectory: c.BinDir,
		}
		env.ControlPlane.GetAPIServer().Configure().
			Set("disable-admission-plugins", "ServiceAccount,TaintNodesByCondition").
			// As OpenShift has it: setting blockOwnerDeletion on a reference
			// needs update on the owner's finalizers.
			Set("enable-admission-plugins", "OwnerReferencesPermissionEnforcement").
			Set("audit-policy-file", policy).
			Set("audit-log-path", c.AuditLog).
			Set("audit-log-maxsize", testutil.AuditLogMaxSizeMB).
			Set("bind-address", "127.0.0.1")
		return env
	})
	if err != nil {
		return err
	}
	c.env = env
	cfg.QPS, cfg.Burst = 500, 1000
	c.Config = cfg
	if err := c.adopt(context.Background()); err != nil {
		return err
	}
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding admin user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.opts.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	if err := testutil.InstallPolicies(context.Background(), cl, c.opts.Root); err != nil {
		return fmt.Errorf("installing the admission policies: %w", err)
	}
	return nil
}

func (c *Cluster) schedulerArgs() []string {
	return []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1",
		"--secure-port=0", "--kube-api-qps=500", "--kube-api-burst=1000"}
}

// startControllers runs kube-scheduler and kube-controller-manager.
func (c *Cluster) startControllers() error {
	kcmConfig, err := c.controllerManagerKubeconfig()
	if err != nil {
		return err
	}
	for _, p := range []struct {
		name string
		args []string
	}{
		{"kube-scheduler", c.schedulerArgs()},
		{"kube-controller-manager", c.controllerManagerArgs(kcmConfig)},
	} {
		if err := c.run(filepath.Join(c.BinDir, p.name), p.name, p.args...); err != nil {
			return err
		}
	}
	return nil
}

// controllerManagerKubeconfig is the kubeconfig kube-controller-manager
// uses: the admin's, or, with Options.ControllerManagerProxy, one whose
// server is a proxy in front of kube-apiserver.
func (c *Cluster) controllerManagerKubeconfig() (string, error) {
	if c.opts.ControllerManagerProxy == nil {
		return c.Kubeconfig, nil
	}
	path := filepath.Join(c.opts.Dir, "kubeconfig-controller-manager")
	proxies, err := ProxiedKubeconfig(c.Kubeconfig, path, *c.opts.ControllerManagerProxy)
	c.proxies = append(c.proxies, proxies...)
	if err != nil {
		return "", fmt.Errorf("kube-controller-manager's proxy: %w", err)
	}
	return path, nil
}

func (c *Cluster) controllerManagerArgs(kubeconfig string) []string {
	args := []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--controllers=pod-garbage-collector-controller,garbage-collector-controller,ttl-after-finished-controller," +
			"job-controller,cronjob-controller,namespace-controller",
		"--terminated-pod-gc-threshold=" + strconv.Itoa(c.opts.PodGCThreshold),
		"--use-service-account-credentials=false"}
	if c.opts.ControllerManagerVerbosity > 0 {
		args = append(args, fmt.Sprintf("-v=%d", c.opts.ControllerManagerVerbosity))
	}
	if c.opts.ControllerManagerQPS > 0 {
		args = append(args, fmt.Sprintf("--kube-api-qps=%d", c.opts.ControllerManagerQPS),
			fmt.Sprintf("--kube-api-burst=%d", 2*c.opts.ControllerManagerQPS))
	}
	return args
}

func (c *Cluster) startKwok(bin string) error {
	stages := filepath.Join(c.opts.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokConfig(c.opts.KwokPodWorkers), 0o600); err != nil {
		return fmt.Errorf("writing KWOK stages: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	return c.run(bin, "kwok", "--kubeconfig="+c.Kubeconfig, "--config="+stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=10.0.0.1/16", "--node-ip=127.0.0.1", fmt.Sprintf("--server-address=127.0.0.1:%d", port))
}

// kwokConfig is KWOK's --config: the pod stages and, when podWorkers is set,
// a configuration that plays that many pod stages at once.
func kwokConfig(podWorkers int) []byte {
	if podWorkers <= 0 {
		return kwokStages
	}
	return fmt.Appendf(slices.Clone(kwokStages), "---\napiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\n"+
		"options:\n  podPlayStageParallelism: %d\n", podWorkers)
}

// addNodes creates the simulated nodes and waits until they are Ready.
func (c *Cluster) addNodes(ctx context.Context) error {
	c.step("Adding %d simulated nodes", c.opts.Nodes)
	cl, err := client.New(c.Config, client.Options{Scheme: Scheme()})
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	for i := range c.opts.Nodes {
		if err := cl.Create(ctx, NewNode(fmt.Sprintf("kwok-node-%d", i), nil)); err != nil {
			return fmt.Errorf("creating node: %w", err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var nodes corev1.NodeList
		if err := cl.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing nodes: %w", err)
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == c.opts.Nodes {
			return nil
		}
		if err := c.checkAlive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes Ready after 2m; KWOK log:\n%s", ready, c.opts.Nodes, c.proc("kwok").Tail(20))
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the node readiness check
	}
}

// NewNode is a node KWOK manages, with the given extra labels.
func NewNode(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{"type": "kwok", corev1.LabelHostname: name}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"),
				corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("1000")},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"),
				corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("1000")},
		},
	}
}

func (c *Cluster) run(bin, name string, args ...string) error {
	c.step("Starting %s", name)
	p, err := StartProcess(name, filepath.Join(c.opts.Dir, name+".log"), bin, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	time.Sleep(300 * time.Millisecond) // let an immediate flag or bind failure surface
	return c.checkAlive()
}

// RestartKueue SIGKILLs the Kueue manager and starts it again, waiting
// until it is ready.
func (c *Cluster) RestartKueue() error {
	old := c.proc("kueue")
	if old == nil {
		return fmt.Errorf("kueue is not running")
	}
	old.Kill()
	<-old.Done()
	c.procs = slices.DeleteFunc(c.procs, func(p *Process) bool { return p == old })
	return c.startKueue(c.kueueBin)
}

// Process returns the running component of that name (etcd, kube-apiserver,
// kube-scheduler, kube-controller-manager, kwok, kueue), or nil.
func (c *Cluster) Process(name string) *Process { return c.proc(name) }

func (c *Cluster) proc(name string) *Process {
	for _, p := range c.procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// checkAlive reports the first component that exited, with its log tail.
func (c *Cluster) checkAlive() error {
	for _, p := range c.procs {
		if err := p.Exited(); err != nil {
			return fmt.Errorf("%s exited: %w; last lines of %s:\n%s", p.Name, err, p.LogPath, p.Tail(20))
		}
	}
	return nil
}

// Stop stops every component: the clients of the API server first, then
// kube-apiserver, then etcd.
func (c *Cluster) Stop() {
	order := func(p *Process) int {
		switch p.Name {
		case "etcd":
			return 2
		case "kube-apiserver":
			return 1
		}
		return 0
	}
	slices.SortStableFunc(c.procs, func(a, b *Process) int { return order(a) - order(b) })
	for _, p := range c.procs {
		p.Stop()
	}
	c.procs = nil
	for _, p := range c.proxies {
		p.Close()
	}
	c.proxies = nil
	if c.env != nil {
		_ = c.env.Stop()
		c.env = nil
	}
}

// adopt restarts etcd and kube-apiserver, as started by envtest, as our own
// children with the same command lines, so that they die with us even when
// we are killed and can be stopped and restarted by PID.
func (c *Cluster) adopt(ctx context.Context) error {
	// Other clusters of this process run the same binaries: each of this
	// one's is told apart by the directory envtest gave it.
	api, err := c.killChild("kube-apiserver", "--cert-dir="+c.env.ControlPlane.APIServer.CertDir)
	if err != nil {
		return err
	}
	etcd, err := c.killChild("etcd", "--data-dir="+c.env.ControlPlane.Etcd.DataDir)
	if err != nil {
		return err
	}
	if err := c.rerun(etcd, "etcd"); err != nil {
		return err
	}
	if err := c.rerun(api, "kube-apiserver"); err != nil {
		return err
	}
	return c.waitReady(ctx, time.Minute)
}

// rerun starts a component again on the ports it had. Between its kill and
// its restart another process may have taken one of them as the source port
// of an outgoing connection: a start that fails with "address already in
// use" is retried for a while, until that connection is gone.
func (c *Cluster) rerun(args []string, name string) error {
	var err error
	for backoff := 100 * time.Millisecond; backoff <= 3200*time.Millisecond; backoff *= 2 {
		if err = c.run(args[0], name, args[1:]...); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		p := c.proc(name)
		c.procs = slices.DeleteFunc(c.procs, func(q *Process) bool { return q == p })
		c.step("%s could not bind its port again; retrying in %s", name, backoff)
		time.Sleep(backoff) // the port's holder is another process: nothing to wait on
	}
	return err
}

// killChild SIGKILLs our child running the named binary with arg on its
// command line, waits for it to be gone and returns its command line.
func (c *Cluster) killChild(name, arg string) ([]string, error) {
	pid, args, err := childProcess(name, arg)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("stopping %s: %w", name, err)
	}
	for processExists(pid) {
		time.Sleep(20 * time.Millisecond) // polling interval of the process exit check
	}
	return args, nil
}

// StopControllerManager SIGKILLs kube-controller-manager (its Job, CronJob,
// garbage collector and TTL controllers stop) and returns a function that
// starts it again with the same command line.
func (c *Cluster) StopControllerManager() (start func() error, err error) {
	p := c.proc("kube-controller-manager")
	if p == nil {
		return nil, fmt.Errorf("kube-controller-manager is not running")
	}
	args := p.Args()
	p.Kill()
	<-p.Done()
	c.procs = slices.DeleteFunc(c.procs, func(q *Process) bool { return q == p })
	c.step("kube-controller-manager stopped")
	return func() error { return c.rerun(args, "kube-controller-manager") }, nil
}

// RestartAPIServer kills kube-apiserver (SIGKILL, a crash) and starts it
// again with the same command line (same port, certificates and etcd):
// clients see connections refused for a while, then watches restart and relist.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	p := c.proc("kube-apiserver")
	if p == nil {
		return fmt.Errorf("kube-apiserver is not running")
	}
	args := p.Args()
	p.Kill()
	c.procs = slices.DeleteFunc(c.procs, func(q *Process) bool { return q == p })
	c.step("kube-apiserver killed; starting it again")
	if err := c.rerun(args, "kube-apiserver"); err != nil {
		return err
	}
	return c.waitReady(ctx, time.Minute)
}

// waitReady waits until the API server answers /readyz.
func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	rc, err := rest.RESTClientFor(withCodec(c.Config))
	if err != nil {
		return fmt.Errorf("creating REST client: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		if err := rc.Get().AbsPath("/readyz").Do(ctx).Error(); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			tail := ""
			if p := c.proc("kube-apiserver"); p != nil {
				tail = "; last lines of its log:\n" + p.Tail(20)
			}
			return fmt.Errorf("kube-apiserver not ready after %s: %w%s", timeout, err, tail)
		}
		time.Sleep(100 * time.Millisecond) // polling interval of the readiness check
	}
}

func withCodec(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	return cfg
}

// childProcess finds this process's child running the named binary, with
// arg on its command line unless arg is empty, and returns its PID and
// command line.
func childProcess(name, arg string) (int, []string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, fmt.Errorf("reading /proc: %w", err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// stat: pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		comm := string(stat[strings.IndexByte(string(stat), '(')+1 : strings.LastIndexByte(string(stat), ')')])
		if len(fields) < 2 || comm != name || fields[1] != strconv.Itoa(self) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			return 0, nil, fmt.Errorf("reading command line of %s: %w", name, err)
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if arg != "" && !slices.Contains(args, arg) {
			continue
		}
		return pid, args, nil
	}
	return 0, nil, fmt.Errorf("no running %s %s started by this process", name, arg)
}

// ChildPID is the PID of this process's child running the named binary.
func ChildPID(name string) (int, error) {
	pid, _, err := childProcess(name, "")
	return pid, err
}

// CPUSeconds is the CPU time (user and system) of a process so far, from
// /proc; 0 once it is gone.
func CPUSeconds(pid int) float64 {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at ") ".
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	var utime, stime float64
	_, _ = fmt.Sscan(fields[11], &utime)
	_, _ = fmt.Sscan(fields[12], &stime)
	return (utime + stime) / 100 // USER_HZ
}

func processExists(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie has exited; only its parent has yet to reap it.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
