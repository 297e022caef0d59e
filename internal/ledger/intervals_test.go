package ledger

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestIndexSet(t *testing.T) {
	cases := map[string]struct {
		in   []int32
		want string
	}{
		"empty":           {want: ""},
		"single":          {in: []int32{7}, want: "7"},
		"runs":            {in: []int32{0, 1, 2, 3, 7, 9, 10}, want: "0-3,7,9,10"},
		"unsorted in":     {in: []int32{5, 1, 2}, want: "1,2,5"},
		"fills a gap":     {in: []int32{1, 3, 2}, want: "1-3"},
		"twice":           {in: []int32{4, 4}, want: "4"},
		"joins the next":  {in: []int32{6, 5}, want: "5,6"},
		"joins the prior": {in: []int32{5, 6}, want: "5,6"},
		"three":           {in: []int32{4, 5, 6}, want: "4-6"},
		"pairs":           {in: []int32{0, 1, 3, 4, 8, 9, 10}, want: "0,1,3,4,8-10"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s IndexSet
			for _, i := range tc.in {
				s.Add(i)
			}
			if got := s.String(); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
			back, err := ParseIndexSet(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if back.String() != s.String() || back.Len() != s.Len() {
				t.Errorf("round trip: %q (%d), want %q (%d)", back.String(), back.Len(), s.String(), s.Len())
			}
		})
	}
}

// TestIndexSetMatchesModel checks every operation against a plain map, on
// random sets.
func TestIndexSetMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		a, ma := randomSet(rng)
		b, mb := randomSet(rng)
		checkAgainstModel(t, round, &a, ma)
		if i, missing := a.Missing(&b); missing != !subset(mb, ma) || missing && (!mb[i] || ma[i]) {
			t.Fatalf("round %d: Missing = %d, %v for %q in %q", round, i, missing, b.String(), a.String())
		}
		if i, common := a.Common(&b); common != intersects(ma, mb) || common && (!ma[i] || !mb[i]) {
			t.Fatalf("round %d: Common = %d, %v for %q and %q", round, i, common, a.String(), b.String())
		}
		limit := rng.Int32N(modelSpan + 2)
		below, mbelow := a.Below(limit), map[int32]bool{}
		for i := range ma {
			if i < limit {
				mbelow[i] = true
			}
		}
		checkAgainstModel(t, round, &below, mbelow)
		if below.Len() != int(a.CountBelow(limit)) {
			t.Fatalf("round %d: Below(%d) has %d, CountBelow %d", round, limit, below.Len(), a.CountBelow(limit))
		}
	}
}

const modelSpan = 60

// randomSet builds a random set of indexes below modelSpan, and its model.
func randomSet(rng *rand.Rand) (IndexSet, map[int32]bool) {
	var s IndexSet
	m := map[int32]bool{}
	for range rng.IntN(modelSpan) {
		i := rng.Int32N(modelSpan)
		s.Add(i)
		m[i] = true
	}
	return s, m
}

// checkAgainstModel checks Len, All, Has, NextAbsent and the round trip
// through String and ParseIndexSet of s against its model m.
func checkAgainstModel(t *testing.T, round int, s *IndexSet, m map[int32]bool) {
	t.Helper()
	if s.Len() != len(m) {
		t.Fatalf("round %d: Len %d, want %d", round, s.Len(), len(m))
	}
	if got := slices.Collect(s.All()); len(got) != len(m) || !slices.IsSorted(got) {
		t.Fatalf("round %d: All %v", round, got)
	}
	for i := int32(0); i <= modelSpan; i++ {
		if s.Has(i) != m[i] {
			t.Fatalf("round %d: Has(%d) = %v", round, i, s.Has(i))
		}
		want := i
		for m[want] {
			want++
		}
		if got := s.NextAbsent(i); got != want {
			t.Fatalf("round %d: NextAbsent(%d) = %d, want %d", round, i, got, want)
		}
	}
	parsed, err := ParseIndexSet(s.String())
	if err != nil || parsed.String() != s.String() || parsed.Len() != s.Len() {
		t.Fatalf("round %d: %q parsed as %q (%d): %v", round, s.String(), parsed.String(), parsed.Len(), err)
	}
}

func subset(a, b map[int32]bool) bool {
	for i := range a {
		if !b[i] {
			return false
		}
	}
	return true
}

func intersects(a, b map[int32]bool) bool {
	for i := range a {
		if b[i] {
			return true
		}
	}
	return false
}

func TestParseIndexSetRejects(t *testing.T) {
	for _, in := range []string{"a", "1-", "3-1", "1,1", "2,1", "-1", "1,,2", "0-99999999", "0-3,2"} {
		if _, err := ParseIndexSet(in); err == nil {
			t.Errorf("ParseIndexSet(%q) accepted", in)
		}
	}
}

// TestCountCommon checks the interval counts against counting index by
// index, on random sets.
func TestCountCommon(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 300 {
		var a, b IndexSet
		for range rng.IntN(40) {
			a.Add(rng.Int32N(120))
		}
		for range rng.IntN(40) {
			b.Add(rng.Int32N(120))
		}
		limit := rng.Int32N(130)
		var wantCommon, wantBelow int32
		for i := range int32(130) {
			if i < limit && a.Has(i) {
				wantBelow++
				if b.Has(i) {
					wantCommon++
				}
			}
		}
		if got := a.CountCommon(&b, limit); got != wantCommon {
			t.Fatalf("round %d: CountCommon(%q, %q, %d) = %d, want %d", round, a.String(), b.String(), limit, got, wantCommon)
		}
		if got := a.CountBelow(limit); got != wantBelow {
			t.Fatalf("round %d: CountBelow(%q, %d) = %d, want %d", round, a.String(), limit, got, wantBelow)
		}
	}
}
