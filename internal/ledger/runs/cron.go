package runs

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed spec.schedule in its time zone.
//
// A cron schedule names wall-clock minutes; each named minute runs at the
// first instant at which the zone's clock reads that minute or later. That
// one rule covers the clock trouble plain cron gets wrong:
//   - Fall-back (a wall-clock hour happens twice): a named time runs once, at
//     its first occurrence; the repeat is a reading the clock already had.
//   - Spring-forward (a wall-clock hour does not exist): named times in the
//     gap run once, at the first instant after it (the end of the gap),
//     merged with a time the schedule names there anyway. Nothing is skipped
//     silently.
//
// @every schedules count real elapsed time and are not affected by either.
type Schedule struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseSchedule parses a standard 5-field cron expression, a macro such as
// @hourly, or "@every <duration>", evaluated in timeZone (an IANA name; ""
// means UTC).
func ParseSchedule(schedule, timeZone string) (*Schedule, error) {
	loc := time.UTC
	if timeZone != "" {
		var err error
		if loc, err = time.LoadLocation(timeZone); err != nil {
			return nil, fmt.Errorf("unknown time zone %q: %w", timeZone, err)
		}
	}
	s, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, fmt.Errorf("invalid schedule %q: %w", schedule, err)
	}
	if spec, ok := s.(*cron.SpecSchedule); ok && spec.Location != time.Local {
		return nil, fmt.Errorf("invalid schedule %q: a time zone in the schedule is not supported; set timeZone", schedule)
	}
	return &Schedule{sched: s, loc: loc}, nil
}

// maxFallBack bounds how far back a clock reading later than the current
// one is looked for: no zone has set its clock back by more.
const maxFallBack = 48 * time.Hour

// Next returns the first scheduled time strictly after t; the zero time
// when the schedule names no time in the five years after t.
func (s *Schedule) Next(t time.Time) time.Time {
	spec, isSpec := s.sched.(*cron.SpecSchedule)
	if !isSpec {
		return s.sched.Next(t) // @every
	}
	t = t.In(s.loc)
	// The named minutes the clock has not read by t are those from the
	// first minute after its reading at t, and at or after the reading just
	// before any recent fall-back (the clock read everything below it).
	_, offset := t.Zone()
	unread := floorDiv(t.Unix()+int64(offset), 60)*60 + 60
	for period := t; ; {
		start, _ := period.ZoneBounds()
		if start.IsZero() || t.Sub(start) > maxFallBack {
			break
		}
		period = start.Add(-time.Nanosecond)
		_, offsetBefore := period.Zone()
		unread = max(unread, ceilDiv(start.Unix()+int64(offsetBefore), 60)*60)
	}
	// The first named minute among them runs first: the instant at which
	// the clock first reads it or later is never earlier for a later minute.
	named := spec.Next(time.Unix(unread-1, 0).UTC())
	if named.IsZero() {
		return time.Time{}
	}
	return s.firstReading(t, named.Unix())
}

// firstReading returns the first instant from t on at which the clock reads
// wall (Unix seconds of the reading coded in UTC) or later: the instant of
// that reading, or the end of the spring-forward gap that holds it.
func (s *Schedule) firstReading(t time.Time, wall int64) time.Time {
	for period := t; ; {
		_, offset := period.Zone()
		_, end := period.ZoneBounds()
		at := wall - int64(offset)
		switch {
		case at <= period.Unix():
			return period // the reading fell in the gap before this period
		case end.IsZero() || at < end.Unix():
			return time.Unix(at, 0).In(s.loc)
		}
		period = end
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// MostRecent returns the latest scheduled time in (earliest, now], how many
// scheduled times in that window came before it (missed), and the next
// scheduled time after now. ok is false when no time falls in the window.
// The walk is bounded by the window, so a window of years over a schedule of
// seconds costs time, never correctness.
func (s *Schedule) MostRecent(earliest, now time.Time) (recent time.Time, missed int64, next time.Time, ok bool) {
	if every, isEvery := s.sched.(cron.ConstantDelaySchedule); isEvery {
		// @every: the times are start + k*Delay, k >= 1; count them directly.
		start := earliest.Truncate(time.Second)
		k := int64(now.Sub(start) / every.Delay)
		if k < 1 {
			return time.Time{}, 0, start.Add(every.Delay), false
		}
		recent = start.Add(time.Duration(k) * every.Delay)
		return recent, k - 1, recent.Add(every.Delay), true
	}
	for t := s.Next(earliest); !t.IsZero(); t = s.Next(t) {
		if t.After(now) {
			return recent, missed, t, ok
		}
		if ok {
			missed++
		}
		recent, ok = t, true
	}
	return recent, missed, time.Time{}, ok
}
