// Package jobs decides, from a SafeJob's ledger, the pods observed and the
// spec, what to record and what to do next: which launches to commit, which
// pods to create, stop and release, how each pod's launch ended, and when
// the SafeJob is finished. It has no Kubernetes client and no clock of its
// own: every function here is pure.
//
// A reconcile observes its Input (Observe), asks which open launches to
// read live (Observation.Unaccounted), adds the pods those reads find
// (Observation.AddPods) and decides (Observation.Decide): one replay of the
// ledger serves both questions. The package-level Unaccounted and Decide do
// the same on an Input of their own, replaying it each time.
//
// The files, by concern:
//
//   - decide.go: Input and Plan, Unaccounted and Decide, and the steps of
//     one decision in order (decideOn).
//   - observe.go: Observation, one replay of an Input's ledger and its
//     pods by name, shared by Unaccounted and Decide.
//   - outcomes.go: recording how open launches ended (terminal, gone,
//     taken) and what to do with the pods of closed launches.
//   - launch.go: committing launches of the next attempts within
//     parallelism, the launch room and pod create refusals.
//   - stop.go: choosing the launches to stop and stopping them in two
//     steps (a Stopping entry, then the delete), and the stop reasons.
//   - suspend.go: suspension, queue admission and the clock of
//     activeDeadlineSeconds.
//   - finish.go: the target conditions (success or failure decided),
//     Complete or Failed once no pod runs, and ttlSecondsAfterFinished.
//   - backoff.go: the backoff delay before a failed pod is replaced, and
//     backoffLimit over container restarts.
//   - policy.go: podFailurePolicy, classifying a failed pod.
//   - success.go: successPolicy, matching the succeeded indexes.
//   - status.go: the status written: the ledger appended, packed and
//     folded, and the counters derived from it.
//   - spec.go: what the spec implies: work queues and index bounds.
//   - pods.go: reading pods: labels, phase, readiness, the finalizer, and
//     when a pod ended.
//   - names.go: pod names of launches.
//   - state.go: State, what a ledger means, Replay, and queries on it.
//   - apply.go: checking and applying one ledger entry to a State.
//   - checkpoint.go: reading and writing the ledger's checkpoint, and
//     which pods of listed runs it holds.
//   - fold.go: Fold, moving closed launches into the checkpoint.
//   - pack.go: runs of launches and stops listed as one entry with a
//     count (Pack, Unpack, expand).
//   - workload.go: a queued SafeJob's Workload: its input and plan, and the
//     decision before the pods (create it, the gate the pods run under).
//   - workload_names.go: the Workload's names and which Workload is the
//     SafeJob's own.
//   - workload_gate.go: the admission a Workload's status gives, and its
//     pod counts.
//   - workload_spec.go: changes of the Workload's spec: suspend, queue, a
//     larger pod set.
//   - workload_status.go: the decision after the pods: the Workload's
//     status, finalizer and replacement.
//   - multikueue.go: the Workload of a SafeJob dispatched by MultiKueue.
//   - topology.go: the topology request of the pod set.
package jobs
