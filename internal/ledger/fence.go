package ledger

import "time"

// Fence bounds when an object committed to a ledger (a launch's pod, a
// scheduled run) can come into existence, so that one recorded Lost can
// never appear afterwards (docs/design.md, the create fence): a create is
// issued only within CreateWindow of the entry's ledger time, every create
// request ends, at the client and at the API server, within CreateTimeout,
// and absence is only trusted LostGrace after the entry.
type Fence struct {
	// CreateWindow is how long after its entry's time an object may still
	// be created. One not created by then is never created; it is recorded
	// Lost after LostGrace.
	CreateWindow time.Duration
	// CreateTimeout bounds every create request, client and server side.
	CreateTimeout time.Duration
}

// ClockMargin is added to a fence's window and timeout to make its
// LostGrace: it covers the second precision of ledger times, the clock
// difference between two controllers, and a storage write already under way
// when a request's deadline passed.
const ClockMargin = 5 * time.Second

// DefaultFence is the operator's fence.
var DefaultFence = Fence{CreateWindow: 15 * time.Second, CreateTimeout: 10 * time.Second}

// OrDefault returns f, or DefaultFence when f is not fully set.
func (f Fence) OrDefault() Fence {
	if f.CreateWindow <= 0 || f.CreateTimeout <= 0 {
		return DefaultFence
	}
	return f
}

// LostGrace is how long after its entry's time an object that a live read
// cannot find is recorded Lost: no create of it can land later.
func (f Fence) LostGrace() time.Duration { return f.CreateWindow + f.CreateTimeout + ClockMargin }

// MayCreate reports whether an object committed at committed may still be
// created at now.
func (f Fence) MayCreate(committed, now time.Time) bool {
	return now.Before(committed.Add(f.CreateWindow))
}

// CreateDeadline is the deadline every create request of an object
// committed at committed carries: its window plus the create timeout, so
// that none lands later.
func (f Fence) CreateDeadline(committed time.Time) time.Time {
	return committed.Add(f.CreateWindow + f.CreateTimeout)
}

// ReasonNameTaken is the reason of a Lost entry whose name (a launch's pod,
// a scheduled run) is held by an object the SafeJob does not control: it
// never ran here, and is never adopted, counted, deleted or released.
const ReasonNameTaken = "NameTaken"

// DueForLiveRead returns those of xs, each committed at committed(x), that
// were committed at least LostGrace before now: no create of them can land
// any more, so a live read that does not find one may close it. wait is how
// long until the next of the others is due (0: none).
func DueForLiveRead[T any](f Fence, xs []T, committed func(T) time.Time, now time.Time) (due []T, wait time.Duration) {
	grace := f.OrDefault().LostGrace()
	for _, x := range xs {
		if left := committed(x).Add(grace).Sub(now); left > 0 {
			wait = MinPositive(wait, left)
			continue
		}
		due = append(due, x)
	}
	return due, wait
}
