// Command weir-load is a load generator for /datafeed: keep-alive HTTP/1.1
// posts with sized or chunked bodies, plain or gzipped, in a closed loop (a
// fixed number of senders, each posting as soon as its last post was
// answered) or at a fixed rate (posts scheduled by the clock, latency
// measured from the scheduled time so that a stalled server cannot hide
// its stalls: no coordinated omission).
//
//	weir-load -url http://127.0.0.1:8080/datafeed -c 16 -d 10s -lines 999 -chunked
//	weir-load -url ... -mode rate -rate 500 -d 20s -lines 999 -chunked -gzip
//	weir-load -url ... -c 1 -n 1 -size 1GiB
//
// Bodies are deterministic and distinct per post (the first line names the
// post number) and cost no allocation or compression per post (see
// body.go). -json prints one machine-readable summary; cmd/weir-bench reads
// it.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

type config struct {
	url            string
	mode           string
	concurrency    int
	rate           float64
	duration       time.Duration
	n              int64
	size           int64
	lines          int
	chunked        bool
	chunk          int
	gzip           bool
	headers        headerFlags
	feed, typ      string
	json           bool
	maxOutstanding int
	timeout        time.Duration
	warmup         time.Duration
	seed           uint64
	client         string
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("weir-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var size, chunk string
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080/datafeed", "where to post")
	fs.StringVar(&c.mode, "mode", "closed", "closed (c senders, each posting when answered) or rate (posts/s by the clock)")
	fs.IntVar(&c.concurrency, "c", 16, "closed mode: concurrent senders (connections)")
	fs.Float64Var(&c.rate, "rate", 100, "rate mode: posts per second")
	fs.IntVar(&c.maxOutstanding, "max-outstanding", 256, "rate mode: most posts in flight; beyond it sending waits (and the wait counts as latency)")
	fs.DurationVar(&c.duration, "d", 0, "how long to send (default 10s unless -n is given)")
	fs.Int64Var(&c.n, "n", 0, "how many posts to send (0: until -d)")
	fs.StringVar(&size, "size", "1KiB", "uncompressed bytes per post, e.g. 1KiB, 45KiB, 1GiB (ignored with -lines)")
	fs.IntVar(&c.lines, "lines", 0, "posts of N short log lines (~46 bytes each) instead of -size; 999 lines ~ 45 KiB")
	fs.BoolVar(&c.chunked, "chunked", false, "send with chunked transfer encoding (no Content-Length)")
	fs.StringVar(&chunk, "chunk", "4KiB", "with -chunked, the size of a chunk")
	fs.BoolVar(&c.gzip, "gzip", false, "send gzipped bodies with Compression: GZIP")
	fs.Var(&c.headers, "H", "extra header 'Name: value' (repeatable)")
	fs.StringVar(&c.feed, "feed", "BENCH-FEED", "the Feed header")
	fs.StringVar(&c.typ, "type", "Raw Events", "the Type header (empty: none)")
	fs.BoolVar(&c.json, "json", false, "print one JSON summary")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "timeout of one post")
	fs.DurationVar(&c.warmup, "warmup", 0, "send this long first, unmeasured")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the generated data")
	fs.StringVar(&c.client, "client", "raw", "raw (a minimal keep-alive HTTP/1.1 client, cheap per post) or net/http (Go's client)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "weir-load: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.size, err = parseSize(size); err != nil {
		return fail("-size: %v", err)
	}
	ch, err := parseSize(chunk)
	if err != nil || ch < 1 || ch > 1<<30 {
		return fail("-chunk: %q is not a chunk size", chunk)
	}
	c.chunk = int(ch)
	if c.client != "raw" && c.client != "net/http" {
		return fail("-client: %q is not raw or net/http", c.client)
	}
	if c.mode != "closed" && c.mode != "rate" {
		return fail("-mode: %q is not closed or rate", c.mode)
	}
	if c.concurrency < 1 || c.maxOutstanding < 1 || c.rate <= 0 || c.lines < 0 || c.n < 0 {
		return fail("-c, -max-outstanding and -rate must be positive, -lines and -n not negative")
	}
	if c.duration == 0 && c.n == 0 {
		c.duration = 10 * time.Second
	}
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fail("-url: %q is not an http URL", c.url)
	}
	base := http.Header{}
	if c.feed != "" {
		base.Set("Feed", c.feed)
	}
	if c.typ != "" {
		base.Set("Type", c.typ)
	}
	base.Set("Compression", "NONE")
	if c.gzip {
		base.Set("Compression", "GZIP")
	}
	base.Set("User-Agent", "weir-load")
	for _, h := range c.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fail("-H %q: want 'Name: value'", h)
		}
		base.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}

	debug.SetGCPercent(400) // the generator allocates little; collect less often
	var p *plan
	if c.lines > 0 {
		p = newLinesPlan(c.lines, c.gzip, c.seed)
	} else {
		p = newSizePlan(c.size, c.gzip, c.seed)
	}
	if c.chunked {
		p.chunk = c.chunk
	}
	r := newRunner(&c, p, u, base)
	if c.client == "raw" {
		if r.raw, err = newRawClient(u, base, c.timeout); err != nil {
			return fail("%v", err)
		}
	}
	if c.warmup > 0 {
		w := c
		w.duration, w.n = c.warmup, 0
		r.cfg = &w
		r.runMode()
		r.resetStats()
		r.cfg = &c
	}
	s := r.runMode()
	if c.json {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprint(stdout, s.text())
	}
	if s.PostsOK == 0 && s.ErrorsTotal > 0 {
		return 1
	}
	return 0
}

