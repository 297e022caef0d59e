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
		"runs":            {in: []int32{0, 1, 2, 3, 7, 9, 10}, want: "0-3,7,9-10"},
		"unsorted in":     {in: []int32{5, 1, 2}, want: "1-2,5"},
		"fills a gap":     {in: []int32{1, 3, 2}, want: "1-3"},
		"twice":           {in: []int32{4, 4}, want: "4"},
		"joins the next":  {in: []int32{6, 5}, want: "5-6"},
		"joins the prior": {in: []int32{5, 6}, want: "5-6"},
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
		const span = 60
		var a, b IndexSet
		ma, mb := map[int32]bool{}, map[int32]bool{}
		for range rng.IntN(span) {
			i := rng.Int32N(span)
			a.Add(i)
			ma[i] = true
		}
		for range rng.IntN(span) {
			i := rng.Int32N(span)
			b.Add(i)
			mb[i] = true
		}
		if a.Len() != len(ma) {
			t.Fatalf("round %d: Len %d, want %d", round, a.Len(), len(ma))
		}
		if got := slices.Collect(a.All()); len(got) != len(ma) || !slices.IsSorted(got) {
			t.Fatalf("round %d: All %v", round, got)
		}
		for i := int32(0); i <= span; i++ {
			if a.Has(i) != ma[i] {
				t.Fatalf("round %d: Has(%d) = %v", round, i, a.Has(i))
			}
			want := i
			for ma[want] {
				want++
			}
			if got := a.NextAbsent(i); got != want {
				t.Fatalf("round %d: NextAbsent(%d) = %d, want %d", round, i, got, want)
			}
		}
		parsed, err := ParseIndexSet(a.String())
		if err != nil || parsed.String() != a.String() || parsed.Len() != a.Len() {
			t.Fatalf("round %d: %q parsed as %q (%d): %v", round, a.String(), parsed.String(), parsed.Len(), err)
		}
		if i, missing := a.Missing(&b); missing != !subset(mb, ma) || missing && (!mb[i] || ma[i]) {
			t.Fatalf("round %d: Missing = %d, %v for %q in %q", round, i, missing, b.String(), a.String())
		}
		if i, common := a.Common(&b); common != intersects(ma, mb) || common && (!ma[i] || !mb[i]) {
			t.Fatalf("round %d: Common = %d, %v for %q and %q", round, i, common, a.String(), b.String())
		}
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
