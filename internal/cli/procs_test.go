package cli

import "testing"

func TestServerProcs(t *testing.T) {
	for _, c := range []struct {
		env    string
		cur    int
		want   int
		wantOK bool
	}{
		{"", 1, 3, true},
		{"", 2, 4, true},
		{"", 16, 18, true},
		{"2", 2, 2, false}, // the operator's choice stands
		{"1", 1, 1, false},
	} {
		n, ok := ServerProcs(c.env, c.cur)
		if n != c.want || ok != c.wantOK {
			t.Errorf("ServerProcs(%q, %d) = %d, %v; want %d, %v", c.env, c.cur, n, ok, c.want, c.wantOK)
		}
	}
}