type runner struct {
	cfg    *config
	plan   *plan
	url    *url.URL
	base   http.Header
	client *http.Client
	raw    *rawClient   // when -client raw
	nextK  atomic.Int64 // post numbers, distinct for the whole run (warm-up included)

	mu       sync.Mutex
	errs     map[string]int
	firstErr string
}

func newRunner(c *config, p *plan, u *url.URL, base http.Header) *runner {
	conns := c.concurrency
	if c.mode == "rate" {
		conns = c.maxOutstanding
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     2 * time.Minute,
		DisableCompression:  true,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      16 << 10,
	}
	return &runner{cfg: c, plan: p, url: u, base: base, client: &http.Client{Transport: tr, Timeout: c.timeout}, errs: map[string]int{}}
}

func (r *runner) resetStats() {
	r.mu.Lock()
	r.errs, r.firstErr = map[string]int{}, ""
	r.mu.Unlock()
}

// stats is one sender's account.
type stats struct {
	lat, svc    []time.Duration
	ok, errs    int64
	bytes, wire int64
	late        int64
}

func (r *runner) fail(key, msg string) {
	r.mu.Lock()
	r.errs[key]++
	if r.firstErr == "" {
		r.firstErr = msg
	}
	r.mu.Unlock()
}

// post sends post k with the given header map (one per sender, never
// changed while a post is in flight) and reports whether it was answered 200.
func (r *runner) post(k int64, h http.Header) bool {
	length := r.plan.wireSize(k)
	if r.plan.chunk > 0 {
		length = -1
	}
	if r.raw != nil {
		a, err := r.raw.post(r.plan.body(k), length, r.plan.chunk)
		switch {
		case err != nil:
			key := "transport"
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				key = "timeout"
			}
			r.fail(key, err.Error())
			return false
		case a.status != http.StatusOK:
			msg := strconv.Itoa(a.status) + " " + http.StatusText(a.status)
			if a.serviceError != "" {
				msg += ": " + a.serviceError
			}
			r.fail(strconv.Itoa(a.status), msg)
			return false
		}
		return true
	}
	var body io.ReadCloser = r.plan.body(k)
	if length == 0 {
		body = http.NoBody
	}
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           r.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          body,
		ContentLength: length,
		Host:          r.url.Host,
	}
	resp, err := r.client.Do(req)
	if err != nil {
		key := "transport"
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			key = "timeout"
		}
		r.fail(key, err.Error())
		return false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg := resp.Status
		if e := resp.Header.Get("Service-Error"); e != "" {
			msg += ": " + e
		}
		r.fail(strconv.Itoa(resp.StatusCode), msg)
		return false
	}
	if err != nil {
		r.fail("transport", err.Error())
		return false
	}
	return true
}

