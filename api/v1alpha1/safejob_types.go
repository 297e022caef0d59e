// This file is one concern, the SafeJob type: its spec, status and ledger,
// with the validation the API server applies to each field. controller-gen
// and the API reference read it as a whole.

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
	// ControllerUIDLabel carries the UID of the SafeJob that created a pod. It
	// outlives the pod's ownerReferences (an orphaning delete strips them), so
	// the ledger finalizer of a pod whose SafeJob is gone is found by UID.
	ControllerUIDLabel = "batch.safejob.dev/controller-uid"
	// JobCompletionIndexAnnotation is the batch/v1 annotation, and label,
	// that Indexed pods carry.
	JobCompletionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
	// JobNameLabel is the batch/v1 label that names a pod's job, so that
	// `kubectl logs -l batch.kubernetes.io/job-name=NAME` finds its pods.
	JobNameLabel = "batch.kubernetes.io/job-name"
	// JobCompletionIndexEnv is the environment variable that Indexed pods see.
	JobCompletionIndexEnv = "JOB_COMPLETION_INDEX"

	// ControllerName is the spec.managedBy value of SafeJobs this operator
	// runs (as is an unset managedBy).
	ControllerName = "batch.safejob.dev/safejob-controller"

	// RunFinalizer is carried by every run of a scheduled SafeJob until the
	// run's outcome is committed to the parent's ledger and observed.
	RunFinalizer = "batch.safejob.dev/run"
	// ParentLabel names the scheduled SafeJob that created a run.
	ParentLabel = "batch.safejob.dev/scheduled-by"
	// ScheduledTimeLabel carries a run's scheduled time in Unix seconds.
	ScheduledTimeLabel = "batch.safejob.dev/scheduled-time"
	// ScheduledTimeAnnotation carries a run's scheduled time in RFC 3339.
	ScheduledTimeAnnotation = "batch.safejob.dev/scheduled-time"
	// RunNowAnnotation, set on a scheduled SafeJob, asks for one run now,
	// outside the schedule (kubectl safejob run): its value is the run's
	// name. Each new value starts one run, recorded in the ledger before it
	// is created; a value already recorded starts nothing.
	RunNowAnnotation = "batch.safejob.dev/run-now"
	// InstantiateAnnotation is "manual" on a run started through
	// RunNowAnnotation, as cronjob.kubernetes.io/instantiate on a Job made
	// from a CronJob by hand.
	InstantiateAnnotation = "batch.safejob.dev/instantiate"
	// InstantiateManual is InstantiateAnnotation's value on a manual run.
	InstantiateManual = "manual"
)

// ConcurrencyPolicy says what a scheduled SafeJob does when a run is due
// while an earlier run is still active.
// +kubebuilder:validation:Enum=Allow;Forbid;Replace
type ConcurrencyPolicy string

const (
	// AllowConcurrent starts the run regardless.
	AllowConcurrent ConcurrencyPolicy = "Allow"
	// ForbidConcurrent skips the run while any earlier run, or any pod of
	// one, is still running or terminating.
	ForbidConcurrent ConcurrencyPolicy = "Forbid"
	// ReplaceConcurrent deletes the earlier runs and starts the new run once
	// their pods are gone.
	ReplaceConcurrent ConcurrencyPolicy = "Replace"
)

