package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHarnessQuick runs the whole harness in -quick mode with tiny
// durations, only to prove that it works end to end: every scenario gives
// every target a row with a non-zero rate. It never looks at the numbers
// beyond that (the machine is shared; a benchmark is not a test). It
// builds weir and the tools, so it is skipped with -short.
func TestHarnessQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every benchmark scenario briefly; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "bench.md")
	var stdout, stderr bytes.Buffer
	rep, err := run(ctx, []string{"-quick", "-reps", "1", "-d", "400ms", "-rate-d", "500ms", "-proxy-d", "500ms",
		"-warmup", "100ms", "-ceiling", "-transaction", "-big", "8MiB", "-large", "2MiB", "-c", "4", "-tmp", t.TempDir(), "-out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	want := map[string][]string{}
	for _, s := range scenarios() {
		switch s.name {
		case "proxy":
			want[s.name] = []string{tWeir, tProxy, tProxyDeflate}
		case "rate":
			want[s.name] = []string{tWeir}
		case "1k", "45k", "45k-gzip":
			want[s.name] = []string{tDrain, tNaive, tWeir, tGroup}
		default:
			want[s.name] = []string{tDrain, tNaive, tWeir}
		}
	}
	for scen, targets := range want {
		for _, target := range targets {
			r := rep.find(scen, target)
			switch {
			case r == nil:
				t.Errorf("%s %s: no row", scen, target)
			case r.PostsPerS <= 0 || r.MiBPerS <= 0:
				t.Errorf("%s %s: rate %v posts/s, %v MiB/s", scen, target, r.PostsPerS, r.MiBPerS)
			case (target == tProxy || target == tProxyDeflate) && r.E2E <= 0:
				t.Errorf("%s: end-to-end rate %v", target, r.E2E)
			case r.RSS <= 0:
				t.Errorf("%s %s: no peak RSS", scen, target)
			}
		}
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(md, stdout.Bytes()) || !strings.Contains(string(md), "| scenario") || !strings.Contains(string(md), "Targets") {
		t.Errorf("-out wrote:\n%s\nstdout:\n%s", md, stdout.String())
	}
	if t.Failed() {
		t.Logf("report:\n%s\nlog:\n%s", stdout.String(), stderr.String())
	}
}

func TestMedianAndSize(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median = %v", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median = %v", m)
	}
	for in, want := range map[string]int64{"1GiB": 1 << 30, "64MiB": 64 << 20, "16M": 16 << 20, "4096": 4096, "2k": 2048} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, err)
		}
	}
}
