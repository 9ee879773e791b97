package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1 // 1..100 ms
	}
	thousand := make([]int, 1000)
	for i := range thousand {
		thousand[i] = i + 1
	}
	for _, c := range []struct {
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(7), 0.999, 7 * time.Millisecond},
		{ms(1, 2), 0.5, 1 * time.Millisecond},
		{ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{ms(hundred...), 0.5, 50 * time.Millisecond},
		{ms(hundred...), 0.99, 99 * time.Millisecond},
		{ms(hundred...), 0.999, 100 * time.Millisecond},
		{ms(hundred...), 1, 100 * time.Millisecond},
		{ms(thousand...), 0.999, 999 * time.Millisecond},
		{ms(thousand...), 0.99, 990 * time.Millisecond},
	} {
		if got := percentile(c.samples, c.q); got != c.want {
			t.Errorf("percentile(%d samples, %v) = %v, want %v", len(c.samples), c.q, got, c.want)
		}
	}
	// summarize sorts: the order of the samples does not matter.
	s := summarize(ms(5, 1, 4, 2, 3))
	if s.P50 != 3 || s.Max != 5 || s.Mean != 3 {
		t.Errorf("summarize = %+v", s)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "1KiB": 1024, "45k": 45 << 10, "1GiB": 1 << 30, "100MiB": 100 << 20,
		"64M": 64 << 20, "1g": 1 << 30, "2 MB": 2 << 20, "0": 0, "1.5KiB": 1536} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "12X", "-1", "abc"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}