// Defaults of the run history limits.
const (
	DefaultSuccessfulRunsHistoryLimit int32 = 3
	DefaultFailedRunsHistoryLimit     int32 = 1
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
// With schedule set, the SafeJob is a parent: it runs no pods itself and
// creates one child SafeJob (a run) per scheduled time, with the job fields
// below copied. The template and the job fields of a parent may be edited;
// the change applies to the runs created after it.
//
// The fields a running SafeJob's ledger depends on (template, completions,
// completionMode, backoffLimitPerIndex, podFailurePolicy) are immutable and
// schedule cannot be added or removed: the ValidatingAdmissionPolicy
// config/policy/immutable-spec.yaml refuses such updates. These transition
// rules are not x-kubernetes-validations because the API server evaluates
// those on status writes too, where comparing the template would cost every
// ledger commit.
//
// +kubebuilder:validation:XValidation:rule="has(self.schedule) || !(has(self.timeZone) || has(self.concurrencyPolicy) || has(self.startingDeadlineSeconds) || has(self.successfulRunsHistoryLimit) || has(self.failedRunsHistoryLimit))",message="timeZone, concurrencyPolicy, startingDeadlineSeconds and the run history limits require schedule"
// +kubebuilder:validation:XValidation:rule="!has(self.backoffLimitPerIndex) || self.completionMode == 'Indexed'",message="requires indexed completion mode",fieldPath=".backoffLimitPerIndex"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || has(self.backoffLimitPerIndex)",message="must be set when maxFailedIndexes is",fieldPath=".backoffLimitPerIndex"
// +kubebuilder:validation:XValidation:rule="!has(self.maxFailedIndexes) || !has(self.completions) || self.maxFailedIndexes <= self.completions",message="maxFailedIndexes must not exceed completions",fieldPath=".maxFailedIndexes"
// +kubebuilder:validation:XValidation:rule="self.completionMode != 'Indexed' || has(self.completions) || !has(self.parallelism)",message="must be set when completionMode is Indexed (unless parallelism is unset too: then both are 1)",fieldPath=".completions"
// +kubebuilder:validation:XValidation:rule="!has(self.podFailurePolicy) || (has(self.template.spec.restartPolicy) && self.template.spec.restartPolicy == 'Never')",message="only \"Never\" is supported when podFailurePolicy is specified",fieldPath=".template.spec.restartPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.podFailurePolicy) || has(self.backoffLimitPerIndex) || self.podFailurePolicy.rules.all(r, r.action != 'FailIndex')",message="a rule's action FailIndex requires the backoffLimitPerIndex to be set",fieldPath=".podFailurePolicy.rules"
// +kubebuilder:validation:XValidation:rule="!has(self.successPolicy) || self.completionMode == 'Indexed'",message="requires indexed completion mode",fieldPath=".successPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.successPolicy) || !has(self.completions) || self.successPolicy.rules.all(r, !has(r.succeededCount) || r.succeededCount <= self.completions)",message="succeededCount must be less than or equal to the number of specified completions",fieldPath=".successPolicy.rules"
// +kubebuilder:validation:XValidation:rule="!has(self.backoffLimitPerIndex) || !has(self.completions) || self.completions <= 20000 || (has(self.maxFailedIndexes) && self.maxFailedIndexes <= 1000)",message="with backoffLimitPerIndex and more than 20000 completions, maxFailedIndexes must be set to at most 1000, so that completedIndexes and failedIndexes always fit in status",fieldPath=".maxFailedIndexes"
type SafeJobSpec struct {
	// template is the pod template of every pod the SafeJob creates.
	// Its restartPolicy must be Never or OnFailure. Immutable, except a
	// scheduled SafeJob's, and that of the ledger of a batch/v1 Job that
	// SafeJob runs while it is suspended with no pod running or terminating.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.spec.?restartPolicy.orValue('') in ['Never', 'OnFailure']",message="valid values: \"OnFailure\", \"Never\"",fieldPath=".spec.restartPolicy"
	Template corev1.PodTemplateSpec `json:"template"`

	// parallelism is the most pods that run at once; unset, 1. 0 pauses
	// launching. At most 2000: every running pod is listed in the ledger
	// (with a Stopping entry while it is stopped), and that many fit in one
	// status write together with the largest index sets (docs/design.md).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2000
	Parallelism *int32 `json:"parallelism,omitempty"`

	// completions is the number of successful pods (NonIndexed) or of indexes
	// that must succeed (Indexed). Unset while parallelism is set (NonIndexed
	// only), the SafeJob is a work queue, as a batch/v1 Job without
	// completions: parallelism pods run until one succeeds, and it completes
	// once the others have ended. With neither set, both are 1, as batch/v1
	// defaults them. Immutable.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Completions *int32 `json:"completions,omitempty"`

	// completionMode is NonIndexed (default) or Indexed, as in batch/v1. Immutable.
	// +optional
	// +kubebuilder:default=NonIndexed
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
	PodFailurePolicy *PodFailurePolicy `json:"podFailurePolicy,omitempty"`

	// podReplacementPolicy is batch/v1's field, with the one value SafeJob
	// keeps whatever is set: Failed, a pod is replaced only once it has
	// ended. batch/v1's TerminatingOrFailed (its default without a
	// podFailurePolicy) would run a second pod of an index while the first
	// is still terminating, which the ledger's one pod per index forbids.
	// +optional
	// +kubebuilder:validation:Enum=Failed
	PodReplacementPolicy *batchv1.PodReplacementPolicy `json:"podReplacementPolicy,omitempty"`

	// successPolicy declares the SafeJob succeeded before every index has,
	// as batch/v1's successPolicy: once a rule matches the SafeJob gets
	// SuccessCriteriaMet (reason SuccessPolicy), its remaining pods are
	// stopped, and it completes. Indexed only. Immutable.
	// +optional
	SuccessPolicy *SuccessPolicy `json:"successPolicy,omitempty"`

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

	// managedBy names the controller that runs this SafeJob, as batch/v1's
	// managedBy does: unset or ControllerName, the SafeJob operator runs it;
	// any other value (a domain-prefixed path such as
	// kueue.x-k8s.io/multikueue), the operator leaves it alone: it creates
	// no pod for it and never writes its status. With
	// kueue.x-k8s.io/multikueue the operator keeps its Workload for
	// MultiKueue, and a scheduled SafeJob still runs its schedule, each run
	// dispatched by MultiKueue. Immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9/._~%!$&'()*+,;=:]+$`
	ManagedBy *string `json:"managedBy,omitempty"`

	// suspend stops launching pods and deletes the active ones; their stop is
	// recorded in the ledger as Evicted and never counted as a failure.
	// +optional
	// +kubebuilder:default=false
	Suspend *bool `json:"suspend,omitempty"`

	// schedule makes the SafeJob a parent that starts one run per scheduled
	// time: a 5-field cron expression ("*/5 * * * *"), a macro (@hourly,
	// @daily, ...) or "@every <duration>", as CronJob accepts. While suspend is
	// true no run starts; runs already started are not affected.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly|every [0-9a-zµ.]+)|[^ @]+( +[^ @]+){4})$`
	Schedule *string `json:"schedule,omitempty"`

	// timeZone is the IANA name of the time zone the schedule is read in
	// (default UTC). Requires schedule.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",message="timeZone must be an IANA time zone name such as Europe/Berlin"
	TimeZone *string `json:"timeZone,omitempty"`

	// concurrencyPolicy is Allow (default), Forbid or Replace. Requires schedule.
	// +optional
	ConcurrencyPolicy ConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// startingDeadlineSeconds: a run that cannot start within this many
	// seconds of its scheduled time is missed. Requires schedule.
	// +optional
	// +kubebuilder:validation:Minimum=0
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// successfulRunsHistoryLimit is the number of finished, successful runs
	// kept (default 3). Requires schedule.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SuccessfulRunsHistoryLimit *int32 `json:"successfulRunsHistoryLimit,omitempty"`

	// failedRunsHistoryLimit is the number of finished, failed runs kept
	// (default 1). Requires schedule.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedRunsHistoryLimit *int32 `json:"failedRunsHistoryLimit,omitempty"`
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
	// ConditionScheduling says whether a scheduled SafeJob starts runs, and
	// why not (suspended, invalid schedule, waiting for an earlier run).
	ConditionScheduling = "Scheduling"
	// ConditionAdmitted is present on queued SafeJobs (label
	// kueue.x-k8s.io/queue-name): True while the Workload is admitted, False
	// with the queue's reason and message while the SafeJob waits or after
	// it was evicted.
	ConditionAdmitted = "Admitted"
	// ConditionMissedRuns is True when scheduled times were not run; its
	// message gives the count and the latest missed time.
	ConditionMissedRuns = "MissedRuns"
	// ConditionPodCreateFailure is True, with reason FailedCreate and the
	// API server's message, while the API server refuses the SafeJob's pod
	// creates (a ResourceQuota, an admission policy, an invalid template),
	// as a ReplicaSet's ReplicaFailure; it is removed once a create
	// succeeds. Meanwhile one launch at a time waits to be created.
	ConditionPodCreateFailure = "PodCreateFailure"
	// ConditionStatusWriteFailure is True, with reason StatusRefused and
	// the API server's message, while the API server refuses the status the
	// operator writes for the SafeJob for what it carries (its size, a value
	// the installed CRD does not allow): nothing of the decided status is
	// stored meanwhile. It is removed by the next status write that is.
	ConditionStatusWriteFailure = "StatusWriteFailure"
)

// Condition reasons, as in batch/v1 where batch/v1 has one.
const (
	ReasonBackoffLimitExceeded     = "BackoffLimitExceeded"
	ReasonDeadlineExceeded         = "DeadlineExceeded"
	ReasonPodFailurePolicy         = "PodFailurePolicy"
	ReasonMaxFailedIndexesExceeded = "MaxFailedIndexesExceeded"
	ReasonFailedIndexes            = "FailedIndexes"
	ReasonCompletionsReached       = "CompletionsReached"
	ReasonSuccessPolicy            = "SuccessPolicy"
	ReasonSuspended                = "JobSuspended"
	ReasonResumed                  = "JobResumed"
	ReasonLedgerCorrupt            = "LedgerCorrupt"
	ReasonLedgerOK                 = "LedgerOK"
	// ReasonLedgerFormatUnknown: status.ledger.format is newer than this
	// build of the operator reads (a rollback); it writes nothing else to
	// the SafeJob, creates and releases none of its pods, until a build that
	// reads the format runs it.
	ReasonLedgerFormatUnknown = "LedgerFormatUnknown"
	// ReasonLedgerRolledBack: the ledger shows less than this process saw
	// of it before (a lower seq, or indexes once recorded done that are not
	// now): a status restored from a backup or edited by hand. Nothing is
	// launched for the SafeJob while it lasts, so no finished work runs
	// twice.
	ReasonLedgerRolledBack = "LedgerRolledBack"
	// ReasonStatusRefused is the reason of StatusWriteFailure.
	ReasonStatusRefused = "StatusRefused"
	// ReasonCRDOutdated: the API server dropped a field the operator wrote;
	// the installed CRD is older than the operator.
	ReasonCRDOutdated        = "CRDOutdated"
	ReasonScheduled          = "Scheduled"
	ReasonScheduleSuspended  = "ScheduleSuspended"
	ReasonInvalidSchedule    = "InvalidSchedule"
	ReasonWaitingForRun      = "WaitingForEarlierRun"
	ReasonTooManyMissedTimes = "TooManyMissedTimes"
	ReasonTooManyActiveRuns  = "TooManyActiveRuns"
	ReasonMissedSchedule     = "MissedSchedule"
	ReasonNoMissedRuns       = "NoMissedRuns"
	ReasonAdmitted           = "Admitted"
	ReasonQueued             = "Queued"
)

// EntryType is the kind of fact a ledger entry records.
// +kubebuilder:validation:Enum=Launched;Stopping;Succeeded;Failed;Lost;Evicted;Scheduled
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
	// EntryStopping records that the controller is stopping a launched pod
	// (reason: why). The launch stays open until the pod has ended, so its
	// index runs no other pod meanwhile; the outcome then recorded follows
	// the committed reason, not the pod's exit code: Evicted, or Failed when
	// the reason is JobFailing.
	EntryStopping EntryType = "Stopping"
	// EntryScheduled records a run of a scheduled SafeJob: it authorises the
	// creation of exactly one child SafeJob. A parent's ledger holds only
	// Scheduled entries and the outcomes (Succeeded, Failed, Lost) of its runs.
	// With reason Manual it records a run asked for by hand
	// (RunNowAnnotation); its scheduledTime is when the request was
	// committed, outside the schedule's order.
	EntryScheduled EntryType = "Scheduled"
)

