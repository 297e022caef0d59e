// Package controller runs SafeJobs: it gathers what the cluster shows, lets
// internal/ledger/jobs and internal/ledger/runs decide, and carries out the
// plan. The reconciler holds its configuration (Options), its safety memory
// (tracker) and its pacing (pacer) apart; docs/design.md has the protocol.
//
// The files, by concern:
//
//   - safejob_controller.go: the reconciler, Reconcile and the job path.
//   - options.go: Options and Pacing, and the operator's defaults.
//   - setup.go: the watches, indexes, work queue and background runnables.
//   - gather.go: what one reconcile reads (cache, live reads, memory).
//   - commit.go: the one status write, the ledger commit.
//   - podbuild.go, podwrites.go: the pods a plan creates, releases, deletes.
//   - podevents.go: the pod informer's handler.
//   - finalizers.go: releases of pods, runs and Workloads that no ledger
//     will record.
//   - releases.go: the queue of background finalizer releases.
//   - relabel.go, sweep.go: pods that lost the SafeJob name label.
//   - memory.go, tracker.go: the safety state kept beyond the cache.
//   - pacing.go, windowpacing.go, window.go, ready.go: pacing, for
//     throughput alone (the pacer and the launch window).
//   - schedule.go: scheduled SafeJobs and their runs.
//   - kueue.go, multikueue.go: Workloads and MultiKueue dispatch.
//   - managedjob.go: batch/v1 Jobs that name SafeJob in spec.managedBy.
//   - events.go, metrics.go, held.go: what the operator tells users.
//   - servertimeout.go, ttl.go: request timeouts and ttlSecondsAfterFinished.
package controller