// read returns post k's body as sent, and decompressed.
func read(t *testing.T, p *plan, k int64) (wire, raw []byte) {
	t.Helper()
	wire, err := io.ReadAll(p.body(k))
	if err != nil {
		t.Fatal(err)
	}
	raw = wire
	if p.gz {
		zr, err := gzip.NewReader(bytes.NewReader(wire))
		if err != nil {
			t.Fatalf("post %d: %v", k, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			t.Fatalf("post %d: gunzip: %v", k, err)
		}
	}
	return wire, raw
}

func TestBodies(t *testing.T) {
	for _, gz := range []bool{false, true} {
		for _, c := range []struct {
			name string
			p    func() *plan
			size int64 // 0: lines
		}{
			{"999 lines", func() *plan { return newLinesPlan(999, gz, 1) }, 0},
			{"1 line", func() *plan { return newLinesPlan(1, gz, 1) }, 0},
			{"1 KiB", func() *plan { return newSizePlan(1<<10, gz, 1) }, 1 << 10},
			{"10 bytes", func() *plan { return newSizePlan(10, gz, 1) }, 10},
			{"1 MiB", func() *plan { return newSizePlan(pageSize+headerLen, gz, 1) }, pageSize + headerLen},
			{"2.5 MiB streamed", func() *plan { return newSizePlan(2<<20+512<<10, gz, 1) }, 2<<20 + 512<<10},
			{"2 MiB streamed", func() *plan { return newSizePlan(2<<20+headerLen, gz, 1) }, 2<<20 + headerLen},
		} {
			t.Run(fmt.Sprintf("%s gzip=%v", c.name, gz), func(t *testing.T) {
				t.Parallel()
				p := c.p()
				seen := map[string]bool{}
				ks := []int64{0, 1, 2, 63, 64, 999_999_999}
				if c.size > pageSize {
					ks = []int64{0, 1, 999_999_999}
				}
				for _, k := range ks {
					wire, raw := read(t, p, k)
					if int64(len(wire)) != p.wireSize(k) {
						t.Errorf("post %d: %d bytes on the wire, wireSize says %d", k, len(wire), p.wireSize(k))
					}
					if int64(len(raw)) != p.rawSize(k) {
						t.Errorf("post %d: %d bytes, rawSize says %d", k, len(raw), p.rawSize(k))
					}
					if c.size > 0 && int64(len(raw)) != c.size {
						t.Errorf("post %d: %d bytes, want %d", k, len(raw), c.size)
					}
					if c.size >= headerLen || c.size == 0 {
						want := fmt.Sprintf("#weir-load post %015d\n", k)
						if !bytes.HasPrefix(raw, []byte(want)) {
							t.Errorf("post %d starts %q, want %q", k, raw[:min(len(raw), 40)], want)
						}
					}
					if seen[string(raw)] && c.size != 10 {
						t.Errorf("post %d: same body as an earlier post", k)
					}
					seen[string(raw)] = true
					// Deterministic: the same post again is the same body.
					if w2, _ := read(t, p, k); !bytes.Equal(w2, wire) {
						t.Errorf("post %d: a second body differs", k)
					}
				}
				if c.name == "999 lines" {
					_, raw := read(t, p, 5)
					if n := bytes.Count(raw, []byte("\n")); n != 999 {
						t.Errorf("%d lines, want 999", n)
					}
					if len(raw) < 44<<10 || len(raw) > 47<<10 {
						t.Errorf("999 lines are %d bytes, want about 45 KiB", len(raw))
					}
				}
			})
		}
	}
}

// TestChunkSize: with -chunked the body is read in chunks of at most the
// chunk size.
func TestChunkSize(t *testing.T) {
	p := newLinesPlan(999, false, 1)
	p.chunk = 4096
	b := p.body(3)
	buf := make([]byte, 32<<10)
	total := 0
	for {
		n, err := b.Read(buf)
		if n > 4096 {
			t.Fatalf("read %d bytes, more than the chunk size", n)
		}
		total += n
		if err == io.EOF {
			break
		}
	}
	if int64(total) != p.rawSize(3) {
		t.Fatalf("read %d bytes, want %d", total, p.rawSize(3))
	}
}

// TestRun posts to a test server with both clients, sized and chunked,
// plain and gzipped, in both modes, and checks that every body arrived
// whole, with the headers, and that refusals are counted by status.
func TestRun(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{} // first line -> count
	var bad []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Compression") == "GZIP" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		line, _, _ := strings.Cut(string(b), "\n")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			bad = append(bad, err.Error())
		case r.Header.Get("Feed") != "TEST-FEED" || r.Header.Get("X-Extra") != "yes":
			bad = append(bad, fmt.Sprintf("headers %v", r.Header))
		case r.URL.Path != "/datafeed":
			bad = append(bad, "path "+r.URL.Path)
		}
		if strings.HasSuffix(line, "7") { // every tenth post is refused
			w.Header().Set("Service-Error", "refused")
			w.WriteHeader(406)
			return
		}
		got[line]++
		if r.Header.Get("X-Chunked-Answer") != "" {
			w.(http.Flusher).Flush() // forces a chunked answer
		}
		fmt.Fprintf(w, "receipt-%s\n", line)
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"-n", "200", "-c", "4", "-lines", "999", "-chunked"},
		{"-n", "200", "-c", "4", "-lines", "999", "-chunked", "-gzip", "-H", "X-Chunked-Answer: 1"},
		{"-n", "20", "-c", "3", "-size", "1536KiB"},
		{"-n", "20", "-c", "3", "-size", "1536KiB", "-gzip", "-chunked"},
		{"-n", "100", "-mode", "rate", "-rate", "2000", "-size", "1KiB"},
		{"-n", "100", "-c", "4", "-size", "1KiB", "-client", "net/http"},
		{"-n", "100", "-c", "4", "-lines", "10", "-chunked", "-gzip", "-client", "net/http"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			mu.Lock()
			clear(got)
			mu.Unlock()
			var out, errOut bytes.Buffer
			full := append([]string{"-url", srv.URL + "/datafeed", "-json", "-feed", "TEST-FEED", "-H", "X-Extra: yes"}, args...)
			if code := run(full, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			var s Summary
			if err := json.Unmarshal(out.Bytes(), &s); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			n := s.PostsOK + s.ErrorsTotal
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Fatalf("server saw: %v", bad)
			}
			if s.ErrorsTotal != int64(s.Errors["406"]) || s.Errors["406"] != int(n/10) {
				t.Errorf("errors %v (total %d), want 406 for every tenth of %d", s.Errors, s.ErrorsTotal, n)
			}
			if int64(len(got)) != s.PostsOK {
				t.Errorf("server stored %d distinct posts, the generator counted %d ok", len(got), s.PostsOK)
			}
			for line, c := range got {
				if c != 1 {
					t.Errorf("%q arrived %d times", line, c)
				}
			}
			if s.PostsPerS <= 0 || s.Latency.P50 <= 0 || s.Latency.P99 < s.Latency.P50 || s.Latency.Max < s.Latency.P999 {
				t.Errorf("summary %+v", s)
			}
		})
	}
}
