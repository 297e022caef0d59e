// Package recorder writes the operator's events (events.k8s.io/v1) as
// client-go's events broadcaster does, with its memory and goroutines
// bounded by count instead of by time.
//
// client-go's broadcaster keeps a copy of every event it sent for six to
// twelve minutes, to tell a repeat (an isomorphic event: same type, reason,
// action, reporter, regarding and related object) and turn it into a
// series, and it starts two goroutines for every event. The operator's events
// name the SafeJob as it was (its resourceVersion), so they seldom repeat,
// and those copies grew with the rate of events, not with anything the
// operator needs (docs/performance.md, "Memory"). Here the copies live in a
// least-recently-used cache of a fixed size, writes go through a bounded
// queue to a fixed set of writers, and what the API server receives is the
// same: a new event is created, its first repeat makes it a series of two,
// later repeats are counted and written when the series is refreshed or
// ends.
package recorder

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/wait"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// The series timings and the retries are client-go's broadcaster's, so that
// events read the same whichever writes them.
const (
	// seriesEnd is how long after its last repeat a series ends (its
	// final count written) and a single event is forgotten.
	seriesEnd = 6 * time.Minute
	// seriesRefresh is how often a series still repeating is written.
	seriesRefresh = 30 * time.Minute
	// maxTries is how many times one write is tried.
	maxTries = 12
	// retryAfter is the wait between tries, with a quarter of jitter.
	retryAfter = 10 * time.Second
	// sweepEvery is how often ended series and forgotten events are found.
	sweepEvery = time.Minute
)

// Defaults of Options.
const (
	DefaultCacheSize   = 4096
	DefaultQueueLength = 1000
	DefaultWriters     = 4
)

// Options configure a Recorder; zero values take the defaults.
type Options struct {
	// Controller is the events' reportingController; Instance their
	// reportingInstance (Controller-hostname when empty).
	Controller, Instance string
	// CacheSize is how many recent events are kept to tell repeats
	// (client-go's record package keeps 4,096 as well).
	CacheSize int
	// QueueLength is how many writes may wait for the writers, shared
	// among them; an event that finds its writer's queue full is dropped
	// (and counted), as a broadcaster drops events a slow sink cannot take.
	QueueLength int
	// Writers is how many writes are in flight at once.
	Writers int
	// Dropped, when set, is called for every event dropped.
	Dropped func()
	// Clock is the clock; a real one when nil.
	Clock clock.WithTicker
	// RetryAfter is the wait between tries of a failed write (tests
	// shorten it).
	RetryAfter time.Duration
}

// Recorder implements events.EventRecorder. Eventf never blocks; the
// writes start once Start runs.
type Recorder struct {
	scheme *runtime.Scheme
	sink   events.EventSink
	opts   Options
	log    logr.Logger
	queues []chan *eventsv1.Event // one per writer
	mu     sync.Mutex
	recent *list.List // of *entry, most recently observed first
	byKey  map[eventKey]*list.Element

	dropMu     sync.Mutex
	dropped    int       // events dropped since the last log line about it
	dropLogged time.Time // when that line was written
}

var _ events.EventRecorder = &Recorder{}

// entry is one recent event: the object as last sent (a copy no writer
// holds) and how far its series was written.
type entry struct {
	key     eventKey
	event   *eventsv1.Event
	written int32 // the series count last queued for writing (1: the event alone)
	wroteAt time.Time
	seenAt  time.Time
}

// eventKey tells isomorphic events, as client-go's broadcaster does.
type eventKey struct {
	eventType, action, reason, reportingController, reportingInstance string
	regarding, related                                                corev1.ObjectReference
}

// New returns a Recorder writing to sink.
func New(scheme *runtime.Scheme, sink events.EventSink, opts Options, log logr.Logger) *Recorder {
	if opts.Instance == "" {
		host, _ := os.Hostname()
		opts.Instance = opts.Controller + "-" + host
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.QueueLength <= 0 {
		opts.QueueLength = DefaultQueueLength
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = retryAfter
	}
	// Each event's writes go to one writer, so that they reach the API
	// server in order: its create before its series, a series' counts
	// in the order they grew.
	queues := make([]chan *eventsv1.Event, opts.Writers)
	for i := range queues {
		queues[i] = make(chan *eventsv1.Event, max(1, opts.QueueLength/opts.Writers))
	}
	return &Recorder{
		scheme: scheme,
		sink:   sink,
		opts:   opts,
		log:    log,
		queues: queues,
		recent: list.New(),
		byKey:  map[eventKey]*list.Element{},
	}
}

// NewForManager returns a Recorder that writes through mgr's client
// configuration (its own rate limiter, as controller-runtime's recorders
// have) and runs with mgr.
func NewForManager(mgr manager.Manager, opts Options) (*Recorder, error) {
	client, err := eventsv1client.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("creating the events client: %w", err)
	}
	r := New(mgr.GetScheme(), &events.EventSinkImpl{Interface: client}, opts, mgr.GetLogger().WithName("events"))
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("adding the event recorder: %w", err)
	}
	return r, nil
}

