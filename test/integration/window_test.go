package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/controller"
	safejobtestutil "github.com/safejob/safejob/test/testutil"
)

// podsIn lists the pods of namespace ns.
func podsIn(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := k8s.List(context.Background(), pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// setPodStatus plays the kubelet (or the scheduler) for one pod.
func setPodStatus(t *testing.T, pod *corev1.Pod, change func(*corev1.PodStatus)) {
	t.Helper()
	p := pod.DeepCopy()
	change(&p.Status)
	if err := k8s.Status().Update(context.Background(), p); err != nil {
		t.Fatalf("updating the status of pod %s: %v", pod.Name, err)
	}
}

// waitPods waits until want pods exist in ns, fails if there are more, and
// returns them.
func waitPods(t *testing.T, ns string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, 30*time.Second, "pods in "+ns, func() (bool, error) {
		pods = podsIn(t, ns)
		return len(pods) >= want, nil
	})
	if len(pods) != want {
		t.Fatalf("%d pods, want %d", len(pods), want)
	}
	return pods
}

// waitWindow waits until the launch window holds pods places and SafeJobs
// wait for one.
func waitWindow(t *testing.T, m *controller.Metrics, held, waiting int) {
	t.Helper()
	waitFor(t, 30*time.Second, "the launch window", func() (bool, error) {
		return testutil.ToFloat64(m.LaunchWindowHeld) == float64(held) && testutil.ToFloat64(m.LaunchWindowWaiting) == float64(waiting), nil
	})
}

// TestLaunchWindow checks that the operator keeps no more of its pods
// waiting to start than its launch window, across SafeJobs: a SafeJob
// beyond it writes nothing and creates no pod until a pod starts, or the
// scheduler refuses one, and every SafeJob then runs to Complete.
func TestLaunchWindow(t *testing.T) {
	skipWithoutPacing(t)
	t.Parallel()
	ns := newNamespace(t)
	var m *controller.Metrics
	startManager(t, ns, managerOptions{launchWindow: 1, launchWindowTimeout: time.Hour, metrics: &m})
	names := []string{"a", "b", "c"}
	for _, name := range names {
		if err := k8s.Create(context.Background(), safejobtestutil.MakeSafeJob(name, ns).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	waitWindow(t, m, 1, 2)
	first := waitPods(t, ns, 1)[0]
	for _, name := range names {
		sj := &batchv1alpha1.SafeJob{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sj); err != nil {
			t.Fatal(err)
		}
		if metav1.IsControlledBy(&first, sj) {
			continue
		}
		// A SafeJob waiting its turn costs no status write.
		if sj.Status.StartTime != nil || sj.Status.Ledger.Seq != 0 {
			t.Errorf("SafeJob %s waits for the window yet has status written: %+v", name, sj.Status)
		}
	}

	setPodStatus(t, &first, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	waitWindow(t, m, 1, 1)
	var second corev1.Pod
	for _, p := range waitPods(t, ns, 2) {
		if p.Name != first.Name {
			second = p
		}
	}
	// The scheduler finds no node for it: it waits for the cluster, not a
	// kubelet, and gives up its place.
	setPodStatus(t, &second, func(s *corev1.PodStatus) {
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.Now()})
	})
	waitWindow(t, m, 1, 0)
	waitPods(t, ns, 3)

	for _, p := range podsIn(t, ns) {
		setPodStatus(t, &p, func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	}
	for _, name := range names {
		if got := waitFinished(t, client.ObjectKey{Namespace: ns, Name: name}, time.Minute); !conditionTrue(got, batchv1alpha1.ConditionComplete) {
			t.Errorf("SafeJob %s: want Complete, got conditions %+v", name, got.Status.Conditions)
		}
	}
	waitWindow(t, m, 0, 0)
}

// TestLaunchWindowTimeout checks that a pod that never starts holds its
// place no longer than the window's timeout: the SafeJob behind it gets its
// pod then, not before.
func TestLaunchWindowTimeout(t *testing.T) {
	skipWithoutPacing(t)
	t.Parallel()
	ns := newNamespace(t)
	var m *controller.Metrics
	const timeout = 3 * time.Second
	startManager(t, ns, managerOptions{launchWindow: 1, launchWindowTimeout: timeout, metrics: &m})
	for _, name := range []string{"a", "b"} {
		if err := k8s.Create(context.Background(), safejobtestutil.MakeSafeJob(name, ns).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	waitWindow(t, m, 1, 1)
	// The pod made first is the one whose place timed out; the other's is
	// listed here whenever it came, as a slow test may see both at once.
	pods := waitPods(t, ns, 2)
	first := slices.MinFunc(pods, func(a, b corev1.Pod) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	for _, p := range pods {
		if gap := p.CreationTimestamp.Sub(first.CreationTimestamp.Time); p.Name != first.Name && gap < timeout-time.Second {
			// Creation times are whole seconds: a second is lost to them.
			t.Errorf("pod %s created %s after %s, before the window's timeout of %s", p.Name, gap, first.Name, timeout)
		}
	}
}

// TestLaunchWindowDeletedWhileWaiting checks that a SafeJob deleted while it
// waits for a place leaves the line: the place that frees goes to the one
// behind it, and nothing is launched for the deleted one.
func TestLaunchWindowDeletedWhileWaiting(t *testing.T) {
	skipWithoutPacing(t)
	t.Parallel()
	ns := newNamespace(t)
	var m *controller.Metrics
	startManager(t, ns, managerOptions{launchWindow: 1, launchWindowTimeout: time.Hour, metrics: &m})
	for _, name := range []string{"a", "b", "c"} {
		if err := k8s.Create(context.Background(), safejobtestutil.MakeSafeJob(name, ns).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	waitWindow(t, m, 1, 2)
	first := waitPods(t, ns, 1)[0]
	var waiting []string
	for _, name := range []string{"a", "b", "c"} {
		if first.Labels[batchv1alpha1.SafeJobNameLabel] != name {
			waiting = append(waiting, name)
		}
	}
	gone := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: waiting[0]}}
	if err := k8s.Delete(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	waitWindow(t, m, 1, 1)
	setPodStatus(t, &first, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	waitWindow(t, m, 1, 0)
	for _, p := range waitPods(t, ns, 2) {
		if owner := p.Labels[batchv1alpha1.SafeJobNameLabel]; owner == waiting[0] {
			t.Errorf("pod %s launched for SafeJob %s, deleted while it waited", p.Name, owner)
		}
	}
}

// TestLaunchWindowIgnoresStrangers checks that a pod someone else creates
// naming a SafeJob as its controller, and which never starts, takes no place
// in the launch window: the SafeJobs after it launch as if it were not there.
func TestLaunchWindowIgnoresStrangers(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	var m *controller.Metrics
	startManager(t, ns, managerOptions{launchWindow: 1, launchWindowTimeout: time.Hour, metrics: &m})
	owner := safejobtestutil.MakeSafeJob("owner", ns).Suspend(true).Obj()
	if err := k8s.Create(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	stranger := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger",
			Labels:          map[string]string{batchv1alpha1.SafeJobNameLabel: owner.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, batchv1alpha1.GroupVersion.WithKind("SafeJob"))}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if err := k8s.Create(context.Background(), stranger); err != nil {
		t.Fatal(err)
	}
	// Each SafeJob gets its pod, and once that pod runs the window holds
	// nothing: the stranger, Pending all along, holds no place, whether its
	// create reached the operator before the first SafeJob or after.
	for _, name := range []string{"a", "b"} {
		if err := k8s.Create(context.Background(), safejobtestutil.MakeSafeJob(name, ns).Obj()); err != nil {
			t.Fatal(err)
		}
		var pod *corev1.Pod
		waitFor(t, 30*time.Second, "the pod of SafeJob "+name, func() (bool, error) {
			for _, p := range podsIn(t, ns) {
				if p.Labels[batchv1alpha1.SafeJobNameLabel] == name {
					pod = &p
					return true, nil
				}
			}
			return false, nil
		})
		setPodStatus(t, pod, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
		waitWindow(t, m, 0, 0)
	}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(stranger), stranger); err != nil {
		t.Fatalf("the stranger's pod: %v", err)
	}
}

// heldOutcomesWait starts three SafeJobs under a launch window of one, lets
// the first one's pod succeed, and waits until its success is held while
// the third waits (the second has launched). It returns the first two pods.
func heldOutcomesWait(t *testing.T, ns string, m *controller.Metrics) (first, second corev1.Pod) {
	t.Helper()
	for _, name := range []string{"a", "b", "c"} {
		if err := k8s.Create(context.Background(), safejobtestutil.MakeSafeJob(name, ns).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	waitWindow(t, m, 1, 2)
	first = waitPods(t, ns, 1)[0]
	setPodStatus(t, &first, func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	waitFor(t, 30*time.Second, "the first success held", func() (bool, error) {
		return testutil.ToFloat64(m.LaunchWindowHeldOutcomes) == 1, nil
	})
	waitWindow(t, m, 1, 1)
	for _, p := range waitPods(t, ns, 2) {
		if p.Name != first.Name {
			second = p
		}
	}
	return first, second
}

// TestLaunchWindowHoldsOutcomes checks that while a SafeJob waits for the
// launch window, a write that records nothing but another SafeJob's pod
// success is held, and is made as soon as no SafeJob waits.
func TestLaunchWindowHoldsOutcomes(t *testing.T) {
	skipWithoutPacing(t)
	t.Parallel()
	ns := newNamespace(t)
	var m *controller.Metrics
	startManager(t, ns, managerOptions{launchWindow: 1, launchWindowTimeout: time.Hour, outcomeHold: time.Hour, metrics: &m})
	first, second := heldOutcomesWait(t, ns, m)
	owner := client.ObjectKey{Namespace: ns, Name: first.Labels[batchv1alpha1.SafeJobNameLabel]}
	sj := &batchv1alpha1.SafeJob{}
	if err := k8s.Get(context.Background(), owner, sj); err != nil {
		t.Fatal(err)
	}
	if sj.Status.Succeeded != 0 || conditionTrue(sj, batchv1alpha1.ConditionComplete) {
		t.Fatalf("SafeJob %s recorded its success while another waits: %+v", owner.Name, sj.Status)
	}

	// The second pod succeeds too: the third SafeJob gets the room, none
	// waits, and both successes are recorded.
	setPodStatus(t, &second, func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	for _, p := range []corev1.Pod{first, second} {
		key := client.ObjectKey{Namespace: ns, Name: p.Labels[batchv1alpha1.SafeJobNameLabel]}
		if got := waitFinished(t, key, 30*time.Second); !conditionTrue(got, batchv1alpha1.ConditionComplete) || got.Status.Succeeded != 1 {
			t.Errorf("SafeJob %s: want Complete with 1 succeeded, got %+v", key.Name, got.Status)
		}
	}
	waitFor(t, 30*time.Second, "no success held", func() (bool, error) {
		return testutil.ToFloat64(m.LaunchWindowHeldOutcomes) == 0, nil
	})
}

// TestLaunchWindowOutcomeHoldLimit checks that a success is held no longer
// than the outcome hold while SafeJobs keep waiting.
func TestLaunchWindowOutcomeHoldLimit(t *testing.T) {
	skipWithoutPacing(t)
	t.Parallel()
	ns := newNamespace(t)
	var m *controller.Metrics
	startManager(t, ns, managerOptions{launchWindow: 1, launchWindowTimeout: time.Hour, outcomeHold: 5 * time.Second, metrics: &m})
	first, _ := heldOutcomesWait(t, ns, m)
	owner := client.ObjectKey{Namespace: ns, Name: first.Labels[batchv1alpha1.SafeJobNameLabel]}
	if got := waitFinished(t, owner, 30*time.Second); !conditionTrue(got, batchv1alpha1.ConditionComplete) {
		t.Fatalf("SafeJob %s: want Complete, got conditions %+v", owner.Name, got.Status.Conditions)
	}
	// Recorded by the limit: the third SafeJob still waits.
	if waiting := testutil.ToFloat64(m.LaunchWindowWaiting); waiting != 1 {
		t.Errorf("%v SafeJobs wait for the window, want 1", waiting)
	}
}
