package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/safejob/safejob/test/testutil"
)

// TestAuditCountsCreatesOfCancelledRequests pins what the tests' pod
// accounting relies on when a client dies mid-request (an operator killed
// by a test): kube-apiserver answers a create whose request context ended
// with a 504 and may store the pod all the same. Creates with client
// deadlines short enough to end some of them mid-write are followed by a
// second create of every name, which is refused as AlreadyExists where the
// first stored the pod and stores it where the first did not: every name
// then has one pod, and the audit log must count one create of each.
func TestAuditCountsCreatesOfCancelledRequests(t *testing.T) {
	ns := newNamespace(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	}
	failed := map[string]bool{}
	names := 0
	storedDespiteError := 0
	for round := 0; storedDespiteError == 0 && round < 5; round++ {
		first := names
		for i := range 200 {
			name := fmt.Sprintf("p-%d", names)
			names++
			// Some end before the write, some during it; a slower API
			// server (a busy machine) gets longer ones in each round.
			deadline := time.Duration(200+(i%40)*100) * time.Microsecond << round
			cctx, cancel := context.WithTimeout(ctx, deadline)
			if _, err := cs.CoreV1().Pods(ns).Create(cctx, pod(name), metav1.CreateOptions{}); err != nil {
				failed[name] = true
			}
			cancel()
		}
		for i := first; i < names; i++ {
			name := fmt.Sprintf("p-%d", i)
			_, err := cs.CoreV1().Pods(ns).Create(ctx, pod(name), metav1.CreateOptions{})
			switch {
			case apierrors.IsAlreadyExists(err):
				if failed[name] {
					storedDespiteError++
				}
			case err != nil:
				t.Fatalf("creating %s again: %v", name, err)
			}
		}
	}
	if storedDespiteError == 0 {
		t.Fatalf("no create of %d answered the client with an error yet stored its pod: the case this test is for did not occur", names)
	}
	creates, err := testutil.PodCreates(auditLog, ns)
	if err != nil {
		t.Fatal(err)
	}
	for i := range names {
		if name := fmt.Sprintf("p-%d", i); creates[name] != 1 {
			t.Errorf("pod %s exists once, the audit log counts %d creates of it (the first answered with an error: %t)",
				name, creates[name], failed[name])
		}
	}
	if len(creates) != names {
		t.Errorf("the audit log counts %d pods created, %d exist", len(creates), names)
	}
	t.Logf("%d pods, %d creates answered with an error, %d of them stored their pod", names, len(failed), storedDespiteError)
}
