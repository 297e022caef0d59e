package runs

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// The brute-force oracle of a cron schedule in a time zone, as the README
// states the rules ("Daylight saving time: a wall-clock time that happens
// twice (fall-back) runs once, at its first occurrence; times that do not
// exist (spring-forward) run once at the end of the gap"):
//
//	A wall-clock minute named by the schedule runs at the first instant at
//	which the zone's clock reads that minute or later.
//
// The oracle walks real time minute by minute (every offset and transition
// of the zones below falls on a whole minute) and keeps the latest
// wall-clock reading seen so far, H. At each instant i, with reading W(i),
// the named minutes in (H, W(i)] run at i, and H becomes max(H, W(i)):
//
//   - in an ordinary minute (H, W(i)] is W(i) alone;
//   - after a spring-forward of k minutes it holds the k minutes of the gap
//     and W(i): whichever of them are named run once, at i, the end of the
//     gap, merged with a time the schedule names there anyway;
//   - after a fall-back W(i) <= H until the clock passes H again: a repeated
//     reading never runs a second time; its first occurrence ran.
//
// The scheduled instants are the distinct instants at which something runs.
// Next(t) is the first of them strictly after t; MostRecent(earliest, now)
// is the last of them in (earliest, now], with the others in that window
// counted as missed, and the first after now.
type oracleSchedule struct {
	expr  string
	match func(w wallMinute) bool
}

// wallMinute is a reading of a zone's clock on a whole minute.
type wallMinute struct {
	minute, hour, day int
	month             time.Month
	weekday           time.Weekday
}

var oracleSchedules = []oracleSchedule{
	{"30 2 * 3 0", func(w wallMinute) bool { // Sundays in March at 02:30
		return w.minute == 30 && w.hour == 2 && w.month == time.March && w.weekday == time.Sunday
	}},
	{"30 2 29 3 *", func(w wallMinute) bool {
		return w.minute == 30 && w.hour == 2 && w.day == 29 && w.month == time.March
	}},
	{"0 * * * *", func(w wallMinute) bool { return w.minute == 0 }},
	{"30 1 * * *", func(w wallMinute) bool { return w.minute == 30 && w.hour == 1 }},
	{"*/15 2 * * *", func(w wallMinute) bool { return w.minute%15 == 0 && w.hour == 2 }},
	{"0 0 29 2 *", func(w wallMinute) bool {
		return w.minute == 0 && w.hour == 0 && w.day == 29 && w.month == time.February
	}},
	{"0 0 * * *", func(w wallMinute) bool { return w.minute == 0 && w.hour == 0 }}, // Santiago skips midnight
	{"*/30 * * * *", func(w wallMinute) bool { return w.minute%30 == 0 }},          // Lord Howe moves by 30 minutes
}

var oracleZones = []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "UTC"}

// oracleRuns walks [from, to) minute by minute and returns, for each
// schedule, the instants at which it runs. The walk starts warmup before
// from so that H is right from the start.
func oracleRuns(loc *time.Location, from, to time.Time, scheds []oracleSchedule) [][]time.Time {
	const warmup = 3 * 24 * time.Hour
	out := make([][]time.Time, len(scheds))
	var high int64 // H as Unix seconds of the UTC-coded reading
	started := false
	for i := from.Add(-warmup); i.Before(to); i = i.Add(time.Minute) {
		_, off := i.In(loc).Zone()
		wall := i.Unix() + int64(off)
		if !started {
			high, started = wall, true
			continue
		}
		for w := high + 60; w <= wall; w += 60 {
			if i.Before(from) {
				continue
			}
			r := time.Unix(w, 0).UTC()
			_, mo, d := r.Date()
			reading := wallMinute{minute: int(w/60%60+60) % 60, hour: int(w/3600%24+24) % 24, day: d, month: mo,
				weekday: r.Weekday()}
			for k, s := range scheds {
				if s.match(reading) {
					if n := len(out[k]); n == 0 || !out[k][n-1].Equal(i) {
						out[k] = append(out[k], i)
					}
				}
			}
		}
		high = max(high, wall)
	}
	return out
}

// firstAfter is the oracle's Next: the first run strictly after t.
func firstAfter(runs []time.Time, t time.Time) (time.Time, bool) {
	k := sort.Search(len(runs), func(k int) bool { return runs[k].After(t) })
	if k == len(runs) {
		return time.Time{}, false
	}
	return runs[k], true
}

// TestScheduleMatchesBruteForce checks Next along whole schedules, Next from
// arbitrary instants (in gaps, in repeated hours, off the minute) and
// MostRecent over random windows against the oracle above, in zones with
// one-hour, 30-minute and midnight transitions, over ten years (two with
// -short).
func TestScheduleMatchesBruteForce(t *testing.T) {
	years := 10
	if testing.Short() {
		years = 2
	}
	from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(years, 0, 0)
	for _, zone := range oracleZones {
		t.Run(zone, func(t *testing.T) {
			t.Parallel()
			loc := mustZone(t, zone)
			all := oracleRuns(loc, from, to, oracleSchedules)
			rng := rand.New(rand.NewPCG(uint64(len(zone)), 18))
			for k, os := range oracleSchedules {
				s, err := ParseSchedule(os.expr, zone)
				if err != nil {
					t.Fatal(err)
				}
				c := &oracleCheck{t: t, what: fmt.Sprintf("%q in %s", os.expr, zone), s: s, loc: loc, runs: all[k],
					from: from, to: to, rng: rng}
				c.chain()
				c.nextFromAnywhere()
				c.mostRecent()
			}
		})
	}
}

