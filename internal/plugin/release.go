package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
	"github.com/safejob/safejob/internal/ledger/jobs"
)

// ReleaseOptions are the flags of `kubectl safejob release`.
type ReleaseOptions struct {
	// Namespace is where to release ("" for every namespace); Name, when
	// set, a SafeJob: what it and its runs hold.
	Namespace, Name string
	// OperatorNamespace is where to read the operator's Lease when the
	// user may not list Leases everywhere.
	OperatorNamespace string
	// Workloads says the API server serves Kueue's Workloads.
	Workloads bool
	DryRun    bool
	// Force releases even though an operator looks alive.
	Force bool
	Now   time.Time
}

// Kinds of the objects release frees.
const (
	KindPod      = "Pod"
	KindSafeJob  = "SafeJob"
	KindWorkload = "Workload"
)

// Held is a finalizer of SafeJob's that release removes.
type Held struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// SafeJob is the SafeJob a pod or a Workload is of.
	SafeJob string `json:"safeJob,omitempty"`
	// Unrecorded says why a pod's outcome is not in its SafeJob's ledger
	// ("" when it is): releasing the pod gives that outcome up.
	Unrecorded string `json:"unrecorded,omitempty"`

	obj client.Object
}

// What a pod whose outcome is not recorded is.
const (
	unrecordedRunning = "running"
	unrecordedEnded   = "ended, outcome not in the ledger yet"
	unrecordedGone    = "its SafeJob is gone"
	unrecordedUnread  = "its SafeJob's ledger does not read"
	unrecordedUnknown = "not in its SafeJob's ledger"
)

// FindHeld lists the finalizers of SafeJob's that pods, SafeJobs and
// Workloads of the namespace (every namespace for "") hold: the ledger
// finalizer of pods of SafeJobs, the run finalizer of SafeJobs, the
// resource-in-use finalizer of Workloads a SafeJob controls. With a name,
// only what that SafeJob and its runs hold. Pods come first, then
// Workloads, then SafeJobs.
func FindHeld(ctx context.Context, cl client.Reader, o ReleaseOptions) ([]Held, error) {
	sjs, err := listSafeJobs(ctx, cl, o.Namespace)
	if err != nil {
		return nil, err
	}
	match := safeJobMatcher(sjs, o.Name)
	held, err := heldPods(ctx, cl, o.Namespace, sjs, match)
	if err != nil {
		return nil, err
	}
	if o.Workloads {
		wls, err := heldWorkloads(ctx, cl, o.Namespace, match)
		if err != nil {
			return nil, err
		}
		held = append(held, wls...)
	}
	return append(held, heldSafeJobs(sjs, match)...), nil
}

// safeJobMatcher returns whether a SafeJob name (or name label) is of the
// SafeJob name or of its runs, listed in sjs; with name "" every name matches.
func safeJobMatcher(sjs []batchv1alpha1.SafeJob, name string) func(string) bool {
	if name == "" {
		return func(string) bool { return true }
	}
	names := map[string]bool{} // the SafeJobs of name, by name and name label
	names[name], names[ledger.ShortName(name, ledger.MaxNameLen)] = true, true
	for k := range sjs {
		if ref := batchv1alpha1.RunParent(&sjs[k]); ref != nil && ref.Name == name {
			names[sjs[k].Name], names[ledger.ShortName(sjs[k].Name, ledger.MaxNameLen)] = true, true
		}
	}
	return func(n string) bool { return names[n] }
}

