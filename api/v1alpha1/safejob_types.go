package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// LedgerFinalizer is carried by every pod of a SafeJob until the pod's
	// outcome is committed to the ledger and that commit has been observed.
	LedgerFinalizer = "batch.safejob.dev/ledger"
	// SafeJobNameLabel names the SafeJob that owns a pod.
	SafeJobNameLabel = "batch.safejob.dev/safejob-name"
	// CompletionIndexLabel carries the completion index of a pod.
	CompletionIndexLabel = "batch.safejob.dev/completion-index"
	// AttemptLabel carries the attempt number of a pod for its index.
	AttemptLabel = "batch.safejob.dev/attempt"
	// JobCompletionIndexAnnotation is the batch/v1 annotation that Indexed pods carry.
	JobCompletionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
	// JobCompletionIndexEnv is the environment variable that Indexed pods see.
	JobCompletionIndexEnv = "JOB_COMPLETION_INDEX"
)

// CompletionMode specifies how pod completions are tracked.
// +kubebuilder:validation:Enum=NonIndexed;Indexed
type CompletionMode string

const (
	// NonIndexedCompletion: the SafeJob is complete after spec.completions pods succeeded.
	NonIndexedCompletion CompletionMode = "NonIndexed"
	// IndexedCompletion: each index in [0, completions) must succeed once.
	IndexedCompletion CompletionMode = "Indexed"
)

// SafeJobSpec describes the work a SafeJob runs.
//
// Fields for schedules (schedule, timeZone, concurrencyPolicy, ...) and queueing
// will join this struct; none of the existing fields changes meaning when they do.
//
// +kubebuilder:validation:XValidation:rule="!has(self.backoffLimitPerIndex) || self.completionMode == 'Indexed'",message="backoffLimitPerIndex requires completionMode Indexed"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || has(self.backoffLimitPerIndex)",message="maxFailedIndexes requires backoffLimitPerIndex"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || self.maxFailedIndexes <= self.completions",message="maxFailedIndexes must not exceed completions"
// +kubebuilder:validation:XValidation:rule="self.completionMode != 'Indexed' || self.completions >= 1",message="completions must be at least 1 when completionMode is Indexed"
// +kubebuilder:validation:XValidation:rule="has(self.backoffLimitPerIndex) == has(oldSelf.backoffLimitPerIndex)",message="backoffLimitPerIndex is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.podFailurePolicy) == has(oldSelf.podFailurePolicy)",message="podFailurePolicy is immutable"
type SafeJobSpec struct {
	// template is the pod template of every pod the SafeJob creates.
	// Its restartPolicy must be Never or OnFailure. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.spec.restartPolicy) && self.spec.restartPolicy in ['Never', 'OnFailure']",message="template.spec.restartPolicy must be Never or OnFailure"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="template is immutable"
	Template corev1.PodTemplateSpec `json:"template"`

	// parallelism is the most pods that run at once. 0 pauses launching.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Parallelism *int32 `json:"parallelism,omitempty"`

	// completions is the number of successful pods (NonIndexed) or of indexes
	// that must succeed (Indexed). Immutable.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="completions is immutable"
	Completions *int32 `json:"completions,omitempty"`

	// completionMode is NonIndexed (default) or Indexed, as in batch/v1. Immutable.
	// +optional
	// +kubebuilder:default=NonIndexed
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="completionMode is immutable"
	CompletionMode CompletionMode `json:"completionMode,omitempty"`

	// backoffLimit is the number of counted pod failures after which the SafeJob fails.
	// +optional
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	BackoffLimit *int32 `json:"backoffLimit,omitempty"`

	// backoffLimitPerIndex is the number of counted failures per index after
	// which that index fails. Indexed only. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="backoffLimitPerIndex is immutable"
	BackoffLimitPerIndex *int32 `json:"backoffLimitPerIndex,omitempty"`

	// maxFailedIndexes is the number of failed indexes after which the SafeJob
	// fails. Requires backoffLimitPerIndex.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MaxFailedIndexes *int32 `json:"maxFailedIndexes,omitempty"`

	// podFailurePolicy decides what a failed pod means, with the rules and
	// actions (FailJob, FailIndex, Ignore, Count) of batch/v1. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podFailurePolicy is immutable"
	PodFailurePolicy *batchv1.PodFailurePolicy `json:"podFailurePolicy,omitempty"`

	// activeDeadlineSeconds bounds the time since the SafeJob started (or was
	// last resumed); past it the SafeJob fails with reason DeadlineExceeded.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// ttlSecondsAfterFinished deletes the SafeJob this many seconds after it
	// completed or failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// suspend stops launching pods and deletes the active ones; their stop is
	// recorded in the ledger as Evicted and never counted as a failure.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`
}