// Eventf records an event about regarding (and related, which may be nil),
// as events.EventRecorder says.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	now := r.opts.Clock.Now()
	message := fmt.Sprintf(note, args...)
	refRegarding, err := reference.GetReference(r.scheme, regarding)
	if err != nil {
		r.log.Error(err, "Could not construct a reference; the event is not recorded",
			"eventType", eventtype, "reason", reason, "note", message)
		return
	}
	var refRelated *corev1.ObjectReference
	if related != nil {
		// As client-go: an event whose related object has no reference is
		// still recorded, without it.
		if refRelated, err = reference.GetReference(r.scheme, related); err != nil {
			r.log.V(4).Info("Could not construct a reference to the related object", "error", err.Error())
		}
	}
	if !util.ValidateEventType(eventtype) {
		r.log.Error(nil, "Unsupported event type; the event is not recorded", "eventType", eventtype, "reason", reason)
		return
	}
	namespace := refRegarding.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      util.GenerateEventName(refRegarding.Name, now.UnixNano()),
			Namespace: namespace,
		},
		EventTime:           metav1.MicroTime{Time: now},
		ReportingController: r.opts.Controller,
		ReportingInstance:   r.opts.Instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *refRegarding,
		Related:             refRelated,
		Note:                message,
		Type:                eventtype,
	}
	if write := r.observe(ev, now); write != nil {
		r.enqueue(write)
	}
}

// observe remembers ev and returns what to write: ev itself when new, its
// first repeat's series of two, nothing for later repeats.
func (r *Recorder) observe(ev *eventsv1.Event, now time.Time) *eventsv1.Event {
	key := keyOf(ev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.byKey[key]; ok {
		e := el.Value.(*entry)
		r.recent.MoveToFront(el)
		e.seenAt = now
		if e.event.Series == nil {
			e.event.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.MicroTime{Time: now}}
			e.written, e.wroteAt = 2, now
			return e.event.DeepCopy()
		}
		e.event.Series.Count++
		e.event.Series.LastObservedTime = metav1.MicroTime{Time: now}
		return nil
	}
	r.byKey[key] = r.recent.PushFront(&entry{key: key, event: ev, written: 1, wroteAt: now, seenAt: now})
	var flush []*eventsv1.Event
	for r.recent.Len() > r.opts.CacheSize {
		if w := r.forget(r.recent.Back()); w != nil {
			flush = append(flush, w)
		}
	}
	for _, w := range flush {
		r.enqueue(w)
	}
	return ev.DeepCopy()
}

// forget drops an entry and returns its series' final count to write, if
// repeats since the last write have not been written. Called with mu held.
func (r *Recorder) forget(el *list.Element) *eventsv1.Event {
	e := el.Value.(*entry)
	r.recent.Remove(el)
	delete(r.byKey, e.key)
	if e.event.Series != nil && e.event.Series.Count > e.written {
		return e.event.DeepCopy()
	}
	return nil
}

// sweep ends the series that stopped repeating, forgets single events
// past seriesEnd and refreshes long series, as client-go's broadcaster
// does every few minutes; it returns what to write.
func (r *Recorder) sweep(now time.Time) []*eventsv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*eventsv1.Event
	for el := r.recent.Back(); el != nil; {
		prev := el.Prev()
		e := el.Value.(*entry)
		switch {
		case now.Sub(e.seenAt) >= seriesEnd:
			if w := r.forget(el); w != nil {
				out = append(out, w)
			}
		case e.event.Series != nil && now.Sub(e.wroteAt) >= seriesRefresh:
			e.written, e.wroteAt = e.event.Series.Count, now
			out = append(out, e.event.DeepCopy())
		}
		el = prev
	}
	return out
}

// cached is how many recent events are kept (for tests).
func (r *Recorder) cached() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recent.Len()
}

