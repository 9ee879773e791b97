package attr

import (
	"reflect"
	"testing"
	"time"
)

func FuzzParseMeta(f *testing.F) {
	for _, seed := range []string{
		"StreamSize:11\nTEST:VALUE\n",
		"a:1\r\nB:2\rc\n\n  d : e:f  \n",
		"\uFEFFFeed:A\nfeed:B\nEffectiveTime:2024-03-01T14:34:56+02:00\nReceivedTime:1709296496789",
		"k:1\n\u212a:2\nstraße:3\nSTRASSE:4",
		":x",
		"a\x00b",
		"\xff",
		"Größe:✓\u2028\u0085x\u00a0",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeta(b)
		if err != nil {
			return
		}
		out := AppendMeta(nil, m)
		again, err := ParseMeta(out)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		if !reflect.DeepEqual(again.Sorted(), m.Sorted()) {
			t.Fatalf("round trip changed the map\n first  %q\n second %q\n text   %q", m.Sorted(), again.Sorted(), out)
		}
		if again := AppendMeta(nil, again); string(again) != string(out) {
			t.Fatalf("AppendMeta not stable: %q then %q", out, again)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	for _, seed := range []string{
		"2024-03-01T12:34:56.789Z", "2024-03-01T14:34:56+02:00", "2024-03-01T14:34:56+0200",
		"2024-03-01T14:34:56+02", "2024-03-01T12:34:56.5Z", "1709296496789", "0000-01-01T00:00Z",
		"9999-12-31T23:59:59.999999999-18:00", "garbage", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := ParseTime(s)
		n := NormaliseDate(s)
		if err != nil {
			if n != s {
				t.Fatalf("NormaliseDate(%q) = %q, want unchanged after parse error %v", s, n, err)
			}
			return
		}
		formatted := FormatTime(tm)
		if n != formatted {
			t.Fatalf("NormaliseDate(%q) = %q, want %q", s, n, formatted)
		}
		back, err := ParseTime(formatted)
		if err != nil {
			t.Fatalf("ParseTime(%q) ok but its format %q does not re-parse: %v", s, formatted, err)
		}
		// Truncate to ms by hand: Unix() floors and Nanosecond() is in [0, 1e9).
		wantNs := tm.Nanosecond() / int(time.Millisecond) * int(time.Millisecond)
		if back.Unix() != tm.Unix() || back.Nanosecond() != wantNs {
			t.Fatalf("ParseTime(%q) = %v; formatted %q re-parses to %v", s, tm, formatted, back)
		}
		if NormaliseDate(formatted) != formatted {
			t.Fatalf("NormaliseDate not idempotent on %q", formatted)
		}
	})
}
