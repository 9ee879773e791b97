package attr

import (
	"strings"
	"testing"
	"time"
)

func TestParseTimeAndNormalise(t *testing.T) {
	const want = "2024-03-01T12:34:56.000Z"
	tests := []struct {
		in   string
		want string // NormaliseDate result; "" means ParseTime must fail and the input is kept
	}{
		{"2024-03-01T12:34:56.789Z", "2024-03-01T12:34:56.789Z"},
		{"2024-03-01T14:34:56+02:00", want},
		{"2024-03-01T14:34:56+0200", want},
		{"2024-03-01T14:34:56+02", want},
		{"2024-03-01T10:04:56-02:30", want},
		{"2024-03-01T12:34:56Z", want},
		{"2024-03-01T12:34:56", want}, // no offset: UTC
		{"2024-03-01t12:34:56z", want},
		{"2024-03-01T12:34Z", "2024-03-01T12:34:00.000Z"},
		{"2024-03-01T12:34:56.5Z", "2024-03-01T12:34:56.500Z"},
		{"2024-03-01T12:34:56,5Z", "2024-03-01T12:34:56.500Z"},
		{"2024-03-01T12:34:56.78912345678912Z", "2024-03-01T12:34:56.789Z"}, // truncated, not rounded
		{"2024-03-01T12:34:56.9999Z", "2024-03-01T12:34:56.999Z"},
		{"2024-03-01T00:30:00+01:00", "2024-02-29T23:30:00.000Z"}, // leap day
		{"1709296496789", "2024-03-01T12:34:56.789Z"},
		{"0", "1970-01-01T00:00:00.000Z"},
		{"0000-01-01T00:00:00Z", "0000-01-01T00:00:00.000Z"},
		{"9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"},
		{"253402300799999", "9999-12-31T23:59:59.999Z"},
		// Unparseable: kept as they are.
		{"yesterday", ""},
		{"", ""},
		{"2024-03-01", ""},
		{"2024-03-01 12:34:56Z", ""},
		{"2024-02-30T12:34:56Z", ""},
		{"2023-02-29T12:34:56Z", ""},
		{"2024-13-01T12:34:56Z", ""},
		{"2024-03-01T24:00:00Z", ""},
		{"2024-03-01T12:60:00Z", ""},
		{"2024-03-01T12:34:60Z", ""},
		{"2024-03-01T12:34:56.Z", ""},
		{"2024-03-01T12:34:56+2", ""},
		{"2024-03-01T12:34:56+02:", ""},
		{"2024-03-01T12:34:56+19:00", ""},
		{"2024-03-01T12:34:56Zjunk", ""},
		{"2024-03-01T12:34:56 Z", ""},
		{"0000-01-01T00:30:00+01:00", ""}, // year -1 in UTC
		{"9999-12-31T23:30:00-01:00", ""}, // year 10000 in UTC
		{"253402300800000", ""},
		{"99999999999999999999999", ""},
		{"-1709296496789", ""},
		{"+2024-03-01T12:34:56Z", ""},
		{"２０２４-03-01T12:34:56Z", ""}, // full-width digits
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTime(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseTime(%q) = %v, want an error", tc.in, got)
				}
				if !strings.Contains(err.Error(), "parse time") {
					t.Fatalf("error lacks context: %v", err)
				}
				if n := NormaliseDate(tc.in); n != tc.in {
					t.Fatalf("NormaliseDate(%q) = %q, want it unchanged", tc.in, n)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTime(%q): %v", tc.in, err)
			}
			if got.Location() != time.UTC {
				t.Fatalf("ParseTime(%q) location %v, want UTC", tc.in, got.Location())
			}
			if f := FormatTime(got); f != tc.want {
				t.Fatalf("FormatTime(ParseTime(%q)) = %q, want %q", tc.in, f, tc.want)
			}
			if n := NormaliseDate(tc.in); n != tc.want {
				t.Fatalf("NormaliseDate(%q) = %q, want %q", tc.in, n, tc.want)
			}
		})
	}
}

func TestFormatTime(t *testing.T) {
	loc := time.FixedZone("X", 2*3600)
	in := time.Date(2024, 3, 1, 14, 34, 56, 789_999_999, loc)
	if got, want := FormatTime(in), "2024-03-01T12:34:56.789Z"; got != want {
		t.Fatalf("FormatTime = %q, want %q", got, want)
	}
	if got, want := FormatTime(time.UnixMilli(0)), "1970-01-01T00:00:00.000Z"; got != want {
		t.Fatalf("FormatTime(epoch) = %q, want %q", got, want)
	}
}

func TestParseTimeErrorSaysWhere(t *testing.T) {
	_, err := ParseTime("2024-03-01T12:34:56+25:00")
	if err == nil || !strings.Contains(err.Error(), "offset hours 25 out of range") {
		t.Fatalf("err = %v", err)
	}
}
