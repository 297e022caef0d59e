package ledger

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a parsed spec.schedule in its time zone.
//
// The rules for clock trouble, which plain cron gets wrong:
//   - Fall-back (a wall-clock hour happens twice): a scheduled wall-clock time
//     runs once, at its first occurrence. Times whose wall-clock reading is not
//     later than the previous run's are skipped.
//   - Spring-forward (a wall-clock hour does not exist): scheduled times that
//     fall in the gap run once, at the first instant after it, merged with a
//     time the schedule has there anyway. Nothing is skipped silently.
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
	return &Schedule{sched: s, loc: loc}, nil
}

// Next returns the first scheduled time strictly after t.
func (s *Schedule) Next(t time.Time) time.Time {
	t = t.In(s.loc)
	from := t
	spec, isSpec := s.sched.(*cron.SpecSchedule)
	for {
		n := s.sched.Next(t)
		if n.IsZero() || !isSpec {
			return n // no time at all (e.g. Feb 31), or @every
		}
		if gap := s.gapRun(spec, t, n); !gap.IsZero() {
			return gap
		}
		if !wallAfter(n, from) {
			t = n // fall-back repeat of a wall-clock time already passed: skip it
			continue
		}
		return n
	}
}

// gapRun returns the end of a spring-forward gap lying between after and
// next (both exclusive of the gap) when the schedule names a wall-clock time
// inside it; the zero time otherwise.
func (s *Schedule) gapRun(spec *cron.SpecSchedule, after, next time.Time) time.Time {
	_, offA := after.Zone()
	_, offN := next.Zone()
	if offN <= offA {
		return time.Time{}
	}
	// Find the transition: the first instant whose offset is offN.
	lo, hi := after, next
	for hi.Sub(lo) > time.Minute {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Minute)
		if _, off := mid.Zone(); off == offN {
			hi = mid
		} else {
			lo = mid
		}
	}
	transition := hi.Truncate(time.Minute)
	if !transition.After(after) {
		return time.Time{}
	}
	// The wall-clock minutes that do not exist: from the transition read
	// under the old offset, for the size of the jump.
	wall := transition.In(time.FixedZone("", offA))
	for m := 0; m < (offN-offA)/60; m++ {
		if w := wall.Add(time.Duration(m) * time.Minute); specMatches(spec, w) {
			return transition
		}
	}
	return time.Time{}
}

// specMatches reports whether a wall-clock minute is named by the schedule.
func specMatches(s *cron.SpecSchedule, w time.Time) bool {
	bit := func(field uint64, v int) bool { return field&(1<<uint(v)) != 0 }
	const starBit = 1 << 63
	if !bit(s.Minute, w.Minute()) || !bit(s.Hour, w.Hour()) || !bit(s.Month, int(w.Month())) {
		return false
	}
	domMatch, dowMatch := bit(s.Dom, w.Day()), bit(s.Dow, int(w.Weekday()))
	if s.Dom&starBit != 0 || s.Dow&starBit != 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// wallAfter reports whether a's wall-clock reading is later than b's.
func wallAfter(a, b time.Time) bool {
	wa := time.Date(a.Year(), a.Month(), a.Day(), a.Hour(), a.Minute(), a.Second(), 0, time.UTC)
	wb := time.Date(b.Year(), b.Month(), b.Day(), b.Hour(), b.Minute(), b.Second(), 0, time.UTC)
	return wa.After(wb)
}

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
