package runs

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestScheduleNext(t *testing.T) {
	berlin, ny := mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York")
	cases := map[string]struct {
		schedule, zone string
		from           time.Time
		want           []time.Time
	}{
		"irregular: 30 6-16/4 on weekdays": {
			schedule: "30 6-16/4 * * 1-5", from: time.Date(2026, 11, 20, 15, 0, 0, 0, time.UTC), // a Friday
			want: []time.Time{
				time.Date(2026, 11, 23, 6, 30, 0, 0, time.UTC), // Monday: the weekend is skipped
				time.Date(2026, 11, 23, 10, 30, 0, 0, time.UTC),
				time.Date(2026, 11, 23, 14, 30, 0, 0, time.UTC),
				time.Date(2026, 11, 24, 6, 30, 0, 0, time.UTC),
			},
		},
		"@every 90s": {
			schedule: "@every 90s", from: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			want: []time.Time{time.Date(2026, 1, 1, 0, 1, 30, 0, time.UTC), time.Date(2026, 1, 1, 0, 3, 0, 0, time.UTC)},
		},
		"@hourly": {
			schedule: "@hourly", from: time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC),
			want: []time.Time{time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)},
		},
		"Feb 31 never comes": {
			schedule: "0 0 31 2 *", from: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			want: []time.Time{{}},
		},
		"Berlin fall-back: 02:30 runs once": {
			schedule: "30 2 * * *", zone: "Europe/Berlin", from: time.Date(2026, 10, 24, 23, 0, 0, 0, berlin),
			want: []time.Time{
				time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), // 02:30 CEST
				time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC), // next day 02:30 CET; the CET repeat is skipped
			},
		},
		"Berlin fall-back: every 30 minutes, the repeated hour once": {
			schedule: "*/30 * * * *", zone: "Europe/Berlin", from: time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), // 02:00 CEST
			want: []time.Time{
				time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), // 02:30 CEST
				time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC),  // 03:00 CET
			},
		},
		"Berlin spring-forward: 02:30 runs at 03:00": {
			schedule: "30 2 * * *", zone: "Europe/Berlin", from: time.Date(2026, 3, 28, 23, 0, 0, 0, berlin),
			want: []time.Time{
				time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), // 03:00 CEST, the end of the gap
				time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC),
			},
		},
		"Berlin spring-forward: every 30 minutes, the gap merged": {
			schedule: "*/30 * * * *", zone: "Europe/Berlin", from: time.Date(2026, 3, 29, 1, 15, 0, 0, berlin),
			want: []time.Time{
				time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), // 01:30 CET
				time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC),  // 03:00 CEST stands for 02:00, 02:30 and 03:00
				time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC),
			},
		},
		"New York fall-back: 01:30 runs once": {
			schedule: "30 1 * * *", zone: "America/New_York", from: time.Date(2026, 10, 31, 22, 0, 0, 0, ny),
			want: []time.Time{
				time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), // 01:30 EDT
				time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC), // 01:30 EST the next day
			},
		},
		"New York spring-forward: 02:30 runs at 03:00": {
			schedule: "30 2 * * *", zone: "America/New_York", from: time.Date(2026, 3, 7, 22, 0, 0, 0, ny),
			want: []time.Time{
				time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), // 03:00 EDT
				time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC),
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := ParseSchedule(tc.schedule, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			var got []time.Time
			cur := tc.from
			for range tc.want {
				cur = s.Next(cur)
				got = append(got, cur.UTC())
				if cur.IsZero() {
					got[len(got)-1] = time.Time{}
					break
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("next times (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestScheduleMostRecent(t *testing.T) {
	now := time.Date(2026, 5, 5, 12, 0, 30, 0, time.UTC)
	cases := map[string]struct {
		schedule             string
		earliest             time.Time
		wantRecent, wantNext time.Time
		wantMissed           int64
		wantOK               bool
	}{
		"more than 100 missed": {
			schedule: "* * * * *", earliest: now.Add(-3 * time.Hour),
			wantRecent: time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC), wantMissed: 179,
			wantNext: time.Date(2026, 5, 5, 12, 1, 0, 0, time.UTC), wantOK: true,
		},
		"startingDeadlineSeconds window of 91s": {
			schedule: "* * * * *", earliest: now.Add(-91 * time.Second),
			wantRecent: time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC), wantMissed: 1,
			wantNext: time.Date(2026, 5, 5, 12, 1, 0, 0, time.UTC), wantOK: true,
		},
		"nothing due yet": {
			schedule: "@hourly", earliest: time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC),
			wantNext: time.Date(2026, 5, 5, 13, 0, 0, 0, time.UTC),
		},
		"never": {schedule: "0 0 30 2 *", earliest: now.Add(-time.Hour)},
		"@every 5s over a day": {
			schedule: "@every 5s", earliest: now.Add(-24 * time.Hour),
			wantRecent: now, wantMissed: 24*720 - 1, wantNext: now.Add(5 * time.Second), wantOK: true,
		},
		"@every 5s, none due": {
			schedule: "@every 5s", earliest: now.Add(-4 * time.Second), wantNext: now.Add(time.Second),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := ParseSchedule(tc.schedule, "")
			if err != nil {
				t.Fatal(err)
			}
			recent, missed, next, ok := s.MostRecent(tc.earliest, now)
			if !recent.Equal(tc.wantRecent) || missed != tc.wantMissed || !next.Equal(tc.wantNext) || ok != tc.wantOK {
				t.Errorf("MostRecent = %s, %d missed, next %s, ok %v; want %s, %d, %s, %v",
					recent, missed, next, ok, tc.wantRecent, tc.wantMissed, tc.wantNext, tc.wantOK)
			}
		})
	}
}

// TestEveryMostRecentMatchesWalk checks the direct count of @every times
// against a walk with Next, from earliest times with and without fractions
// of a second.
func TestEveryMostRecentMatchesWalk(t *testing.T) {
	now := time.Date(2026, 5, 5, 12, 0, 30, 250, time.UTC)
	for _, every := range []string{"@every 1s", "@every 5s", "@every 90s", "@every 1h"} {
		s, err := ParseSchedule(every, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, back := range []time.Duration{0, 700 * time.Millisecond, 4 * time.Second, 5 * time.Second,
			17*time.Minute + 300*time.Millisecond, 3 * time.Hour} {
			earliest := now.Add(-back)
			var wantRecent, wantNext time.Time
			var wantMissed int64
			wantOK := false
			for tt := s.Next(earliest); ; tt = s.Next(tt) {
				if tt.After(now) {
					wantNext = tt
					break
				}
				if wantOK {
					wantMissed++
				}
				wantRecent, wantOK = tt, true
			}
			recent, missed, next, ok := s.MostRecent(earliest, now)
			if !recent.Equal(wantRecent) || missed != wantMissed || !next.Equal(wantNext) || ok != wantOK {
				t.Errorf("%s from %s: MostRecent = %s, %d, %s, %v; walk says %s, %d, %s, %v", every, back,
					recent, missed, next, ok, wantRecent, wantMissed, wantNext, wantOK)
			}
		}
	}
}

func TestParseScheduleRejects(t *testing.T) {
	for _, tc := range []struct{ schedule, zone string }{
		{"61 * * * *", ""}, {"* * * *", ""}, {"@every nope", ""}, {"@daily", "Mars/Olympus"},
	} {
		if _, err := ParseSchedule(tc.schedule, tc.zone); err == nil {
			t.Errorf("ParseSchedule(%q, %q) accepted", tc.schedule, tc.zone)
		}
	}
}