func (r *Recorder) enqueue(ev *eventsv1.Event) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ev.Namespace + "/" + ev.Name))
	select {
	case r.queues[h.Sum32()%uint32(len(r.queues))] <- ev:
	default:
		r.drop(ev)
	}
}

// drop counts an event the queue could not take, and says so in the log
// at most once a minute.
func (r *Recorder) drop(ev *eventsv1.Event) {
	if r.opts.Dropped != nil {
		r.opts.Dropped()
	}
	r.log.V(2).Info("Dropped an event", "reason", ev.Reason, "regarding", ev.Regarding.Name)
	r.dropMu.Lock()
	defer r.dropMu.Unlock()
	r.dropped++
	now := r.opts.Clock.Now()
	if !r.dropLogged.IsZero() && now.Sub(r.dropLogged) < time.Minute {
		return
	}
	r.log.Info("Event writes fall behind the events; events were dropped while the queue was full",
		"dropped", r.dropped, "queueLength", r.opts.QueueLength)
	r.dropped, r.dropLogged = 0, now
}

// Start writes the queued events until ctx ends (a manager.Runnable).
func (r *Recorder) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, queue := range r.queues {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-queue:
					r.write(ctx, ev)
				}
			}
		})
	}
	wg.Go(func() {
		t := r.opts.Clock.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				// The clock's time, not the tick's: a tick may wait.
				for _, ev := range r.sweep(r.opts.Clock.Now()) {
					r.enqueue(ev)
				}
			}
		}
	})
	wg.Wait()
	return nil
}

// write sends one event, trying again while the API server cannot be
// reached, as client-go's broadcaster does.
func (r *Recorder) write(ctx context.Context, ev *eventsv1.Event) {
	for try := 1; ; try++ {
		if !r.send(ctx, ev) {
			return
		}
		if try >= maxTries {
			r.log.Error(nil, "Unable to write an event; retry limit exceeded", "reason", ev.Reason, "regarding", ev.Regarding.Name)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-r.opts.Clock.After(wait.Jitter(r.opts.RetryAfter, 0.25)):
		}
	}
}

// send makes one try and reports whether to try again: a series is
// patched (created when its event is gone), a new event created.
func (r *Recorder) send(ctx context.Context, ev *eventsv1.Event) (retry bool) {
	var err error
	series := ev.Series != nil
	if series {
		var patch []byte
		if patch, err = seriesPatch(ev); err != nil {
			r.log.Error(err, "Unable to compute an event series patch", "reason", ev.Reason)
			return false
		}
		_, err = r.sink.Patch(ctx, ev, patch)
	}
	if !series || util.IsKeyNotFoundError(err) {
		create := ev.DeepCopy()
		create.ResourceVersion = ""
		_, err = r.sink.Create(ctx, create)
	}
	if err == nil {
		return false
	}
	var construct *rest.RequestConstructionError
	var status *apierrors.StatusError
	switch {
	case errors.As(err, &construct):
		r.log.Error(err, "Unable to construct an event; not retried", "reason", ev.Reason)
		return false
	case errors.As(err, &status):
		if apierrors.IsAlreadyExists(err) && series {
			// The patch found no event and the create found one: a new
			// event was written meanwhile; patch it.
			return true
		}
		if !apierrors.IsAlreadyExists(err) {
			r.log.Error(err, "The API server refused an event; not retried", "reason", ev.Reason)
		}
		return false
	}
	r.log.Error(err, "Unable to write an event; will retry", "reason", ev.Reason)
	return true
}

// seriesPatch is the strategic merge patch that sets ev's series, as
// client-go's broadcaster computes it.
func seriesPatch(ev *eventsv1.Event) ([]byte, error) {
	before := ev.DeepCopy()
	before.Series = nil
	old, err := json.Marshal(before)
	if err != nil {
		return nil, fmt.Errorf("encoding the event: %w", err)
	}
	cur, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encoding the event: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(old, cur, eventsv1.Event{})
	if err != nil {
		return nil, fmt.Errorf("computing the series patch: %w", err)
	}
	return patch, nil
}

func keyOf(ev *eventsv1.Event) eventKey {
	k := eventKey{
		eventType:           ev.Type,
		action:              ev.Action,
		reason:              ev.Reason,
		reportingController: ev.ReportingController,
		reportingInstance:   ev.ReportingInstance,
		regarding:           ev.Regarding,
	}
	if ev.Related != nil {
		k.related = *ev.Related
	}
	return k
}