// ConditionType of a SafeJob, as in batch/v1.
const (
	// ConditionComplete: all completions succeeded and every pod has terminated.
	ConditionComplete = "Complete"
	// ConditionFailed: the SafeJob failed and every pod has terminated.
	ConditionFailed = "Failed"
	// ConditionSuspended: spec.suspend is true and pods are stopped.
	ConditionSuspended = "Suspended"
	// ConditionSuccessCriteriaMet: completions reached; pods may still terminate.
	ConditionSuccessCriteriaMet = "SuccessCriteriaMet"
	// ConditionFailureTarget: the SafeJob will fail; pods may still terminate.
	ConditionFailureTarget = "FailureTarget"
	// ConditionLedgerValid is False when status.ledger cannot be read; the
	// controller then takes no action for the SafeJob.
	ConditionLedgerValid = "LedgerValid"
)

// Condition reasons, as in batch/v1 where batch/v1 has one.
const (
	ReasonBackoffLimitExceeded     = "BackoffLimitExceeded"
	ReasonDeadlineExceeded         = "DeadlineExceeded"
	ReasonPodFailurePolicy         = "PodFailurePolicy"
	ReasonMaxFailedIndexesExceeded = "MaxFailedIndexesExceeded"
	ReasonFailedIndexes            = "FailedIndexes"
	ReasonCompletionsReached       = "CompletionsReached"
	ReasonSuspended                = "JobSuspended"
	ReasonResumed                  = "JobResumed"
	ReasonLedgerCorrupt            = "LedgerCorrupt"
	ReasonLedgerOK                 = "LedgerOK"
)

// EntryType is the kind of fact a ledger entry records.
// +kubebuilder:validation:Enum=Launched;Succeeded;Failed;Lost;Evicted;Scheduled
type EntryType string

const (
	// EntryLaunched authorises the creation of exactly one pod.
	EntryLaunched EntryType = "Launched"
	// EntrySucceeded records that a launched pod succeeded.
	EntrySucceeded EntryType = "Succeeded"
	// EntryFailed records that a launched pod failed; its reason says how it counts.
	EntryFailed EntryType = "Failed"
	// EntryLost records that a launched pod is gone with no terminal state ever observed.
	EntryLost EntryType = "Lost"
	// EntryEvicted records that a launched pod was stopped by suspension or
	// preemption; it never counts as a failure.
	EntryEvicted EntryType = "Evicted"
	// EntryScheduled records a scheduled run (reserved for schedules).
	EntryScheduled EntryType = "Scheduled"
)

// Reasons carried by Failed entries: the podFailurePolicy action applied.
const (
	FailReasonCounted   = "Counted"
	FailReasonIgnored   = "Ignored"
	FailReasonFailIndex = "FailIndex"
	FailReasonFailJob   = "FailJob"
)

// LedgerEntry is one fact of the ledger. Entries are appended, never edited.
type LedgerEntry struct {
	// seq is the entry's position; every entry has a larger seq than the one before.
	// +required
	// +kubebuilder:validation:Minimum=1
	Seq int64 `json:"seq"`
	// type is the kind of fact.
	// +required
	Type EntryType `json:"type"`
	// pod is the name of the pod the fact is about.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// index is the completion index of the pod.
	// +required
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// attempt is the attempt number of the pod for its index, from 0.
	// +required
	// +kubebuilder:validation:Minimum=0
	Attempt int32 `json:"attempt"`
	// time is when the fact was committed.
	// +required
	Time metav1.Time `json:"time"`
	// reason qualifies the fact (for Failed: Counted, Ignored, FailIndex or FailJob).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
}

