package main

import (
	"context"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// creation is a kind of job whose creates are measured, as the benchmark's
// W1 creates them (one pod, the same template), and what they cost in each
// round: kube-apiserver's and etcd's CPU ms per create.
type creation struct {
	name, label string
	object      func(name string) client.Object
	bytes       int
	samples
}

// creationKinds are a Job and a SafeJob of one pod.
func creationKinds() []creation {
	return []creation{
		{name: "job", label: "Job create, one pod", object: func(name string) client.Object {
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
				Spec: batchv1.JobSpec{Template: template(), Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)}}
		}},
		{name: "sj", label: "SafeJob create, one pod", object: func(name string) client.Object {
			return &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
				Spec: batchv1alpha1.SafeJobSpec{Template: template(), Completions: ptr.To[int32](1), Parallelism: ptr.To[int32](1)}}
		}},
	}
}

// measure creates n jobs of the kind (measured) and deletes them again.
// No controller runs: nothing else writes them meanwhile.
func (ck *creation) measure(ctx context.Context, c client.Client, pids pids, n, round int) error {
	objs := make([]client.Object, n)
	for i := range objs {
		objs[i] = ck.object(fmt.Sprintf("create-%s-%d-%d", ck.name, round, i))
	}
	if raw, err := json.Marshal(objs[0]); err == nil {
		ck.bytes = len(raw)
	}
	err := ck.sample(pids, n, func() error {
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				return fmt.Errorf("%s %s: %w", ck.label, o.GetName(), err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, o := range objs {
		// In the background: no garbage collector runs here to take an
		// orphaning finalizer off a Job.
		if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return fmt.Errorf("deleting %s: %w", o.GetName(), err)
		}
	}
	return nil
}
