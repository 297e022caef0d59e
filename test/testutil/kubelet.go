package testutil

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/safejob/safejob/internal/ledger/jobs"
)

// Fate is what the fake kubelet does with a running pod.
type Fate struct {
	// Hold keeps the pod running.
	Hold bool
	// Fail ends the pod Failed with ExitCode; otherwise it Succeeds.
	Fail     bool
	ExitCode int32
	// Conditions are added to a failed pod (e.g. DisruptionTarget).
	Conditions []corev1.PodConditionType
	// OnDelete is what a pod being deleted does: nil ends it Failed with
	// exit code 143 at once; Hold keeps it terminating (a long grace period).
	OnDelete *Fate
}

// Kubelet plays the node for the pods of one namespace: Pending pods start
// Running and Ready, running pods end as their Fate says, pods being deleted
// end Failed, and with DeleteTerminal every finished pod is deleted at once
// (as pod GC at --terminated-pod-gc-threshold=1 would).
type Kubelet struct {
	Client         client.Client
	DeleteTerminal bool

	mu        sync.Mutex
	fate      func(*corev1.Pod) Fate
	active    map[string]bool
	maxActive int
	succeeded map[string]bool
	queue     workqueue.TypedRateLimitingInterface[types.NamespacedName]
	namespace string
}

// StartKubelet runs a kubelet for namespace ns until the test ends.
func StartKubelet(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns string, fate func(*corev1.Pod) Fate, deleteTerminal bool) *Kubelet {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("kubelet client: %v", err)
	}
	k := &Kubelet{Client: c, namespace: ns, DeleteTerminal: deleteTerminal, fate: fate, active: map[string]bool{}, succeeded: map[string]bool{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]())}
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatalf("kubelet cache: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); k.queue.ShutDown() })
	inf, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatalf("kubelet informer: %v", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { k.observe(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.observe(pod, true)
			}
		},
	}); err != nil {
		t.Fatalf("kubelet handler: %v", err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatalf("kubelet cache did not sync")
	}
	for range 4 {
		go k.work(ctx)
	}
	return k
}

// SetFate changes the fate of pods from now on and revisits every pod.
func (k *Kubelet) SetFate(fate func(*corev1.Pod) Fate) {
	k.mu.Lock()
	k.fate = fate
	names := make([]string, 0, len(k.active))
	for name := range k.active {
		names = append(names, name)
	}
	k.mu.Unlock()
	for _, name := range names {
		k.queue.Add(types.NamespacedName{Namespace: k.namespace, Name: name})
	}
}

// MaxActive is the most pods seen running (not terminal) at once.
func (k *Kubelet) MaxActive() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.maxActive
}

// Succeeded lists the pods this kubelet finished successfully.
func (k *Kubelet) Succeeded() map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]bool{}
	for n := range k.succeeded {
		out[n] = true
	}
	return out
}

func (k *Kubelet) observe(pod *corev1.Pod, deleted bool) {
	k.mu.Lock()
	if deleted || jobs.IsTerminal(pod) {
		delete(k.active, pod.Name)
	} else {
		k.active[pod.Name] = true
		k.maxActive = max(k.maxActive, len(k.active))
	}
	k.mu.Unlock()
	if !deleted {
		k.queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
	}
}

func (k *Kubelet) work(ctx context.Context) {
	for {
		key, shutdown := k.queue.Get()
		if shutdown {
			return
		}
		if err := k.step(ctx, key); err != nil && ctx.Err() == nil {
			k.queue.AddRateLimited(key)
		} else {
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

// step moves one pod one step along its life.
func (k *Kubelet) step(ctx context.Context, key types.NamespacedName) error {
	pod := &corev1.Pod{}
	if err := k.Client.Get(ctx, key, pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	k.mu.Lock()
	fate := k.fate(pod)
	k.mu.Unlock()
	switch {
	case jobs.IsTerminal(pod):
		if k.DeleteTerminal && pod.DeletionTimestamp == nil {
			return client.IgnoreNotFound(k.Client.Delete(ctx, pod))
		}
		return nil
	case pod.DeletionTimestamp != nil && fate.OnDelete == nil:
		return k.finish(ctx, pod, Fate{Fail: true, ExitCode: 143})
	case pod.DeletionTimestamp != nil && fate.OnDelete.Hold:
		return nil
	case pod.DeletionTimestamp != nil:
		return k.finish(ctx, pod, *fate.OnDelete)
	case pod.Status.Phase != corev1.PodRunning:
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		return ignoreConflict(k.Client.Status().Update(ctx, pod))
	case fate.Hold:
		return nil
	default:
		return k.finish(ctx, pod, fate)
	}
}

func (k *Kubelet) finish(ctx context.Context, pod *corev1.Pod, fate Fate) error {
	pod.Status.Phase = corev1.PodSucceeded
	code := int32(0)
	if fate.Fail {
		pod.Status.Phase, code = corev1.PodFailed, fate.ExitCode
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	for _, c := range fate.Conditions {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue})
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "busybox",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.Now()}}}}
	if err := k.Client.Status().Update(ctx, pod); err != nil {
		return ignoreConflict(fmt.Errorf("finishing pod %s: %w", pod.Name, err))
	}
	if !fate.Fail {
		k.mu.Lock()
		k.succeeded[pod.Name] = true
		k.mu.Unlock()
	}
	if k.DeleteTerminal {
		return client.IgnoreNotFound(k.Client.Delete(ctx, pod))
	}
	return nil
}

// ignoreConflict turns a conflict into a retry through the next watch event.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
