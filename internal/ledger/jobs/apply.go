package jobs

import (
	"fmt"
	"time"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
)

// apply adds one entry to the state, checking it against what came before.
func (st *State) apply(e *batchv1alpha1.LedgerEntry) error {
	if e.Index < 0 || e.Attempt < 0 {
		return fmt.Errorf("negative index or attempt")
	}
	switch e.Type {
	case batchv1alpha1.EntryLaunched:
		return expand(e, st.foldedInReplay, st.applyLaunch)
	case batchv1alpha1.EntryStopping:
		return expand(e, st.foldedInReplay, st.applyEnd)
	case batchv1alpha1.EntryScheduled:
		return fmt.Errorf("entry type Scheduled is not valid in a SafeJob without schedule")
	}
	return st.applyEnd(e)
}

// applyLaunch opens a launch: the next attempt of an unfinished, idle index.
func (st *State) applyLaunch(e *batchv1alpha1.LedgerEntry) error {
	if st.done(e.Index) {
		return fmt.Errorf("launch of finished index %d", e.Index)
	}
	if e.Attempt != st.Attempts[e.Index] {
		return fmt.Errorf("launch of index %d attempt %d, want attempt %d", e.Index, e.Attempt, st.Attempts[e.Index])
	}
	if !hasPodSuffix(e.Pod, e.Index, e.Attempt) {
		// PodName's suffix makes a pod's name that of one launch only, which
		// Open and Closed, keyed by name, rely on.
		return fmt.Errorf("launch of pod %s names it for another index or attempt than %d/%d", e.Pod, e.Index, e.Attempt)
	}
	if _, dup := st.Open[e.Pod]; dup {
		return fmt.Errorf("pod %s launched twice", e.Pod)
	}
	if st.indexesOpen[e.Index] {
		return fmt.Errorf("launch of index %d while another pod of it is open", e.Index)
	}
	st.Attempts[e.Index]++
	st.indexesOpen[e.Index] = true
	// Its backoff delay is over: the index's last failure no longer matters,
	// and is not kept (so a checkpoint lists failure times only for the
	// indexes that wait, within the size bounds).
	delete(st.LastIndexFailure, e.Index)
	ref := PodRef{Name: e.Pod, Index: e.Index, Attempt: e.Attempt, Seq: e.Seq, Time: e.Time.Time}
	st.Open[e.Pod] = ref
	st.launches = append(st.launches, ref)
	return nil
}

// applyEnd adds an entry about one open launch: that its pod is being
// stopped, or how it ended.
func (st *State) applyEnd(e *batchv1alpha1.LedgerEntry) error {
	ref, ok := st.Open[e.Pod]
	if !ok {
		return fmt.Errorf("%s for pod %s that is not open", e.Type, e.Pod)
	}
	if ref.Index != e.Index || ref.Attempt != e.Attempt {
		return fmt.Errorf("%s for pod %s names index %d attempt %d, launched as %d/%d",
			e.Type, e.Pod, e.Index, e.Attempt, ref.Index, ref.Attempt)
	}
	if e.Type == batchv1alpha1.EntryStopping {
		return st.applyStopping(e) // the launch stays open until the pod has ended
	}
	switch e.Type {
	case batchv1alpha1.EntrySucceeded:
		st.Succeeded.Add(e.Index)
		st.FailuresSinceSuccess, st.LastFailure = 0, time.Time{}
		if e.Time.After(st.LastSuccess) {
			st.LastSuccess = e.Time.Time
		}
	case batchv1alpha1.EntryFailed:
		if err := st.applyFailure(e); err != nil {
			return err
		}
	case batchv1alpha1.EntryLost:
		st.Lost++
	case batchv1alpha1.EntryEvicted:
		st.Evicted++
	default:
		return fmt.Errorf("unknown entry type %q", e.Type)
	}
	delete(st.Open, e.Pod)
	st.launchesStale = true
	delete(st.Stopping, e.Pod)
	delete(st.indexesOpen, ref.Index)
	st.Closed[e.Pod] = ref
	return nil
}

// applyStopping records that the controller stops an open launch's pod,
// and why: how the pod ends is then recorded as the reason says.
func (st *State) applyStopping(e *batchv1alpha1.LedgerEntry) error {
	if _, dup := st.Stopping[e.Pod]; dup {
		return fmt.Errorf("pod %s stopped twice", e.Pod)
	}
	if e.Reason == "" {
		return fmt.Errorf("entry %s for pod %s has no reason", e.Type, e.Pod)
	}
	st.Stopping[e.Pod] = e.Reason
	return nil
}

func (st *State) applyFailure(e *batchv1alpha1.LedgerEntry) error {
	if e.Time.After(st.LastSuccess) {
		st.FailuresSinceSuccess++
		if e.Time.After(st.LastFailure) {
			st.LastFailure = e.Time.Time
		}
	}
	st.LastIndexFailure[e.Index] = e.Time.Time
	switch e.Reason {
	case batchv1alpha1.FailReasonIgnored:
		st.Ignored++
		return nil
	case batchv1alpha1.FailReasonCounted:
	case batchv1alpha1.FailReasonFailIndex:
		st.FailedIndexes.Add(e.Index)
	case batchv1alpha1.FailReasonFailJob:
		st.FailJob = true
	default:
		return fmt.Errorf("unknown failure reason %q", e.Reason)
	}
	st.Failed++
	st.Failures[e.Index]++
	return nil
}