// heldPods lists the pods of namespace ns that hold the ledger finalizer
// and are of a SafeJob match accepts, each with why its outcome is not in
// the ledger of its SafeJob (found among sjs by UID, in the pod's namespace).
func heldPods(ctx context.Context, cl client.Reader, ns string, sjs []batchv1alpha1.SafeJob, match func(string) bool) ([]Held, error) {
	byUID := make(map[types.UID]*batchv1alpha1.SafeJob, len(sjs))
	for k := range sjs {
		byUID[sjs[k].UID] = &sjs[k]
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var held []Held
	for k := range pods.Items {
		pod := &pods.Items[k]
		if !slices.Contains(pod.Finalizers, batchv1alpha1.LedgerFinalizer) {
			continue
		}
		name, uid := safeJobOf(pod)
		if name == "" || !match(name) {
			continue // not a SafeJob's pod, or another SafeJob's
		}
		owner := byUID[uid]
		if owner != nil && owner.Namespace != pod.Namespace {
			owner = nil
		}
		held = append(held, Held{Kind: KindPod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, SafeJob: name,
			Unrecorded: unrecorded(pod, owner), obj: pod})
	}
	return held, nil
}

// heldWorkloads lists the Workloads of namespace ns that hold the
// resource-in-use finalizer and that a SafeJob match accepts controls.
func heldWorkloads(ctx context.Context, cl client.Reader, ns string, match func(string) bool) ([]Held, error) {
	var wls kueue.WorkloadList
	if err := cl.List(ctx, &wls, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing Workloads: %w", err)
	}
	var held []Held
	for k := range wls.Items {
		wl := &wls.Items[k]
		ref := metav1.GetControllerOfNoCopy(wl)
		if ref == nil || !batchv1alpha1.IsSafeJobRef(ref) || !match(ref.Name) || !slices.Contains(wl.Finalizers, WorkloadFinalizer) {
			continue
		}
		held = append(held, Held{Kind: KindWorkload, Namespace: wl.Namespace, Name: wl.Name, UID: wl.UID, SafeJob: ref.Name, obj: wl})
	}
	return held, nil
}

// heldSafeJobs lists the SafeJobs of sjs that match accepts and that hold
// the run finalizer.
func heldSafeJobs(sjs []batchv1alpha1.SafeJob, match func(string) bool) []Held {
	var held []Held
	for k := range sjs {
		sj := &sjs[k]
		if match(sj.Name) && slices.Contains(sj.Finalizers, batchv1alpha1.RunFinalizer) {
			held = append(held, Held{Kind: KindSafeJob, Namespace: sj.Namespace, Name: sj.Name, UID: sj.UID, obj: sj})
		}
	}
	return held
}

// safeJobOf names the SafeJob whose pod this is, and its UID: its
// controller reference when that is a SafeJob, else its labels; "" for a
// pod that is no SafeJob's.
func safeJobOf(pod metav1.Object) (string, types.UID) {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && batchv1alpha1.IsSafeJobRef(ref) {
		return ref.Name, ref.UID
	}
	labels := pod.GetLabels()
	return labels[batchv1alpha1.SafeJobNameLabel], types.UID(labels[batchv1alpha1.ControllerUIDLabel])
}

// unrecorded says why the outcome of pod is not in the ledger of owner,
// the SafeJob that created it (nil when it is gone), or "" when it is: the
// ledger records it as ended, or folded it into its checkpoint.
func unrecorded(pod *corev1.Pod, owner *batchv1alpha1.SafeJob) string {
	if owner == nil {
		return unrecordedGone
	}
	st, err := jobs.Replay(&owner.Status.Ledger)
	if err != nil {
		return unrecordedUnread
	}
	if _, open := st.Open[pod.Name]; open {
		if jobs.IsTerminal(pod) {
			return unrecordedEnded
		}
		return unrecordedRunning
	}
	if _, closed := st.Closed[pod.Name]; closed || folded(owner.Status.Ledger.Checkpoint, pod) {
		return ""
	}
	return unrecordedUnknown
}

// folded reports whether the checkpoint cp holds the outcome of pod, a pod
// the ledger lists neither open nor closed: its index finished, or later
// attempts of it were launched, before the checkpoint.
func folded(cp *batchv1alpha1.LedgerCheckpoint, pod *corev1.Pod) bool {
	ref, ok := jobs.RefFromPod(pod)
	if cp == nil || !ok {
		return false
	}
	for _, s := range []string{cp.SucceededIndexes, cp.FailedIndexes} {
		if set, err := ledger.ParseIndexSet(s); err == nil && set.Has(ref.Index) {
			return true
		}
	}
	for _, is := range cp.Indexes {
		if is.Index == ref.Index && is.Attempts > ref.Attempt {
			return true
		}
	}
	return false
}

// OperatorAliveError is release's refusal while an operator looks alive.
type OperatorAliveError struct{ Alive *Alive }

func (e *OperatorAliveError) Error() string {
	return fmt.Sprintf("an operator looks alive (%s): a running operator releases these finalizers itself once it has "+
		"recorded each outcome, and releasing them behind its back loses those outcomes; remove SafeJob with "+
		"`kubectl safejob uninstall`, or stop the operator first, or pass --force to release anyway", e.Alive)
}

// Release removes the finalizers FindHeld lists, each from the object of
// the UID it was read with only. It first writes to w what it gives up (the
// pods whose outcome is not recorded), and refuses while an operator looks
// alive unless o.Force. With o.DryRun it changes nothing.
func Release(ctx context.Context, cl client.Client, w io.Writer, o ReleaseOptions) error {
	held, err := FindHeld(ctx, cl, o)
	if err != nil {
		return err
	}
	out := &errWriter{w: w}
	if len(held) == 0 {
		out.printf("Nothing holds a finalizer of SafeJob's: nothing to release.\n")
		return out.err
	}
	if err := PrintHeld(w, held, o.DryRun); err != nil {
		return err
	}
	if err := checkNoOperator(ctx, cl, out, o); err != nil {
		return err
	}
	if o.DryRun {
		out.printf("Dry run: nothing changed.\n")
		return out.err
	}
	if err := releaseHeld(ctx, cl, out, held); err != nil {
		return err
	}
	return out.err
}

// checkNoOperator refuses (with an *OperatorAliveError, or the error of
// telling) to release while an operator looks alive, or while it cannot
// tell whether one runs, unless o.Force, in which case it writes a warning
// to out instead. A dry run does not refuse: it notes that release would.
func checkNoOperator(ctx context.Context, cl client.Client, out *errWriter, o ReleaseOptions) error {
	alive, err := OperatorAlive(ctx, cl, o.OperatorNamespace, o.Now)
	switch {
	case err != nil && !o.Force:
		return fmt.Errorf("cannot tell whether an operator runs (pass --force to release all the same): %w", err)
	case err != nil:
		out.printf("Warning: cannot tell whether an operator runs (%v); releasing anyway (--force).\n", err)
	}
	switch {
	case alive == nil:
	case o.Force:
		out.printf("Warning: an operator looks alive (%s); releasing anyway (--force).\n", alive)
	case o.DryRun:
		out.printf("Note: %s; without --force, release would refuse.\n", (&OperatorAliveError{alive}).Error())
	default:
		return &OperatorAliveError{alive}
	}
	return nil
}

// releaseHeld removes each finalizer of held from the object of the UID it
// was read with, and writes to out which objects it left alone (their name
// is another object's now) and how many of each kind it released.
func releaseHeld(ctx context.Context, cl client.Client, out *errWriter, held []Held) error {
	counts := map[string]int{}
	for _, h := range held {
		var res released
		var err error
		switch h.Kind {
		case KindPod:
			res, err = releasePod(ctx, cl, h.obj)
		case KindWorkload:
			res, err = releaseByIndex(ctx, cl, h.obj, WorkloadFinalizer)
		default:
			res, err = releaseByIndex(ctx, cl, h.obj, batchv1alpha1.RunFinalizer)
		}
		if err != nil {
			return err
		}
		switch res {
		case releasedNow:
			counts[h.Kind]++
		case releasedTaken:
			out.printf("%s %s/%s left alone: its name is held by another %s now.\n", h.Kind, h.Namespace, h.Name, h.Kind)
		case releasedGone:
		}
	}
	out.printf("Released %s.\n", heldCounts(counts))
	return nil
}

// PrintHeld writes what release gives up and what it removes.
func PrintHeld(w io.Writer, held []Held, dryRun bool) error {
	var lost []Held
	counts := map[string]int{}
	for _, h := range held {
		counts[h.Kind]++
		if h.Unrecorded != "" {
			lost = append(lost, h)
		}
	}
	if len(lost) > 0 {
		out := &errWriter{w: w}
		out.printf("Outcome not recorded: releasing these %d pods gives up their outcome (no ledger will count them):\n", len(lost))
		if out.err != nil {
			return out.err
		}
		if err := writeTable(w, TableOptions{}, "NAMESPACE\tPOD\tSAFEJOB\tWHY", func(row func(string, ...any)) {
			for _, h := range lost {
				row("%s\t%s\t%s\t%s", h.Namespace, h.Name, h.SafeJob, h.Unrecorded)
			}
		}); err != nil {
			return err
		}
	}
	verb := "Releasing"
	if dryRun {
		verb = "Would release"
	}
	_, err := fmt.Fprintf(w, "%s the finalizers of %s.\n", verb, heldCounts(counts))
	return err //nolint:wrapcheck // a failed write to stdout says enough
}

// heldCounts says how many objects of each kind counts holds.
func heldCounts(counts map[string]int) string {
	return fmt.Sprintf("%s, %s and %s", plural(counts[KindPod], "pod"), plural(counts[KindSafeJob], "SafeJob"),
		plural(counts[KindWorkload], "Workload"))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
