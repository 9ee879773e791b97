package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile returns the q-quantile (0 < q <= 1) of sorted by the
// nearest-rank method: the smallest sample with at least q of the samples
// at or below it. It is 0 for no samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// latencySummary holds latencies in milliseconds.
type latencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize sorts samples in place and summarises them.
func summarize(samples []time.Duration) latencySummary {
	if len(samples) == 0 {
		return latencySummary{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return latencySummary{
		P50:  ms(percentile(samples, 0.50)),
		P90:  ms(percentile(samples, 0.90)),
		P99:  ms(percentile(samples, 0.99)),
		P999: ms(percentile(samples, 0.999)),
		Max:  ms(samples[len(samples)-1]),
		Mean: ms(sum / time.Duration(len(samples))),
	}
}

// Summary is what -json prints: one object.
type Summary struct {
	Mode        string         `json:"mode"`
	URL         string         `json:"url"`
	Concurrency int            `json:"concurrency,omitempty"`
	TargetRate  float64        `json:"targetRate,omitempty"`
	PostsOK     int64          `json:"postsOk"`
	Errors      map[string]int `json:"errors"`
	ErrorsTotal int64          `json:"errorsTotal"`
	FirstError  string         `json:"firstError,omitempty"`
	ElapsedS    float64        `json:"elapsedS"`
	PostsPerS   float64        `json:"postsPerS"`
	Bytes       int64          `json:"bytes"`     // uncompressed body bytes of the posts answered 200
	WireBytes   int64          `json:"wireBytes"` // body bytes sent, as sent, of those posts
	MiBPerS     float64        `json:"mibPerS"`   // uncompressed
	WireMiBPerS float64        `json:"wireMibPerS"`
	PostBytes   int64          `json:"postBytes"` // uncompressed size of one post (the first)
	// Latency of the posts answered 200: from the scheduled send time in rate
	// mode (so that waiting to send counts), from the send in closed mode.
	Latency latencySummary `json:"latencyMs"`
	// ServiceLatency: from the actual send to the end of the answer.
	ServiceLatency latencySummary `json:"serviceLatencyMs"`
	// Late: rate mode, posts sent more than 1 ms after their scheduled time
	// (all connections were busy, or the generator could not keep up).
	Late int64 `json:"late,omitempty"`
}

func (s *Summary) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mode %s", s.Mode)
	if s.Concurrency > 0 {
		fmt.Fprintf(&b, ", concurrency %d", s.Concurrency)
	}
	if s.TargetRate > 0 {
		fmt.Fprintf(&b, ", target %.1f posts/s", s.TargetRate)
	}
	fmt.Fprintf(&b, ", %s per post\n", formatSize(s.PostBytes))
	fmt.Fprintf(&b, "posts ok     %d in %.3fs: %.1f posts/s, %.1f MiB/s (%.1f MiB/s on the wire)\n",
		s.PostsOK, s.ElapsedS, s.PostsPerS, s.MiBPerS, s.WireMiBPerS)
	if s.ErrorsTotal > 0 {
		keys := make([]string, 0, len(s.Errors))
		for k := range s.Errors {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(&b, "errors       %d:", s.ErrorsTotal)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, s.Errors[k])
		}
		fmt.Fprintf(&b, " (first: %s)\n", s.FirstError)
	}
	l := s.Latency
	fmt.Fprintf(&b, "latency ms   p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  mean %.2f\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
	if s.Mode == "rate" {
		l = s.ServiceLatency
		fmt.Fprintf(&b, "service ms   p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f  (from the actual send)\n", l.P50, l.P90, l.P99, l.P999, l.Max)
		fmt.Fprintf(&b, "late         %d posts sent more than 1 ms after their time\n", s.Late)
	}
	return b.String()
}

// parseSize reads a byte count: a number with an optional binary unit
// (K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB; any case). All units are
// powers of 1024, as in weir's configuration.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	mult, ok := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("size %q: unknown unit", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: not a byte count", s)
	}
	return int64(f * mult), nil
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d B", n)
}
