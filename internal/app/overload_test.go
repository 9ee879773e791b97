package app_test

// Overload (docs/reliability.md): beyond receive.maxConcurrentReceipts
// posts at once, weir answers 503 with Retry-After at once rather than
// queueing without bound or letting senders time out, and it recovers as
// soon as the load drops. The REST API's own limit is TestAPIOverload
// (api_limit_test.go); one busy slot is TestDatafeedConcurrencyLimit.

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/streamfile"
)

// overloadPost posts body with headers from any goroutine (it never calls
// t.Fatal) and returns the answer or the transport's error.
func overloadPost(url string, body io.Reader, hdr ...string) (*resp, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/datafeed", body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r := &resp{sent: time.Now()}
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	r.done = time.Now()
	r.code, r.header, r.body = res.StatusCode, res.Header, string(b)
	return r, nil
}

// busy checks a refusal for want of a slot: 503, Service-Status 503 and
// Retry-After as configured. It returns what is wrong, or "".
func busy(r *resp, retryAfter string) string {
	switch {
	case r.code != http.StatusServiceUnavailable || r.header.Get("Service-Status") != "503":
		return fmt.Sprintf("%d Service-Status %q (%s), want 503 / 503", r.code, r.header.Get("Service-Status"), r.header.Get("Service-Error"))
	case r.header.Get("Retry-After") != retryAfter:
		return fmt.Sprintf("Retry-After %q, want %q", r.header.Get("Retry-After"), retryAfter)
	case !strings.Contains(r.header.Get("Service-Error"), "as many posts at once as it is configured to"):
		return fmt.Sprintf("Service-Error %q does not say why", r.header.Get("Service-Error"))
	}
	return ""
}

// TestOverloadSlowPostsHoldSlots: four posts whose bodies arrive slowly hold
// all four receipt slots. Forty more posts arriving meanwhile, with small
// and large bodies, are each answered 503 with Retry-After while the slots
// are still held (none waits for a slot, none times out) and store nothing. The four slow
// posts then complete byte-exact, and the next post is accepted at once.
func TestOverloadSlowPostsHoldSlots(t *testing.T) {
	t.Parallel()
	const (
		slots = 4
		extra = 40
	)
	s := start(t, func(c *config.Config) {
		c.Receive.MaxConcurrentReceipts = slots
		c.Receive.RetryAfter = config.Duration(2 * time.Second)
	})
	type slow struct {
		pw   *io.PipeWriter
		done chan *resp
		err  chan error
	}
	var held []slow
	for i := range slots {
		pr, pw := io.Pipe()
		sp := slow{pw: pw, done: make(chan *resp, 1), err: make(chan error, 1)}
		go func() {
			r, err := overloadPost(s.URL, pr, "Feed", testFeed, "X-Slow", itoa(i))
			if err != nil {
				sp.err <- err
				return
			}
			sp.done <- r
		}()
		if _, err := io.WriteString(pw, fmt.Sprintf("slow post %d, first half; ", i)); err != nil {
			t.Fatal(err)
		}
		held = append(held, sp)
	}
	waitMetric(t, s, "weir_receive_inflight", slots)

	small := bytes.Repeat([]byte("s"), 16<<10)
	large := bytes.Repeat([]byte("L"), 4<<20) // more than the server drains after an early answer
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
		errs    []string
	)
	began := time.Now()
	for i := range extra {
		wg.Go(func() {
			body := small
			if i%4 == 0 {
				body = large
			}
			r, err := overloadPost(s.URL, bytes.NewReader(body), "Feed", testFeed, "GUID", fmt.Sprintf("extra-%d", i))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("extra post %d (%d bytes): %v", i, len(body), err))
				return
			}
			if msg := busy(r, "2"); msg != "" {
				errs = append(errs, fmt.Sprintf("extra post %d (%d bytes): %s", i, len(body), msg))
			}
			slowest = max(slowest, r.done.Sub(r.sent))
		})
	}
	wg.Wait()
	slices.Sort(errs)
	for _, e := range errs {
		t.Error(e)
	}
	t.Logf("%d posts beyond %d busy slots: all answered 503 within %s (slowest; %s for all)",
		extra, slots, slowest.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	// The slow posts still hold every slot, so an answer at all proves
	// that nothing waited for one; the bound is only against a stall.
	if slowest > 5*time.Second {
		t.Errorf("a refused post waited %s: it was queued, not refused", slowest)
	}
	if got := metric(t, s, "weir_receive_inflight"); got != slots {
		t.Errorf("weir_receive_inflight %v while the slow posts wait, want %d", got, slots)
	}
	if n := len(s.Streams()); n != 0 {
		t.Errorf("%d streams stored while every slot was busy", n)
	}

	// The slow posts finish; each is stored exactly.
	for i, sp := range held {
		if _, err := io.WriteString(sp.pw, "second half"); err != nil {
			t.Fatal(err)
		}
		sp.pw.Close()
		var r *resp
		select {
		case r = <-sp.done:
		case err := <-sp.err:
			t.Fatalf("slow post %d: %v", i, err)
		case <-time.After(time.Minute):
			t.Fatalf("slow post %d never finished", i)
		}
		id := r.ok(t)
		st := streamByReceipt(t, s, id)
		if got, want := string(s.Read(st.ID, streamfile.Data, 0)), fmt.Sprintf("slow post %d, first half; second half", i); got != want {
			t.Errorf("slow post %d stored %q, want %q", i, got, want)
		}
	}
	// And the next post is accepted at once.
	t0 := time.Now()
	post(t, s, []byte("after"), "Feed", testFeed).ok(t)
	t.Logf("first post after the slow ones finished: 200 in %s", time.Since(t0).Round(time.Millisecond))
	if n := len(s.Streams()); n != slots+1 {
		t.Errorf("%d streams, want %d", n, slots+1)
	}
}