// ReasonManual is the reason of the Scheduled entry of a run started by hand.
const ReasonManual = "Manual"

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
	// pod is the name of the pod the fact is about (empty for run entries);
	// on an entry with count, the name of its first pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod,omitempty"`
	// count is, on a Launched or Stopping entry, the number of pods of its
	// run (1 when absent): entries of one type, attempt, time and reason, of
	// consecutive indexes from index, whose seqs follow on from seq. Each
	// pod's name is pod's with the "-<index>-<attempt>" suffix of its own
	// index. It keeps the ledger small however many pods are open or being
	// stopped. A pod strictly inside the run whose launch the checkpoint
	// holds (its index finished, or its attempt below the checkpoint's count
	// for the index, at a seq below the checkpoint's, and no launch of its
	// index listed before it) ended and was folded: the entry no longer
	// stands for it.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Count int32 `json:"count,omitempty"`
	// run is the name of the child SafeJob a run entry is about.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Run string `json:"run,omitempty"`
	// scheduledTime is the scheduled time of a run entry.
	// +optional
	ScheduledTime *metav1.Time `json:"scheduledTime,omitempty"`
	// missed is, on a Scheduled entry, the number of scheduled times since
	// the previous run that were not run.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Missed int64 `json:"missed,omitempty"`
	// index is the completion index of the pod.
	// +required
	// +kubebuilder:validation:Minimum=0
	Index int32 `json:"index"`
	// attempt is the attempt number of the pod for its index, from 0.
	// +required
	// +kubebuilder:validation:Minimum=0
	Attempt int32 `json:"attempt"`
	// time is when the fact was committed; for a pod's Succeeded or
	// Failed, when the pod ended (its containers' latest finish, as batch/v1
	// reads it), never before its launch nor after the commit.
	// +required
	Time metav1.Time `json:"time"`
	// reason qualifies the fact (for a pod's Failed: Counted, Ignored,
	// FailIndex or FailJob; for a run's outcome: its condition's reason).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
	// uid is, on a run's outcome entry, the run's UID when the parent knew
	// it: pods of a run that is gone are matched to it by their controller's
	// UID, never by labels or names.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	UID string `json:"uid,omitempty"`
}

