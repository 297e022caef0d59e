package testutil

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// IncompleteSafeJobs describes the first shown SafeJobs by name in
// namespace that are not Complete (Failed ones among them), read from the
// API server: each one's true conditions and counts, the launches its
// ledger holds open, and its pods with phase, node and finalizers. That
// tells a SafeJob that never launched from a launch never created, a pod
// never started and an outcome never recorded, when a run or a test finds
// SafeJobs stuck.
func IncompleteSafeJobs(ctx context.Context, cl client.Client, namespace string, shown int) string {
	var list batchv1alpha1.SafeJobList
	if err := cl.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return fmt.Sprintf("listing SafeJobs: %v", err)
	}
	return describeIncomplete(ctx, cl, namespace, incomplete(list.Items, safeJobStall), shown)
}

// IncompleteJobs is IncompleteSafeJobs for batch/v1 Jobs: their true
// conditions, counts and pods.
func IncompleteJobs(ctx context.Context, cl client.Client, namespace string, shown int) string {
	var list batchv1.JobList
	if err := cl.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return fmt.Sprintf("listing Jobs: %v", err)
	}
	return describeIncomplete(ctx, cl, namespace, incomplete(list.Items, jobStall), shown)
}

// incomplete describes the items that describe reports incomplete.
func incomplete[T any](items []T, describe func(*T) (stalledJob, bool)) []stalledJob {
	var out []stalledJob
	for i := range items {
		if j, ok := describe(&items[i]); ok {
			out = append(out, j)
		}
	}
	return out
}

// describeIncomplete reads the pods of the first shown incomplete jobs by
// name and describes them.
func describeIncomplete(ctx context.Context, cl client.Client, namespace string, all []stalledJob, shown int) string {
	slices.SortFunc(all, func(a, b stalledJob) int { return cmp.Compare(a.name, b.name) })
	first := all[:min(len(all), shown)]
	pods, err := podsOf(ctx, cl, namespace, first)
	if err != nil {
		return err.Error()
	}
	return describeStall(len(all), first, pods)
}

// stalledJob is what is reported of one incomplete job.
type stalledJob struct {
	name, uid string
	// state: its true conditions, counts and, for a SafeJob, open launches.
	state string
}

// safeJobStall describes a SafeJob that is not Complete; false when it is.
func safeJobStall(sj *batchv1alpha1.SafeJob) (stalledJob, bool) {
	if meta.IsStatusConditionTrue(sj.Status.Conditions, batchv1alpha1.ConditionComplete) {
		return stalledJob{}, false
	}
	var conds []string
	for _, c := range sj.Status.Conditions {
		if c.Status == metav1.ConditionTrue {
			conds = append(conds, c.Type)
		}
	}
	open := "ledger unreadable"
	if st, err := jobs.Replay(&sj.Status.Ledger); err == nil {
		refs := make([]jobs.PodRef, 0, len(st.Open))
		for _, r := range st.Open {
			refs = append(refs, r)
		}
		slices.SortFunc(refs, func(a, b jobs.PodRef) int { return cmp.Compare(a.Seq, b.Seq) })
		names := make([]string, 0, len(refs))
		for _, r := range refs {
			names = append(names, fmt.Sprintf("%s at %s", r.Name, r.Time.Format(time.TimeOnly)))
		}
		open = fmt.Sprintf("ledger seq %d, open [%s]", st.Seq, strings.Join(names, " "))
	}
	return stalledJob{name: sj.Name, uid: string(sj.UID), state: fmt.Sprintf("conditions [%s], active %d, succeeded %d, %s",
		strings.Join(conds, " "), sj.Status.Active, sj.Status.Succeeded, open)}, true
}

// jobStall describes a Job that is not Complete; false when it is.
func jobStall(j *batchv1.Job) (stalledJob, bool) {
	var conds []string
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		if c.Type == batchv1.JobComplete {
			return stalledJob{}, false
		}
		conds = append(conds, string(c.Type))
	}
	uncounted := 0
	if u := j.Status.UncountedTerminatedPods; u != nil {
		uncounted = len(u.Succeeded) + len(u.Failed)
	}
	return stalledJob{name: j.Name, uid: string(j.UID), state: fmt.Sprintf("conditions [%s], active %d, succeeded %d, uncounted %d",
		strings.Join(conds, " "), j.Status.Active, j.Status.Succeeded, uncounted)}, true
}

// podsOf lists, page by page, the pods whose controller is one of the jobs,
// by the job's UID.
func podsOf(ctx context.Context, cl client.Client, namespace string, of []stalledJob) (map[string][]corev1.Pod, error) {
	uids := map[string]bool{}
	for _, j := range of {
		uids[j.uid] = true
	}
	out := map[string][]corev1.Pod{}
	if len(uids) == 0 {
		return out, nil
	}
	cont := ""
	for {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(namespace), client.Limit(500), client.Continue(cont)); err != nil {
			return nil, fmt.Errorf("listing pods of unfinished jobs: %w", err)
		}
		for _, pod := range pods.Items {
			if ref := metav1.GetControllerOf(&pod); ref != nil && uids[string(ref.UID)] {
				out[string(ref.UID)] = append(out[string(ref.UID)], pod)
			}
		}
		if cont = pods.Continue; cont == "" {
			return out, nil
		}
	}
}

// describeStall says how many jobs are not Complete and, for those shown,
// their state and their pods.
func describeStall(total int, shown []stalledJob, pods map[string][]corev1.Pod) string {
	if total == 0 {
		return "every job is Complete by now"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d not Complete", total)
	if total > len(shown) {
		fmt.Fprintf(&b, ", the first %d", len(shown))
	}
	for _, j := range shown {
		fmt.Fprintf(&b, "; %s: %s; pods:", j.name, j.state)
		mine := pods[j.uid]
		slices.SortFunc(mine, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
		if len(mine) == 0 {
			b.WriteString(" none")
		}
		for _, p := range mine {
			fmt.Fprintf(&b, " %s %s node=%q finalizers=%v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Finalizers)
			if p.DeletionTimestamp != nil {
				b.WriteString(" deleting")
			}
		}
	}
	return b.String()
}