// IndexState keeps, for an index that is not finished, what folded entries said of it.
type IndexState struct {
	// index is the completion index.
	// +required
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// attempts is the number of pods launched for the index so far.
	// +required
	// +kubebuilder:validation:Minimum=0
	Attempts int32 `json:"attempts"`
	// failures is the number of counted failures of the index so far.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failures int32 `json:"failures,omitempty"`
}

// LedgerCheckpoint folds old entries into totals that keep their meaning:
// every count, index set and attempt number derived from the ledger is the
// same before and after a fold.
type LedgerCheckpoint struct {
	// seq is the seq of the last folded entry.
	// +required
	// +kubebuilder:validation:Minimum=0
	Seq int64 `json:"seq"`
	// failed is the number of counted pod failures folded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Failed int32 `json:"failed,omitempty"`
	// lost is the number of Lost entries folded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Lost int32 `json:"lost,omitempty"`
	// evicted is the number of Evicted entries folded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Evicted int32 `json:"evicted,omitempty"`
	// ignored is the number of folded failures that podFailurePolicy ignored.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Ignored int32 `json:"ignored,omitempty"`
	// failJob is true when a folded failure carried the FailJob action.
	// +optional
	FailJob bool `json:"failJob,omitempty"`
	// succeededIndexes lists the indexes that succeeded, as intervals ("0-3,7").
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	SucceededIndexes string `json:"succeededIndexes,omitempty"`
	// failedIndexes lists the indexes that failed, as intervals.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	FailedIndexes string `json:"failedIndexes,omitempty"`
	// indexes keeps the attempt and failure counts of unfinished indexes.
	// +optional
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=100000
	Indexes []IndexState `json:"indexes,omitempty"`
}

// Ledger is the append-only record of what the SafeJob launched and how each
// pod ended.
//
// It lives in status because it cannot be rebuilt from the cluster: pods are
// deleted by pod GC, users and node loss, and a deleted pod takes its outcome
// with it. The ledger is written with the resourceVersion precondition, so two
// writers can never both append on the same view, and a pod is only created
// after the write that authorised it has been observed.
type Ledger struct {
	// seq is the seq of the last entry ever appended; it only grows.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Seq int64 `json:"seq,omitempty"`
	// checkpoint holds the folded meaning of entries no longer listed.
	// +optional
	Checkpoint *LedgerCheckpoint `json:"checkpoint,omitempty"`
	// entries are the facts after the checkpoint, in seq order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100000
	Entries []LedgerEntry `json:"entries,omitempty"`
}

// SafeJobStatus is the observed state of a SafeJob. Every counter and index
// set in it is derived from the ledger.
type SafeJobStatus struct {
	// conditions: Complete, Failed, Suspended, SuccessCriteriaMet, FailureTarget, LedgerValid.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// startTime is when the SafeJob started, or was last resumed.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the SafeJob completed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// active is the number of launched pods whose outcome is not yet recorded.
	// +optional
	Active int32 `json:"active,omitempty"`
	// ready is the number of active pods that are ready.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// succeeded is the number of completions achieved.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// failed is the number of counted pod failures.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// completedIndexes lists the succeeded indexes as intervals ("0-3,7"). Indexed only.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	CompletedIndexes string `json:"completedIndexes,omitempty"`
	// failedIndexes lists the failed indexes as intervals. With backoffLimitPerIndex only.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	FailedIndexes *string `json:"failedIndexes,omitempty"`
	// completions is "succeeded/completions", for display.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Completions string `json:"completions,omitempty"`
	// ledger is the append-only record of launches and outcomes.
	// +optional
	Ledger Ledger `json:"ledger,omitempty"`
}

// SafeJob runs pods to completion like a batch/v1 Job, with every launch and
// outcome committed to status.ledger before it is acted on.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sj
// +kubebuilder:printcolumn:name="Completions",type=string,JSONPath=`.status.completions`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Ledger",type=integer,JSONPath=`.status.ledger.seq`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SafeJob struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired work.
	// +required
	Spec SafeJobSpec `json:"spec"`
	// status is the observed state and the ledger.
	// +optional
	Status SafeJobStatus `json:"status,omitempty"`
}

// SafeJobList contains a list of SafeJob.
// +kubebuilder:object:root=true
type SafeJobList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SafeJob `json:"items"`
}
