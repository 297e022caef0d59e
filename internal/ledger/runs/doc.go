// Package runs decides, from a scheduled SafeJob's ledger, the runs observed
// and the spec, what to record and what to do next: which scheduled time to
// commit as a run, which committed runs to create, how each run ended, and
// which runs to release and delete. A run is committed to the ledger before
// it is created, so that it is created once. It has no Kubernetes client and
// no clock of its own: the controller gathers the Input, and Input.Now is the
// time.
//
// Each file holds one concern. Decide's steps, in the order it takes them:
//   - decide.go: Input and Plan, Decide's order of steps, and the helpers
//     every step uses to append entries, delete runs and set conditions.
//   - outcomes.go: the outcome recorded for each open run that finished,
//     was deleted or replaced, vanished, or was never created.
//   - history.go: releasing the finalizers of closed runs, and deleting
//     finished runs beyond spec's history limits.
//   - schedule.go: the schedule's due times: the one to commit now, the
//     times missed, startingDeadlineSeconds, and the cap on open runs.
//   - manual.go: runs asked for by hand (run-now), which stand outside the
//     schedule and its concurrency policy.
//   - create.go: the create window of runs (ledger.Fence): which committed
//     runs to create now, which unobserved ones to read live, and when no
//     create of a run can land any more.
//   - status.go: the parent's status derived from the ledger after the
//     plan's entries, folded when long.
//
// What the steps build on:
//   - concurrency.go: concurrencyPolicy Forbid and Replace: which earlier
//     run holds a new one back, and which runs Replace deletes.
//   - identity.go: what the parent knows of its runs: their UIDs, by which
//     their pods are matched, and their scheduled times.
//   - state.go: Replay, what a run ledger means (State); Covers, which
//     checks that a newer ledger keeps every fact of an older one; and the
//     names of scheduled runs.
//   - fold.go: folding closed runs into the ledger's checkpoint.
//   - cron.go: Schedule, spec.schedule's times in its time zone, across
//     daylight-saving changes.
package runs
