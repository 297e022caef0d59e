package cluster

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	"github.com/safejob/safejob/test/testutil"
)

// MultiKueueCheck is the AdmissionCheck (and MultiKueueConfig) that
// ConnectMultiKueue makes on the manager.
const MultiKueueCheck = "multikueue"

// ConnectMultiKueue lets the manager cluster's Kueue (started with
// Options.MultiKueue) dispatch to the workers, by name, as
// docs/multikueue.md tells an admin: on each worker config/multikueue/worker
// and a token of its ServiceAccount; on the manager a kubeconfig Secret per
// worker embedding that token and the worker's CA, a MultiKueueCluster per
// worker, one MultiKueueConfig of them all and the AdmissionCheck
// MultiKueueCheck. It returns once every cluster and the check are active.
// servers, when it names a worker, is the address MultiKueue reaches it at
// (a proxy) instead of its API server's.
func ConnectMultiKueue(ctx context.Context, manager *Cluster, workers map[string]*Cluster, servers map[string]string) error {
	mcl, err := client.New(manager.Config, client.Options{Scheme: Scheme()})
	if err != nil {
		return fmt.Errorf("creating the manager's client: %w", err)
	}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}}
	names := slices.Sorted(maps.Keys(workers))
	for _, name := range names {
		server := servers[name]
		if server == "" {
			server = workers[name].Config.Host
		}
		raw, err := multiKueueKubeconfig(ctx, workers[name], server)
		if err != nil {
			return err
		}
		secret := name + "-kubeconfig"
		objs = append(objs,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: "kueue-system"}, Data: map[string][]byte{"kubeconfig": raw}},
			&kueue.MultiKueueCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.MultiKueueClusterSpec{
				ClusterSource: kueue.ClusterSource{KubeConfig: &kueue.KubeConfig{LocationType: kueue.SecretLocationType, Location: secret}}}})
	}
	objs = append(objs,
		&kueue.MultiKueueConfig{ObjectMeta: metav1.ObjectMeta{Name: MultiKueueCheck}, Spec: kueue.MultiKueueConfigSpec{Clusters: names}},
		&kueue.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: MultiKueueCheck}, Spec: kueue.AdmissionCheckSpec{
			ControllerName: kueue.MultiKueueControllerName,
			Parameters: &kueue.AdmissionCheckParametersReference{APIGroup: kueue.SchemeGroupVersion.Group, Kind: "MultiKueueConfig",
				Name: MultiKueueCheck}}})
	for _, obj := range objs {
		if err := mcl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s on the manager: %w", obj.GetName(), err)
		}
	}
	return waitMultiKueueActive(ctx, mcl, manager, names)
}

// waitMultiKueueActive waits until the MultiKueueClusters of names and the
// admission check are active.
func waitMultiKueueActive(ctx context.Context, mcl client.Client, manager *Cluster, names []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		inactive := ""
		for _, name := range names {
			mkc := &kueue.MultiKueueCluster{}
			if mcl.Get(ctx, client.ObjectKey{Name: name}, mkc) != nil || !meta.IsStatusConditionTrue(mkc.Status.Conditions, kueue.MultiKueueClusterActive) {
				inactive = fmt.Sprintf("MultiKueueCluster %s: %+v", name, mkc.Status.Conditions)
			}
		}
		ac := &kueue.AdmissionCheck{}
		if inactive == "" && (mcl.Get(ctx, client.ObjectKey{Name: MultiKueueCheck}, ac) != nil ||
			!meta.IsStatusConditionTrue(ac.Status.Conditions, kueue.AdmissionCheckActive)) {
			inactive = fmt.Sprintf("AdmissionCheck %s: %+v", MultiKueueCheck, ac.Status.Conditions)
		}
		if inactive == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not active after 2m: %s; last lines of the manager's Kueue:\n%s", inactive, manager.proc("kueue").Tail(20))
		}
		time.Sleep(200 * time.Millisecond) // polling interval of the readiness check
	}
}

// multiKueueKubeconfig applies config/multikueue/worker on the worker and
// returns a kubeconfig of its ServiceAccount: server, CA data and a token.
func multiKueueKubeconfig(ctx context.Context, worker *Cluster, server string) ([]byte, error) {
	wcl, err := client.New(worker.Config, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("creating the worker's client: %w", err)
	}
	if err := wcl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating kueue-system on the worker: %w", err)
	}
	if err := testutil.CreateManifests(ctx, wcl, filepath.Join(worker.opts.Root, "config", "multikueue", "worker", "role.yaml")); err != nil {
		return nil, err
	}
	// MultiKueue watches every kind the manager's Kueue dispatches: here
	// batch/v1 Jobs too (integrations.frameworks), which Kueue's own worker
	// role grants; SafeJob's role grants SafeJobs and Workloads.
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kueue-multikueue-batch-jobs"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "delete", "get", "list", "watch"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs/status"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kueue-multikueue-batch-jobs"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kueue-multikueue-batch-jobs"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "safejob-multikueue", Namespace: "kueue-system"}}},
	} {
		if err := wcl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %s on the worker: %w", obj.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(worker.Config)
	if err != nil {
		return nil, fmt.Errorf("creating the worker's clientset: %w", err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kueue-system").CreateToken(ctx, "safejob-multikueue",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}},
		metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for MultiKueue on the worker: %w", err)
	}
	raw, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"worker": {Server: server, CertificateAuthorityData: worker.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"multikueue": {Token: tr.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"worker": {Cluster: "worker", AuthInfo: "multikueue"}},
		CurrentContext: "worker",
	})
	if err != nil {
		return nil, fmt.Errorf("writing the worker's kubeconfig: %w", err)
	}
	return raw, nil
}

// MultiKueueQueues makes, in namespace ns, LocalQueue name on every
// cluster: on the workers over a ClusterQueue of cpu CPUs, on the manager
// over one of the same quota with the MultiKueue admission check. The
// ClusterQueues are named after it too, their flavor is "default".
func MultiKueueQueues(ctx context.Context, manager *Cluster, workers []*Cluster, ns, name string, cpu int) error {
	for _, c := range append([]*Cluster{manager}, workers...) {
		cl, err := client.New(c.Config, client.Options{Scheme: Scheme()})
		if err != nil {
			return fmt.Errorf("creating client: %w", err)
		}
		cq := &kueue.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueue.ClusterQueueSpec{
			NamespaceSelector: &metav1.LabelSelector{},
			ResourceGroups: []kueue.ResourceGroup{{CoveredResources: []corev1.ResourceName{corev1.ResourceCPU}, Flavors: []kueue.FlavorQuotas{
				{Name: "default", Resources: []kueue.ResourceQuota{{Name: corev1.ResourceCPU, NominalQuota: *resource.NewQuantity(int64(cpu), resource.DecimalSI)}}}}}},
		}}
		if c == manager {
			cq.Spec.AdmissionChecksStrategy = &kueue.AdmissionChecksStrategy{AdmissionChecks: []kueue.AdmissionCheckStrategyRule{{Name: MultiKueueCheck}}}
		}
		for _, obj := range []client.Object{
			&kueue.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
			cq,
			&kueue.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: kueue.LocalQueueSpec{ClusterQueue: kueue.ClusterQueueReference(name)}},
		} {
			if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s: %w", obj.GetName(), err)
			}
		}
	}
	return nil
}