func (r *runner) headerMap() http.Header { return r.base.Clone() }

func (r *runner) runMode() *Summary {
	if r.cfg.mode == "rate" {
		return r.runRate()
	}
	return r.runClosed()
}

// runClosed: c senders, each posting again as soon as it is answered, until
// the duration is over or n posts were started.
func (r *runner) runClosed() *Summary {
	c := r.cfg
	all := make([]*stats, c.concurrency)
	start := time.Now()
	deadline := start.Add(c.duration)
	var wg sync.WaitGroup
	for w := range all {
		st := &stats{lat: make([]time.Duration, 0, 1024)}
		all[w] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := r.headerMap()
			for {
				if c.duration > 0 && !time.Now().Before(deadline) {
					return
				}
				k := r.nextK.Add(1) - 1
				if c.n > 0 && k >= c.n {
					return
				}
				t0 := time.Now()
				ok := r.post(k, h)
				d := time.Since(t0)
				if ok {
					st.ok++
					st.bytes += r.plan.rawSize(k)
					st.wire += r.plan.wireSize(k)
					st.lat = append(st.lat, d)
				} else {
					st.errs++
				}
			}
		}()
	}
	wg.Wait()
	s := r.summary(all, time.Since(start))
	s.Concurrency = c.concurrency
	return s
}

// runRate schedules post i at start + i/rate and hands it to a free sender
// (at most max-outstanding in flight); latency counts from the scheduled
// time, so a post that had to wait for a sender or for the generator counts
// its wait.
func (r *runner) runRate() *Summary {
	c := r.cfg
	type job struct {
		k  int64
		at time.Time
	}
	jobs := make(chan job)
	all := make([]*stats, c.maxOutstanding)
	var wg sync.WaitGroup
	for w := range all {
		st := &stats{}
		all[w] = st
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := r.headerMap()
			for j := range jobs {
				t0 := time.Now()
				if t0.Sub(j.at) > time.Millisecond {
					st.late++
				}
				ok := r.post(j.k, h)
				end := time.Now()
				if ok {
					st.ok++
					st.bytes += r.plan.rawSize(j.k)
					st.wire += r.plan.wireSize(j.k)
					st.lat = append(st.lat, end.Sub(j.at))
					st.svc = append(st.svc, end.Sub(t0))
				} else {
					st.errs++
				}
			}
		}()
	}
	start := time.Now()
	interval := float64(time.Second) / c.rate
	for i := int64(0); ; i++ {
		at := start.Add(time.Duration(float64(i) * interval))
		if c.duration > 0 && at.Sub(start) >= c.duration {
			break
		}
		if c.n > 0 && i >= c.n {
			break
		}
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- job{k: r.nextK.Add(1) - 1, at: at}
	}
	close(jobs)
	wg.Wait()
	s := r.summary(all, time.Since(start))
	s.TargetRate = c.rate
	return s
}

func (r *runner) summary(all []*stats, elapsed time.Duration) *Summary {
	s := &Summary{Mode: r.cfg.mode, URL: r.cfg.url, ElapsedS: elapsed.Seconds(), PostBytes: r.plan.rawSize(0)}
	var lat, svc []time.Duration
	for _, st := range all {
		s.PostsOK += st.ok
		s.ErrorsTotal += st.errs
		s.Bytes += st.bytes
		s.WireBytes += st.wire
		s.Late += st.late
		lat = append(lat, st.lat...)
		svc = append(svc, st.svc...)
	}
	r.mu.Lock()
	s.Errors, s.FirstError = r.errs, r.firstErr
	r.mu.Unlock()
	if sec := elapsed.Seconds(); sec > 0 {
		s.PostsPerS = float64(s.PostsOK) / sec
		s.MiBPerS = float64(s.Bytes) / sec / (1 << 20)
		s.WireMiBPerS = float64(s.WireBytes) / sec / (1 << 20)
	}
	s.Latency = summarize(lat)
	if r.cfg.mode == "rate" {
		s.ServiceLatency = summarize(svc)
	} else {
		s.ServiceLatency = s.Latency
	}
	return s
}
