// Package logging holds the operator's log sink wrapper.
package logging

import (
	"slices"

	"github.com/go-logr/logr"
)

// Lazy returns l with WithValues deferred: the key-value pairs are kept and
// handed to l's sink with each line written, instead of being encoded when
// they are added. controller-runtime gives every reconcile a logger with
// values of its own (the controller, the object, a reconcile ID); zap
// encodes them at once, on every reconcile, though a reconcile seldom writes
// a line. The lines written are the same, but for two things: a value is
// read when a line is written, not when it was added; and a Kubernetes
// object among the values is written as controller-runtime's encoder
// writes one given with a line (a reference, unless --zap-devel), not in
// full.
func Lazy(l logr.Logger) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l
	}
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1) // the frame of lazySink's own Info or Error
	}
	return l.WithSink(&lazySink{sink: sink})
}

// lazySink passes every call to sink, with values before the call's own
// key-value pairs.
type lazySink struct {
	sink   logr.LogSink
	values []any
}

var _ logr.CallDepthLogSink = &lazySink{}

// Init does nothing: sink was initialised when its logger was made.
func (s *lazySink) Init(logr.RuntimeInfo) {}

func (s *lazySink) Enabled(level int) bool { return s.sink.Enabled(level) }

func (s *lazySink) Info(level int, msg string, keysAndValues ...any) {
	s.sink.Info(level, msg, s.with(keysAndValues)...)
}

func (s *lazySink) Error(err error, msg string, keysAndValues ...any) {
	s.sink.Error(err, msg, s.with(keysAndValues)...)
}

func (s *lazySink) with(keysAndValues []any) []any {
	if len(s.values) == 0 {
		return keysAndValues
	}
	return append(slices.Clip(s.values), keysAndValues...)
}

func (s *lazySink) WithValues(keysAndValues ...any) logr.LogSink {
	if len(keysAndValues)%2 != 0 {
		// A key without a value: handed over now, for the sink to report as
		// it would have, and so that it does not take the first value of a
		// line as its own.
		sink := s.sink
		if len(s.values) > 0 {
			sink = sink.WithValues(s.values...)
		}
		return &lazySink{sink: sink.WithValues(keysAndValues...)}
	}
	return &lazySink{sink: s.sink, values: append(slices.Clip(s.values), keysAndValues...)}
}

func (s *lazySink) WithName(name string) logr.LogSink {
	return &lazySink{sink: s.sink.WithName(name), values: s.values}
}

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.sink.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &lazySink{sink: cd.WithCallDepth(depth), values: s.values}
}