// overloadRun is the outcome of clients posting back to back for a while.
type overloadRun struct {
	ok, refused int
	problems    []string
	slowestOK   time.Duration
	slowestBusy time.Duration
	elapsed     time.Duration
	receipts    map[string]int // receipt id -> body index
}

// TestOverloadSustained: with 4 receipt slots, 4 clients posting back to
// back are all accepted (the sustainable load); 32 clients (8 times as
// many) posting back to back and retrying at once, never honouring
// Retry-After, get 200 or 503 with Retry-After and nothing else: no
// transport errors, no other status, no unbounded waits, and never more
// than 4 posts in flight. When the load drops to one client, every post is
// accepted at once. Every accepted post is stored byte-exact.
func TestOverloadSustained(t *testing.T) {
	t.Parallel()
	const slots = 4
	s := start(t, func(c *config.Config) {
		c.Receive.MaxConcurrentReceipts = slots
		c.Receive.RetryAfter = config.Duration(time.Second)
	})
	const pool = 1 << 20
	data := make([]byte, pool)
	_, _ = rand.NewChaCha8([32]byte{3}).Read(data)
	body := func(i int) []byte { // 16-80 KiB cut from the pool by index
		r := rand.New(rand.NewPCG(uint64(i), 9))
		n := 16<<10 + r.IntN(64<<10)
		off := r.IntN(pool - n)
		return data[off : off+n]
	}
	var seq atomic.Int64
	run := func(clients int, d time.Duration) overloadRun {
		var (
			mu  sync.Mutex
			out = overloadRun{receipts: map[string]int{}}
			wg  sync.WaitGroup
		)
		stop := time.Now().Add(d)
		began := time.Now()
		for range clients {
			wg.Go(func() {
				for time.Now().Before(stop) {
					i := int(seq.Add(1))
					r, err := overloadPost(s.URL, bytes.NewReader(body(i)), "Feed", testFeed, "X-Body", itoa(i))
					mu.Lock()
					switch {
					case err != nil:
						out.problems = append(out.problems, fmt.Sprintf("post %d: %v", i, err))
					case r.code == http.StatusOK:
						out.ok++
						out.receipts[strings.TrimSpace(r.body)] = i
						out.slowestOK = max(out.slowestOK, r.done.Sub(r.sent))
					default:
						if msg := busy(r, "1"); msg != "" {
							out.problems = append(out.problems, fmt.Sprintf("post %d: %s", i, msg))
						}
						out.refused++
						out.slowestBusy = max(out.slowestBusy, r.done.Sub(r.sent))
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		out.elapsed = time.Since(began)
		return out
	}
	report := func(name string, clients int, r overloadRun) {
		t.Logf("%-11s %2d clients for %s: %4d accepted (%.0f/s), %4d refused with 503 (%.0f/s); slowest 200 %s, slowest 503 %s",
			name, clients, r.elapsed.Round(100*time.Millisecond), r.ok, float64(r.ok)/r.elapsed.Seconds(),
			r.refused, float64(r.refused)/r.elapsed.Seconds(), r.slowestOK.Round(time.Millisecond), r.slowestBusy.Round(time.Millisecond))
		for i, p := range r.problems {
			if i == 10 {
				t.Errorf("... %d problems in all", len(r.problems))
				break
			}
			t.Errorf("%s: %s", name, p)
		}
	}

	// The in-flight gauge is sampled throughout.
	var maxInflight atomic.Int64
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if r, err := overloadGet(s.URL + "/metrics"); err == nil {
				for _, line := range strings.Split(r, "\n") {
					if v, ok := strings.CutPrefix(line, "weir_receive_inflight "); ok {
						var f float64
						fmt.Sscan(v, &f)
						if int64(f) > maxInflight.Load() {
							maxInflight.Store(int64(f))
						}
					}
				}
			}
		}
	}()

	sustainable := run(slots, 2*time.Second)
	report("sustainable", slots, sustainable)
	if sustainable.refused != 0 {
		t.Errorf("%d of the sustainable load's posts were refused", sustainable.refused)
	}
	overload := run(8*slots, 3*time.Second)
	report("overload", 8*slots, overload)
	if overload.refused == 0 {
		t.Errorf("no post was refused at 8 times the sustainable load: the test did not overload the server")
	}
	if overload.ok == 0 {
		t.Errorf("no post was accepted under overload: the server stopped doing useful work")
	}
	if overload.slowestBusy > 5*time.Second {
		t.Errorf("a 503 took %s: refusals must not wait", overload.slowestBusy)
	}
	if overload.slowestOK > 30*time.Second {
		t.Errorf("an accepted post took %s under overload", overload.slowestOK)
	}
	// The load drops: accepted at once, from the first post on.
	after := run(1, time.Second)
	report("after", 1, after)
	if after.refused != 0 || after.ok == 0 {
		t.Errorf("after the load dropped: %d accepted, %d refused; want all accepted", after.ok, after.refused)
	}
	close(sampling)
	<-sampled
	if m := maxInflight.Load(); m > slots {
		t.Errorf("weir_receive_inflight reached %d, more than the %d slots", m, slots)
	}
	t.Logf("weir_receive_inflight peaked at %d (sampled every 20ms)", maxInflight.Load())

	// Every accepted post is stored exactly; nothing else is.
	all := map[string]int{}
	for _, r := range []overloadRun{sustainable, overload, after} {
		for id, i := range r.receipts {
			all[id] = i
		}
	}
	streams := s.Streams()
	if len(streams) != len(all) {
		t.Errorf("%d streams, %d posts accepted", len(streams), len(all))
	}
	bad := 0
	for _, st := range streams {
		i, ok := all[st.ReceiptID]
		if !ok {
			t.Errorf("stream %d has receipt %s, which no client got", st.ID, st.ReceiptID)
			continue
		}
		if !bytes.Equal(s.Read(st.ID, streamfile.Data, 0), body(i)) {
			if bad++; bad <= 5 {
				t.Errorf("stream %d (post %d) differs from what was sent", st.ID, i)
			}
		}
	}
}

// overloadGet fetches a URL's body from any goroutine.
func overloadGet(url string) (string, error) {
	res, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}
