package ledger

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIndexSet(t *testing.T) {
	cases := map[string]struct {
		in      []int32
		want    string
		wantErr bool
	}{
		"empty":       {want: ""},
		"single":      {in: []int32{7}, want: "7"},
		"runs":        {in: []int32{0, 1, 2, 3, 7, 9, 10}, want: "0-3,7,9-10"},
		"unsorted in": {in: []int32{5, 1, 2}, want: "1-2,5"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := IndexSet{}
			for _, i := range tc.in {
				s.Add(i)
			}
			if diff := cmp.Diff(tc.want, s.String()); diff != "" {
				t.Errorf("String (-want,+got):\n%s", diff)
			}
			back, err := ParseIndexSet(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(s, back); diff != "" {
				t.Errorf("round trip (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestParseIndexSetRejects(t *testing.T) {
	for _, in := range []string{"a", "1-", "3-1", "1,1", "2,1", "-1", "1,,2", "0-99999999"} {
		if _, err := ParseIndexSet(in); err == nil {
			t.Errorf("ParseIndexSet(%q) accepted", in)
		}
	}
}