// oracleCheck compares one schedule in one zone with the oracle's runs in
// [from, to).
type oracleCheck struct {
	t        *testing.T
	what     string
	s        *Schedule
	loc      *time.Location
	runs     []time.Time
	from, to time.Time
	rng      *rand.Rand
}

// probeLimit keeps probes a year inside the walk; a next run the walk does
// not reach is not checked.
func (c *oracleCheck) probeLimit() time.Time { return c.to.Add(-400 * 24 * time.Hour) }

func (c *oracleCheck) randomTime() time.Time {
	return c.from.Add(time.Duration(c.rng.Int64N(int64(c.probeLimit().Sub(c.from)))))
}

// chain walks Next from the start of the range to its end.
func (c *oracleCheck) chain() {
	k := 0
	for cur := c.s.Next(c.from.Add(-time.Second)); !cur.IsZero() && cur.Before(c.to); cur = c.s.Next(cur) {
		if k >= len(c.runs) || !cur.Equal(c.runs[k]) {
			want := "nothing"
			if k < len(c.runs) {
				want = c.runs[k].In(c.loc).String()
			}
			c.t.Fatalf("%s: run %d at %s, want %s", c.what, k, cur.In(c.loc), want)
		}
		k++
	}
	if k != len(c.runs) {
		c.t.Fatalf("%s: Next walked %d runs, the oracle has %d; first left out %s", c.what, k, len(c.runs), c.runs[k].In(c.loc))
	}
}

// nextFromAnywhere checks Next from random instants, from instants around
// every zone transition (inside gaps and repeated hours, off the minute),
// and from around the runs near a transition and a sample of the others.
func (c *oracleCheck) nextFromAnywhere() {
	limit := c.probeLimit()
	var probes, transitions []time.Time
	for range 300 {
		probes = append(probes, c.randomTime())
	}
	for at := c.from; ; {
		_, end := at.In(c.loc).ZoneBounds()
		if end.IsZero() || !end.Before(limit) {
			break
		}
		transitions = append(transitions, end)
		for _, d := range []time.Duration{-90, -61, -60, -31, -30, -1, 0, 1, 29, 30, 31, 59, 60, 61, 90} {
			probes = append(probes, end.Add(d*time.Minute), end.Add(d*time.Minute+17*time.Second))
		}
		at = end
	}
	for k, r := range c.runs {
		near := slices.ContainsFunc(transitions, func(tr time.Time) bool { return r.Sub(tr).Abs() <= 3*time.Hour })
		if near || k%max(len(c.runs)/200, 1) == 0 {
			probes = append(probes, r, r.Add(-time.Second), r.Add(-time.Nanosecond), r.Add(59*time.Second))
		}
	}
	for _, p := range probes {
		want, known := firstAfter(c.runs, p)
		if p.Before(c.from) || !p.Before(limit) || !known {
			continue
		}
		if got := c.s.Next(p); !got.Equal(want) {
			c.t.Errorf("%s: Next(%s) = %s, want %s", c.what, p.In(c.loc), got.In(c.loc), want.In(c.loc))
		}
	}
}

// mostRecent checks MostRecent over windows up to ten days long, and a few
// up to a year.
func (c *oracleCheck) mostRecent() {
	for k := range 100 {
		longest := 10 * 24 * time.Hour
		if k%25 == 0 {
			longest = 365 * 24 * time.Hour
		}
		earliest := c.randomTime()
		now := earliest.Add(time.Duration(c.rng.Int64N(int64(longest))))
		if !now.Before(c.probeLimit()) {
			continue
		}
		lo := sort.Search(len(c.runs), func(k int) bool { return c.runs[k].After(earliest) })
		hi := sort.Search(len(c.runs), func(k int) bool { return c.runs[k].After(now) })
		var wantRecent time.Time
		var wantMissed int64
		if hi > lo {
			wantRecent, wantMissed = c.runs[hi-1], int64(hi-lo-1)
		}
		wantNext, known := firstAfter(c.runs, now)
		recent, missed, next, ok := c.s.MostRecent(earliest, now)
		if !known {
			wantNext = next // beyond the walk: the oracle cannot say
		}
		if !recent.Equal(wantRecent) || missed != wantMissed || !next.Equal(wantNext) || ok != (hi > lo) {
			c.t.Errorf("%s: MostRecent(%s, %s) = %s, %d missed, next %s, %v; want %s, %d, %s, %v", c.what,
				earliest.In(c.loc), now.In(c.loc), recent.In(c.loc), missed, next.In(c.loc), ok,
				wantRecent.In(c.loc), wantMissed, wantNext.In(c.loc), hi > lo)
		}
	}
}

// TestScheduleSpringForwardNamedInGap pins the two schedules that name
// only a time inside Berlin's spring-forward gap: 2026-03-29 02:30 does not
// exist, and each runs at 03:00 CEST, the end of the gap.
func TestScheduleSpringForwardNamedInGap(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	endOfGap := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC) // 03:00 CEST
	for _, expr := range []string{"30 2 * 3 0", "30 2 29 3 *"} {
		s, err := ParseSchedule(expr, "Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, berlin)); !got.Equal(endOfGap) {
			t.Errorf("%q: Next from the day before = %s, want %s", expr, got.In(berlin), endOfGap.In(berlin))
		}
		recent, missed, _, ok := s.MostRecent(time.Date(2026, 3, 1, 0, 0, 0, 0, berlin), time.Date(2026, 3, 31, 0, 0, 0, 0, berlin))
		if !ok || !recent.Equal(endOfGap) {
			t.Errorf("%q: MostRecent over March 2026 = %s (%d missed, ok %v), want %s", expr, recent.In(berlin), missed, ok, endOfGap.In(berlin))
		}
	}
}
