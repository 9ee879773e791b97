package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ByteSize is a size in bytes. In YAML it is an integer or a string such as
// "512KiB", "10M" or "1G". Every unit is binary (K = 1024), as in the
// reference system's ByteSize, so "1G", "1GB" and "1GiB" all mean 2^30.
type ByteSize int64

var byteSizeRE = regexp.MustCompile(`^\s*([0-9]+)\s*([KMGT]?)(I?B)?\s*$`)

// ParseByteSize parses the forms described on ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	m := byteSizeRE.FindStringSubmatch(strings.ToUpper(s))
	if m == nil {
		return 0, fmt.Errorf("byte size %q: want a number with an optional unit K, M, G or T (binary), e.g. 512KiB or 1G", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("byte size %q: %w", s, err)
	}
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m[2]]
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("byte size %q is too large", s)
	}
	return ByteSize(n << shift), nil
}

// UnmarshalYAML accepts an integer or a string with a unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// String formats the size with the largest exact binary unit.
func (b ByteSize) String() string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if b != 0 && b%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(b>>u.shift), 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Duration is a time.Duration that reads Go durations ("30s", "1m30s"), a
// whole number of days ("90d", which Go's durations lack and operators
// type) and the ISO-8601 forms the reference system's configuration uses
// ("PT30S", "P90D").
type Duration time.Duration

var (
	isoDurationRE = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)
	daysRE        = regexp.MustCompile(`^(\d+)D$`)
)

// ParseDuration parses the forms described on Duration.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if d, err := time.ParseDuration(s); err == nil {
		return Duration(d), nil
	}
	tooLong := fmt.Errorf("duration %q is too long (at most about 292 years)", s)
	const day = 24 * time.Hour
	if m := daysRE.FindStringSubmatch(strings.ToUpper(s)); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > int64(math.MaxInt64/day) {
			return 0, tooLong
		}
		return Duration(time.Duration(n) * day), nil
	}
	m := isoDurationRE.FindStringSubmatch(strings.ToUpper(s))
	if m == nil || s == "P" || strings.HasSuffix(strings.ToUpper(s), "T") {
		return 0, fmt.Errorf("duration %q: want a Go duration such as 30s, a whole number of days such as 90d, or an ISO-8601 duration such as PT30S", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{day, time.Hour, time.Minute} {
		if m[i+1] != "" {
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			if err != nil || n > int64(math.MaxInt64/unit) || time.Duration(n)*unit > math.MaxInt64-d {
				return 0, tooLong
			}
			d += time.Duration(n) * unit
		}
	}
	if m[4] != "" {
		f, _ := strconv.ParseFloat(m[4], 64)
		if f*float64(time.Second) >= float64(math.MaxInt64-d) {
			return 0, tooLong
		}
		d += time.Duration(f * float64(time.Second))
	}
	return Duration(d), nil
}

// UnmarshalYAML accepts the forms described on Duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }
