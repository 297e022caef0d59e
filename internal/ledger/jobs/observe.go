package jobs

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/safejob/safejob/internal/ledger"
)

// Observation is one SafeJob's Input read once: its ledger replayed, and its
// pods mapped by name. A reconcile observes the Input, asks Unaccounted
// which open launches to read live, adds the pods those reads find
// (AddPods), and decides (Decide): the ledger is replayed, and the pods
// mapped, once for both.
//
// The Input stays the caller's, and each method reads it as it is then:
// Gone, Taken and Now, which the live reads set, and Queue and LaunchRoom,
// may change between the calls. Status and LastSeen must not change once
// observed (observe the Input again instead), and Pods changes through
// AddPods only.
type Observation struct {
	in *Input
	// state is the State of in.Status.Ledger, nil once a Decide has taken it
	// (the decision changes it): the next method to need it replays again.
	state *State
	// err is why in.Status.Ledger does not replay; Unaccounted and Decide
	// return it.
	err error
	// observed holds every observed pod by name (observePods), kept up to
	// date by AddPods; Unaccounted and Decide only read it.
	observed map[string]*corev1.Pod
}

// Observe replays in's ledger and maps its observed pods by name. A ledger
// that does not replay makes Unaccounted and Decide return the error.
func Observe(in *Input) *Observation {
	st, err := Replay(&in.Status.Ledger)
	return &Observation{in: in, state: st, err: err, observed: observePods(in)}
}

// Input is the Input observed.
func (o *Observation) Input() *Input { return o.in }

// AddPods appends pods to the Input's Pods, as found after Observe (a live
// read of an unaccounted launch), and maps them as Observe would have.
func (o *Observation) AddPods(pods ...*corev1.Pod) {
	o.in.Pods = append(o.in.Pods, pods...)
	for _, pod := range pods {
		observePod(o.observed, pod)
	}
}

// Unaccounted is the package's Unaccounted on the observed Input, on the
// replay Observe made.
func (o *Observation) Unaccounted() ([]PodRef, time.Duration, error) {
	st, err := o.replayed()
	if err != nil {
		return nil, 0, err
	}
	in := o.in
	fence := in.Fence.OrDefault()
	var candidates []PodRef
	for _, ref := range sortedOpen(st) {
		switch {
		case o.observed[ref.Name] != nil || in.Gone[ref.Name] || in.Taken[ref.Name]:
		case in.Uncreated[ref.Name] && fence.MayCreate(ref.Time, in.Now): // this process is about to create it
		default:
			candidates = append(candidates, ref)
		}
	}
	due, wait := ledger.DueForLiveRead(fence, candidates, func(r PodRef) time.Time { return r.Time }, in.Now)
	return due, wait, nil
}

// Decide is the package's Decide on the observed Input, the pods added
// since included. It takes the replay Observe made, which the decision
// changes: deciding the same Observation again (say with another
// LaunchRoom) replays the ledger again.
func (o *Observation) Decide() (*Plan, error) {
	st, err := o.replayed()
	if err != nil {
		return nil, err
	}
	o.state = nil
	return decideOn(o.in, st, o.observed)
}

// replayed returns the State of the observed ledger, as the last replay
// left it: Observe's, unless a Decide has taken it since.
func (o *Observation) replayed() (*State, error) {
	if o.err != nil {
		return nil, o.err
	}
	if o.state == nil {
		st, err := Replay(&o.in.Status.Ledger)
		if err != nil {
			return nil, err
		}
		o.state = st
	}
	return o.state, nil
}

// observePods maps in's observed pods by name: those of LastSeen, and over
// them those of Pods, in order (observePod).
func observePods(in *Input) map[string]*corev1.Pod {
	observed := make(map[string]*corev1.Pod, len(in.Pods)+len(in.LastSeen))
	for name, pod := range in.LastSeen {
		observed[name] = pod
	}
	for _, pod := range in.Pods {
		observePod(observed, pod)
	}
	return observed
}

// observePod maps pod by its name unless a pod already mapped under that
// name is known and pod has not ended: a terminal state seen before beats a
// stale cache.
func observePod(observed map[string]*corev1.Pod, pod *corev1.Pod) {
	if known := observed[pod.Name]; known != nil && !IsTerminal(pod) {
		return
	}
	observed[pod.Name] = pod
}