// Pods is the number of seqs the entry takes, one per pod of its run: its
// count on a Launched or Stopping entry with one, otherwise 1. Pods of the
// run that a fold took into the checkpoint are among them.
func (e *LedgerEntry) Pods() int32 {
	if e.Count > 1 && e.Countable() {
		return e.Count
	}
	return 1
}

// Countable reports whether the entry's type may stand for several pods.
func (e *LedgerEntry) Countable() bool { return e.Type == EntryLaunched || e.Type == EntryStopping }

// LastSeq is the seq of the entry's last pod: its own seq unless it stands
// for several pods.
func (e *LedgerEntry) LastSeq() int64 { return e.Seq + int64(e.Pods()) - 1 }

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
	// lastFailureTime is when the index's last failure was recorded: with
	// backoffLimitPerIndex its next pod waits out the backoff delay from it.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
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
	// failuresSinceSuccess is the number of pod failures that ended after
	// the latest success; the next pod waits out the backoff delay it sets.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailuresSinceSuccess int32 `json:"failuresSinceSuccess,omitempty"`
	// lastFailureTime is when the last of those failures ended.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// lastSuccessTime is when the latest recorded success ended: a failure
	// that ended no later does not delay the next pod (batch/v1).
	// +optional
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`
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
	// lastScheduleTime is the latest scheduled time of a folded run. No time
	// at or before it is ever run again.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// runs is the number of runs folded (Succeeded, Failed and Lost).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Runs int64 `json:"runs,omitempty"`
	// missed is the number of scheduled times folded that were not run.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Missed int64 `json:"missed,omitempty"`
	// lastManualRun is the name of the latest run started by hand that was
	// folded: a request of that name (RunNowAnnotation) was carried out.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LastManualRun string `json:"lastManualRun,omitempty"`
	// lastManualTime is the latest scheduledTime (request time) of a run
	// started by hand that was folded.
	// +optional
	LastManualTime *metav1.Time `json:"lastManualTime,omitempty"`
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
	// format is the version of the ledger's encoding, and of the status
	// fields beside it, that wrote it. The operator writes the newest format
	// it knows and never writes a SafeJob whose format is newer (it marks
	// LedgerValid False with reason LedgerFormatUnknown instead): it could
	// not read that ledger right. Unset is format 1. Its maximum in the CRD
	// is the format of the build the CRD ships with: an operator newer than
	// the installed CRD has its writes refused, naming this field, rather
	// than pruned.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	Format int32 `json:"format,omitempty"`
	// seq is the seq of the last entry ever appended; it only grows.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Seq int64 `json:"seq,omitempty"`
	// checkpoint holds the folded meaning of entries no longer listed.
	// +optional
	Checkpoint *LedgerCheckpoint `json:"checkpoint,omitempty"`
	// entries are the facts after the checkpoint, in seq order: every open
	// launch and the newest outcome; older closed launches are folded.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100000
	Entries []LedgerEntry `json:"entries,omitempty"`
}

// LedgerFormat is the format of the ledger this build writes
// (Ledger.Format). It grows with every change of the status that an older
// build, writing the status back, would lose or misread.
const LedgerFormat = 1

// SafeJobStatus is the observed state of a SafeJob. Every counter and index
// set in it is derived from the ledger.
//
// Its writes are merge patches of what changed, so that a status field a
// build does not know (one a newer build added) is kept, not written away.
type SafeJobStatus struct {
	// conditions: Complete, Failed, Suspended, SuccessCriteriaMet, FailureTarget, LedgerValid;
	// for scheduled SafeJobs Scheduling and MissedRuns; for queued SafeJobs Admitted.
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
	// active is the number of the SafeJob's pods that exist and have neither
	// ended nor begun terminating, as batch/v1 counts active pods: a launch
	// whose pod is not created yet (or whose create was refused) is not
	// active.
	// +optional
	Active int32 `json:"active,omitempty"`
	// terminating is the number of the SafeJob's pods that are being deleted
	// and have not ended yet, as batch/v1 counts them. SafeJob never starts
	// a replacement for such a pod before it has ended.
	// +optional
	Terminating *int32 `json:"terminating,omitempty"`
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

	// lastScheduleTime is the scheduled time of the latest run. Scheduled SafeJobs only.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// lastSuccessfulTime is when the latest successful run completed. Scheduled SafeJobs only.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// activeRuns are the runs whose outcome is not yet recorded. Scheduled SafeJobs only.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	ActiveRuns []corev1.ObjectReference `json:"activeRuns,omitempty"`
	// missedRuns is the number of scheduled times that were not run.
	// +optional
	MissedRuns int64 `json:"missedRuns,omitempty"`
	// observedSchedule is the schedule runs are started by, and since when:
	// an edited schedule applies from its first time after the edit.
	// +optional
	ObservedSchedule *ObservedSchedule `json:"observedSchedule,omitempty"`
}

// ObservedSchedule is the schedule and time zone a scheduled SafeJob
// follows, and when it began to follow them.
type ObservedSchedule struct {
	// schedule as in spec.schedule.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Schedule string `json:"schedule"`
	// timeZone as in spec.timeZone.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`
	// since is when this schedule took effect; no earlier time of it runs.
	// +required
	Since metav1.Time `json:"since"`
}

