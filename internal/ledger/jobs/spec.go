package jobs

import (
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/ledger"
)

// MaxParallelism is the largest parallelism the API accepts.
const MaxParallelism = 2000

// workQueue reports a SafeJob without completions but with parallelism:
// parallelism pods run until one succeeds, and it completes once the others
// have ended, as a batch/v1 Job without completions does. With neither set,
// batch/v1 defaults both to 1, and so does SafeJob: one pod, one completion.
func workQueue(spec *batchv1alpha1.SafeJobSpec) bool {
	return spec.Completions == nil && spec.Parallelism != nil
}

// completionsOrParallelism is the number of pods the SafeJob needs to
// succeed: completions, or parallelism for a work queue (as Kueue counts a
// batch/v1 Job's pods).
func completionsOrParallelism(spec *batchv1alpha1.SafeJobSpec) int32 {
	return ptr.Deref(spec.Completions, ptr.Deref(spec.Parallelism, 1))
}

// indexLimit bounds the indexes a SafeJob's ledger may hold: completions,
// or for a work queue the largest parallelism the API accepts (slots of a
// parallelism since lowered stay in the ledger).
func indexLimit(spec *batchv1alpha1.SafeJobSpec) int32 {
	if workQueue(spec) {
		return MaxParallelism
	}
	return ptr.Deref(spec.Completions, 1)
}

// ledgerIndexLimit bounds the indexes a valid ledger may hold: those of
// indexLimit, and for an Indexed SafeJob, whose completions may have been
// larger before (elastic), any index the API accepts.
func ledgerIndexLimit(spec *batchv1alpha1.SafeJobSpec) int32 {
	if spec.CompletionMode == batchv1alpha1.IndexedCompletion {
		return ledger.MaxCompletions
	}
	return indexLimit(spec)
}
