package app_test

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/stroomzip"
)

// recordingRelay passes every request to next whole and keeps its body,
// so that a test can read the zips a proxy sends.
type recordingRelay struct {
	next   string
	mu     sync.Mutex
	bodies [][]byte
}

func (rr *recordingRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, rr.next+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		rr.mu.Lock()
		rr.bodies = append(rr.bodies, body)
		rr.mu.Unlock()
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(rb)
}

// count returns how many bodies were delivered.
func (rr *recordingRelay) count() int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return len(rr.bodies)
}

// methods returns the zip methods of the entries of each body delivered.
func (rr *recordingRelay) methods(t *testing.T) [][]uint16 {
	t.Helper()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	var out [][]uint16
	for _, b := range rr.bodies {
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("a forwarded body is not a zip: %v", err)
		}
		var m []uint16
		for _, f := range zr.File {
			m = append(m, f.Method)
		}
		out = append(out, m)
	}
	return out
}

// noiseText is n bytes of printable text that compresses little.
func noiseText(n int) string {
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(' ' + rng.IntN(95))
	}
	return string(b)
}

// TestProxyForwardsS2: a proxy forwarding to weir learns from the main
// service's first answer that it reads zips of S2 entries, and sends the
// aggregates after it so (the first goes deflated); every post arrives
// byte-exact. With zipCompression: standard every zip is deflated.
func TestProxyForwardsS2(t *testing.T) {
	for _, tc := range []struct {
		zipCompression string
		later          uint16 // the method of the entries after the first zip
	}{
		{"", stroomzip.MethodS2},
		{config.ZipCompressionStandard, zip.Deflate},
	} {
		t.Run("zipCompression="+tc.zipCompression, func(t *testing.T) {
			main := start(t, nil)
			rr := &recordingRelay{next: main.URL}
			relay := httptest.NewServer(rr)
			t.Cleanup(relay.Close)
			cfg := apptest.ProxyConfig(t, "proxy-s2", relay.URL+"/datafeed")
			cfg.ForwardHTTPDestinations[0].ZipCompression = tc.zipCompression
			cfg.Aggregator.MaxItemsPerAggregate = 1
			cfg.Aggregator.AggregationFrequency = config.Duration(100 * time.Millisecond)
			p := apptest.StartProxy(t, cfg)

			var sent []string
			for i := range 3 {
				// Each post goes on its own once the one before arrived, so
				// the first answer is in before the second zip is written.
				data := fmt.Sprintf("event %d\n%s", i, bytes.Repeat([]byte("a log line that compresses well\n"), 200*(i+1)))
				if i == 2 {
					// Several of the store's blocks, one that S2 hardly
					// compresses among them: the proxy passes its stored
					// S2 blocks on as they are.
					data += strings.Repeat("more log lines that compress\n", 12_000) + noiseText(300<<10)
				}
				post(t, p, []byte(data), "Feed", testFeed, "System", "sys").accepted(t)
				sent = append(sent, data)
				waitParts(t, main, i+1)
				// The main service stores a post before it answers, and the
				// relay records the zip once it has the answer; the proxy
				// learns what its downstream reads when its send returns,
				// before it removes the forwarded post.
				apptest.WaitFor(t, "the relay recorded the zip", func() bool { return rr.count() == i+1 })
				apptest.WaitFor(t, "the proxy's repository to empty", func() bool { return len(p.Streams()) == 0 })
			}
			var got []string
			for _, part := range allParts(t, main) {
				got = append(got, string(part.data))
			}
			sort.Strings(got)
			sort.Strings(sent)
			if fmt.Sprint(got) != fmt.Sprint(sent) {
				t.Fatalf("the main service stored %d parts that differ from the %d posts", len(got), len(sent))
			}
			methods := rr.methods(t)
			if len(methods) != 3 {
				t.Fatalf("%d zips delivered, want 3", len(methods))
			}
			for i, ms := range methods {
				want := tc.later
				if i == 0 {
					want = zip.Deflate
				}
				for _, m := range ms {
					if m != want {
						t.Errorf("zip %d: entry methods %v, want every one %d", i+1, ms, want)
						break
					}
				}
			}
		})
	}
}