// SafeJob runs pods to completion like a batch/v1 Job, with every launch and
// outcome committed to status.ledger before it is acted on.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sj
// +kubebuilder:printcolumn:name="Completions",type=string,JSONPath=`.status.completions`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.active`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Ledger",type=integer,JSONPath=`.status.ledger.seq`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].status`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`,priority=1
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`,priority=1
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

// PodFailurePolicy is batch/v1's podFailurePolicy, refused by the API server
// where batch/v1 refuses it (same limits, values and field paths).
type PodFailurePolicy struct {
	// rules are checked in order against a failed pod; the first that
	// matches decides its action, and a failure no rule matches counts
	// toward backoffLimit. At most 20.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Rules []PodFailurePolicyRule `json:"rules"`
}

// PodFailurePolicyRule is one rule of a podFailurePolicy: an action and
// exactly one requirement on the failed pod.
// +kubebuilder:validation:XValidation:rule="has(self.onExitCodes) || (has(self.onPodConditions) && size(self.onPodConditions) > 0)",message="specifying one of OnExitCodes and OnPodConditions is required"
// +kubebuilder:validation:XValidation:rule="!has(self.onExitCodes) || !has(self.onPodConditions) || size(self.onPodConditions) == 0",message="specifying both OnExitCodes and OnPodConditions is not supported"
type PodFailurePolicyRule struct {
	// action is FailJob (the SafeJob fails), FailIndex (the index fails;
	// requires backoffLimitPerIndex), Ignore (not counted) or Count.
	// +required
	// +kubebuilder:validation:Enum=FailJob;FailIndex;Ignore;Count
	Action batchv1.PodFailurePolicyAction `json:"action"`

	// onExitCodes matches the exit codes of the pod's containers.
	// +optional
	OnExitCodes *PodFailurePolicyOnExitCodesRequirement `json:"onExitCodes,omitempty"`

	// onPodConditions matches when any of these conditions is on the pod
	// with the given status. At most 20.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	OnPodConditions []PodFailurePolicyOnPodConditionsPattern `json:"onPodConditions,omitempty"`
}

// PodFailurePolicyOnExitCodesRequirement matches the exit codes of a failed
// pod's containers that did not exit 0.
// +kubebuilder:validation:XValidation:rule="self.operator != 'In' || !self.values.exists(v, v == 0)",message="must not contain 0 for the In operator",fieldPath=".values"
// +kubebuilder:validation:XValidation:rule="self.values.isSorted()",message="must be ordered",fieldPath=".values"
type PodFailurePolicyOnExitCodesRequirement struct {
	// containerName limits the requirement to the container of this name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ContainerName *string `json:"containerName,omitempty"`

	// operator is In (an exit code is among values) or NotIn.
	// +required
	// +kubebuilder:validation:Enum=In;NotIn
	Operator batchv1.PodFailurePolicyOnExitCodesOperator `json:"operator"`

	// values are the exit codes, ascending, without repeats; 1 to 255 of them.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=255
	Values []int32 `json:"values"`
}

// PodFailurePolicyOnPodConditionsPattern matches a condition of the pod.
type PodFailurePolicyOnPodConditionsPattern struct {
	// type is the pod condition type, such as DisruptionTarget.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Type corev1.PodConditionType `json:"type"`

	// status is the condition's status to match: True (default), False or Unknown.
	// +optional
	// +kubebuilder:default=True
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status corev1.ConditionStatus `json:"status,omitempty"`
}

// SuccessPolicy is batch/v1's successPolicy: the SafeJob has succeeded once
// any rule matches the succeeded indexes.
type SuccessPolicy struct {
	// rules are checked in order; the first that matches decides. 1 to 20.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	Rules []SuccessPolicyRule `json:"rules"`
}

// SuccessPolicyRule matches when the indexes it lists have all succeeded,
// or, with succeededCount, when that many of them (of all indexes, without
// succeededIndexes) have.
// +kubebuilder:validation:XValidation:rule="has(self.succeededIndexes) || has(self.succeededCount)",message="at least one of succeededCount or succeededIndexes must be specified"
type SuccessPolicyRule struct {
	// succeededIndexes lists indexes as intervals ("0,2-4"), ascending.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:Pattern=`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`
	SucceededIndexes *string `json:"succeededIndexes,omitempty"`

	// succeededCount is how many of the indexes must have succeeded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SucceededCount *int32 `json:"succeededCount,omitempty"`
}
