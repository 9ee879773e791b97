package attr

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// DateLayout is the one format weir writes time-valued attributes in: UTC,
// always milliseconds and a trailing Z, e.g. 2024-03-01T12:34:56.789Z.
const DateLayout = "2006-01-02T15:04:05.000Z"

// maxEpochMs is 9999-12-31T23:59:59.999Z: the last instant DateLayout can
// write with a four-digit year, so every parsed time formats and re-parses.
const maxEpochMs = 253402300799999

// FormatTime formats t in UTC with DateLayout. Milliseconds are truncated, not
// rounded, so a formatted time never lies in the future of t.
func FormatTime(t time.Time) string {
	return t.UTC().Format(DateLayout)
}

// ParseTime parses an ISO-8601 date-time or epoch milliseconds.
//
// Accepted: YYYY-MM-DD'T'HH:MM[:SS[.fraction]][offset] where the fraction has
// any number of digits (beyond nanoseconds ignored) and the offset is Z, ±HH:MM,
// ±HHMM or ±HH; no offset means UTC. 't', 'z' and ',' as the decimal sign are
// accepted as ISO-8601 allows. A string of digits only is epoch milliseconds.
// The instant must fall in years 0000-9999 UTC, so that FormatTime can write it.
func ParseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("parse time: empty")
	}
	if allDigits(s) {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms > maxEpochMs {
			return time.Time{}, fmt.Errorf("parse time %q: epoch milliseconds out of range (max %d)", s, int64(maxEpochMs))
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := parseISO(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse time %q: %w (want e.g. 2024-03-01T12:34:56.789Z)", s, err)
	}
	return t, nil
}

func parseISO(s string) (time.Time, error) {
	// p is a small cursor so each field reads as one line below.
	p := 0
	num := func(n int, what string, lo, hi int) (int, error) {
		if p+n > len(s) || !allDigits(s[p:p+n]) {
			return 0, fmt.Errorf("want %d-digit %s at offset %d", n, what, p)
		}
		v, _ := strconv.Atoi(s[p : p+n])
		if v < lo || v > hi {
			return 0, fmt.Errorf("%s %d out of range %d-%d", what, v, lo, hi)
		}
		p += n
		return v, nil
	}
	lit := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("want %s at offset %d", what, p)
		}
		p++
		return nil
	}
	at := func(c ...byte) bool {
		if p >= len(s) {
			return false
		}
		for _, x := range c {
			if s[p] == x {
				return true
			}
		}
		return false
	}

	year, err := num(4, "year", 0, 9999)
	if err != nil {
		return time.Time{}, err
	}
	if err := lit(at('-'), "'-'"); err != nil {
		return time.Time{}, err
	}
	month, err := num(2, "month", 1, 12)
	if err != nil {
		return time.Time{}, err
	}
	if err := lit(at('-'), "'-'"); err != nil {
		return time.Time{}, err
	}
	day, err := num(2, "day", 1, daysIn(time.Month(month), year))
	if err != nil {
		return time.Time{}, err
	}
	if err := lit(at('T', 't'), "'T'"); err != nil {
		return time.Time{}, err
	}
	hour, err := num(2, "hour", 0, 23)
	if err != nil {
		return time.Time{}, err
	}
	if err := lit(at(':'), "':'"); err != nil {
		return time.Time{}, err
	}
	minute, err := num(2, "minute", 0, 59)
	if err != nil {
		return time.Time{}, err
	}
	var sec, nanos int
	if at(':') {
		p++
		if sec, err = num(2, "second", 0, 59); err != nil {
			return time.Time{}, err
		}
		if at('.', ',') {
			p++
			start := p
			for p < len(s) && '0' <= s[p] && s[p] <= '9' {
				p++
			}
			if p == start {
				return time.Time{}, fmt.Errorf("want fraction digits at offset %d", start)
			}
			// Keep nanoseconds; further digits cannot be represented.
			frac := s[start:min(p, start+9)]
			nanos, _ = strconv.Atoi(frac)
			for range 9 - len(frac) {
				nanos *= 10
			}
		}
	}
	var offset int // seconds east of UTC
	switch {
	case p == len(s):
	case at('Z', 'z'):
		p++
	case at('+', '-'):
		sign := 1
		if s[p] == '-' {
			sign = -1
		}
		p++
		oh, err := num(2, "offset hours", 0, 18)
		if err != nil {
			return time.Time{}, err
		}
		var om int
		if p < len(s) {
			if at(':') {
				p++
			}
			if om, err = num(2, "offset minutes", 0, 59); err != nil {
				return time.Time{}, err
			}
		}
		offset = sign * (oh*3600 + om*60)
	default:
		return time.Time{}, fmt.Errorf("want offset (Z, +HH:MM, +HHMM or +HH) at offset %d", p)
	}
	if p != len(s) {
		return time.Time{}, fmt.Errorf("unexpected %q after the time", s[p:])
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nanos, time.UTC).
		Add(-time.Duration(offset) * time.Second)
	if y := t.Year(); y < 0 || y > 9999 {
		return time.Time{}, fmt.Errorf("year %d in UTC is outside 0000-9999", y)
	}
	return t, nil
}

// NormaliseDate returns s in DateLayout when ParseTime accepts it, else s
// unchanged (a sender's odd value is kept rather than lost). A value already
// in DateLayout is returned without allocating.
func NormaliseDate(s string) string {
	t, err := ParseTime(s)
	if err != nil {
		return s
	}
	if isCanonical(s) {
		return s
	}
	return FormatTime(t)
}

// isCanonical reports whether s, known to parse, is laid out exactly as
// DateLayout: with all separators at their places the parser can only have
// read digits in between.
func isCanonical(s string) bool {
	return len(s) == len(DateLayout) && s[4] == '-' && s[7] == '-' && s[10] == 'T' &&
		s[13] == ':' && s[16] == ':' && s[19] == '.' && s[23] == 'Z'
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func daysIn(m time.Month, year int) int {
	return time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
