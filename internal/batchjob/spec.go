// Package batchjob translates between batch/v1 Jobs and SafeJobs, as pure
// functions: a Job's spec as a SafeJob's (kubectl safejob convert, and the
// ledger of a Job that names SafeJob in spec.managedBy), and that ledger's
// status as the Job's, in the terms batch/v1 defines and the API server
// validates.
package batchjob

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// ConvertSpec copies a Job spec into a SafeJob spec through JSON; a field
// the SafeJob has not is an error naming it under path, never dropped. A
// Job managed by the built-in controller (managedBy
// kubernetes.io/job-controller) becomes a SafeJob managed by SafeJob
// (managedBy unset): copied as it is, the name would hand the SafeJob to a
// controller that never runs SafeJobs.
func ConvertSpec(in batchv1.JobSpec, out *batchv1alpha1.SafeJobSpec, path string) error {
	if ptr.Deref(in.ManagedBy, "") == batchv1.JobControllerName {
		in.ManagedBy = nil
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		msg := err.Error()
		if field, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			return fmt.Errorf("%s.%s: a SafeJob has no such field (it owns its pods by UID, never by selector)",
				path, strings.Trim(field, `"`))
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// LedgerSpec is the spec of the SafeJob that keeps a managed Job's ledger:
// the Job's, but for what the Job keeps for itself. The selector the API
// server generated matches the labels it put on the template, which the
// pods carry, so `kubectl logs job/NAME` finds them; a selector of the
// user's own (manualSelector) is refused, as SafeJob owns pods by UID.
// ttlSecondsAfterFinished stays on the Job, whose TTL controller deletes
// it and with it its ledger. The ledger is run by SafeJob itself.
//
// podReplacementPolicy TerminatingOrFailed, which the API server sets on
// every Job without a podFailurePolicy, is run as Failed: a replacement
// beside a pod still terminating would run two pods of one index (I2).
// Each such change is returned as a note, for the Job's events.
func LedgerSpec(job *batchv1.Job) (spec batchv1alpha1.SafeJobSpec, notes []string, err error) {
	if ptr.Deref(job.Spec.ManualSelector, false) {
		return spec, nil, fmt.Errorf("spec.manualSelector: SafeJob cannot run a Job with a selector of its own (it owns its pods by UID)")
	}
	in := *job.Spec.DeepCopy()
	in.Selector, in.ManualSelector, in.ManagedBy, in.TTLSecondsAfterFinished = nil, nil, nil, nil
	if ptr.Deref(in.PodReplacementPolicy, "") == batchv1.TerminatingOrFailed {
		in.PodReplacementPolicy = ptr.To(batchv1.Failed)
		notes = append(notes, "spec.podReplacementPolicy is TerminatingOrFailed: SafeJob replaces a pod once it has failed, "+
			"never while it terminates (Failed), so that no two pods of one index run at once")
	}
	if err := ConvertSpec(in, &spec, "spec"); err != nil {
		return spec, nil, err
	}
	return spec, notes, nil
}
