package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// createObjects creates the Job and a SafeJob of each ledger length whose
// status writes are measured; untracked adds a twin of each whose
// managedFields were stripped.
func createObjects(ctx context.Context, c client.Client, lengths []int, untracked, patch bool) ([]measured, error) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default"}, Spec: batchv1.JobSpec{
		Template: template(), Completions: ptr.To[int32](20), Parallelism: ptr.To[int32](5), Suspend: ptr.To(true),
		CompletionMode: ptr.To(batchv1.IndexedCompletion)}}
	if err := c.Create(ctx, job); err != nil {
		return nil, fmt.Errorf("creating Job: %w", err)
	}
	job.Status = batchv1.JobStatus{StartTime: &now, Active: 5, Succeeded: 10, CompletedIndexes: "0-9"}
	objects := []measured{{label: "Job", obj: job, change: func(i int) { job.Status.Ready = ptr.To(int32(i % 2)) }}}
	for _, n := range lengths {
		sj := safeJob(n, now)
		status := sj.Status
		if err := c.Create(ctx, sj); err != nil {
			return nil, fmt.Errorf("creating SafeJob: %w", err)
		}
		sj.Status = status
		objects = append(objects, measured{label: fmt.Sprintf("SafeJob, %d entries", n), obj: sj,
			change: func(i int) { sj.Status.Ready = int32(i % 2) }})
		if !patch {
			continue
		}
		pj := safeJob(n, now)
		pstatus := pj.Status
		if err := c.Create(ctx, pj); err != nil {
			return nil, fmt.Errorf("creating SafeJob: %w", err)
		}
		pj.Status = pstatus
		// A patch carries only the change: the status it changes is stored first.
		if err := c.Status().Update(ctx, pj); err != nil {
			return nil, fmt.Errorf("writing the status of SafeJob %s: %w", pj.Name, err)
		}
		objects = append(objects, measured{label: fmt.Sprintf("SafeJob, %d entries, patch", n), obj: pj, patch: true,
			change: func(i int) { pj.Status.Ready = int32(i % 2) }})
	}
	if !untracked {
		return objects, nil
	}
	for _, o := range slices.Clone(objects) {
		twin, err := untrackedTwin(ctx, c, o)
		if err != nil {
			return nil, err
		}
		objects = append(objects, twin)
	}
	return objects, nil
}

// untrackedTwin creates a copy of a measured object and strips its
// managedFields (an update that sets them to one empty entry): the API
// server tracks no fields on later updates of an object that has none, so
// the twin's writes cost what field tracking leaves out.
func untrackedTwin(ctx context.Context, c client.Client, o measured) (measured, error) {
	obj := o.obj.DeepCopyObject().(client.Object)
	obj.SetName(obj.GetName() + "-untracked")
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetManagedFields(nil)
	switch t := obj.(type) { // created without status, as every object is
	case *batchv1.Job:
		t.Status = batchv1.JobStatus{}
		t.Spec.Selector, t.Spec.Template.Labels = nil, nil // the API server's, for the original
	case *batchv1alpha1.SafeJob:
		t.Status = batchv1alpha1.SafeJobStatus{}
	}
	if err := c.Create(ctx, obj); err != nil {
		return measured{}, fmt.Errorf("creating the untracked twin of %s: %w", o.label, err)
	}
	strip := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`))
	if err := c.Patch(ctx, obj, strip); err != nil {
		return measured{}, fmt.Errorf("stripping managedFields of %s: %w", o.label, err)
	}
	twin := measured{label: o.label + ", untracked", obj: obj}
	switch t := obj.(type) {
	case *batchv1.Job:
		t.Status = *o.obj.(*batchv1.Job).Status.DeepCopy()
		twin.change = func(i int) { t.Status.Ready = ptr.To(int32(i % 2)) }
	case *batchv1alpha1.SafeJob:
		t.Status = *o.obj.(*batchv1alpha1.SafeJob).Status.DeepCopy()
		twin.change = func(i int) { t.Status.Ready = int32(i % 2) }
	}
	return twin, nil
}

// measured is an object whose status writes are measured, and what they
// cost in each round: kube-apiserver's and etcd's CPU ms per write.
type measured struct {
	label  string
	obj    client.Object
	change func(int)
	// patch writes the status as the operator does: a JSON merge patch of
	// the change, with the resourceVersion (else: an update).
	patch bool
	samples
}

// measure makes writes status writes of the object (after a few to warm
// up) and records the CPU they cost kube-apiserver and etcd, per write.
func (m *measured) measure(ctx context.Context, c client.Client, pids pids, writes int) error {
	write := func(i int) error {
		before := m.obj.DeepCopyObject().(client.Object)
		m.change(i)
		m.obj.SetManagedFields(nil) // as the operator writes: its cache keeps none
		var err error
		if m.patch {
			before.SetManagedFields(nil)
			err = c.Status().Patch(ctx, m.obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		} else {
			err = c.Status().Update(ctx, m.obj)
		}
		if err != nil {
			return fmt.Errorf("%s: status write: %w", m.label, err)
		}
		if strings.HasSuffix(m.label, "untracked") && len(m.obj.GetManagedFields()) > 0 {
			return fmt.Errorf("%s: the API server tracked fields again (%d entries)", m.label, len(m.obj.GetManagedFields()))
		}
		return nil
	}
	for i := range 20 {
		if err := write(i); err != nil {
			return err
		}
	}
	return m.sample(pids, writes, func() error {
		for i := range writes {
			if err := write(i); err != nil {
				return err
			}
		}
		return nil
	})
}

// safeJob is an Indexed SafeJob like the benchmark's W3 jobs, whose ledger
// lists n entries: launches and successes of consecutive indexes.
func safeJob(n int, now metav1.Time) *batchv1alpha1.SafeJob {
	name := fmt.Sprintf("sj-%d-%d", n, rand.IntN(1<<20))
	sj := &batchv1alpha1.SafeJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: batchv1alpha1.SafeJobSpec{Template: template(), Completions: ptr.To[int32](int32(n/2 + 5)),
			Parallelism: ptr.To[int32](5), CompletionMode: batchv1alpha1.IndexedCompletion}}
	entries := make([]batchv1alpha1.LedgerEntry, 0, n)
	for k := range n {
		index, typ := int32(k/2), batchv1alpha1.EntryLaunched
		if k%2 == 1 {
			typ = batchv1alpha1.EntrySucceeded
		}
		entries = append(entries, batchv1alpha1.LedgerEntry{Type: typ, Pod: jobs.PodName(name, index, 0), Index: index, Time: now})
	}
	sj.Status = batchv1alpha1.SafeJobStatus{
		Ledger:    ledger.Append(&batchv1alpha1.Ledger{}, entries),
		StartTime: &now,
		Active:    5,
		Succeeded: int32(n / 2),
		Conditions: []metav1.Condition{{Type: batchv1alpha1.ConditionLedgerValid, Status: metav1.ConditionTrue,
			Reason: batchv1alpha1.ReasonLedgerOK, Message: "Ledger is valid", LastTransitionTime: now}},
	}
	return sj
}

func template() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kwok.safejob.dev/duration": "1s"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}
