package app_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// allParts reads every part of every stream of a server.
func allParts(t *testing.T, s *apptest.Server) []storedPart {
	t.Helper()
	var out []storedPart
	for _, st := range s.Streams() {
		if st.Status != meta.Unlocked {
			continue // still being written
		}
		out = append(out, storedParts(t, s, st)...)
	}
	return out
}

// waitParts waits until the main service stored at least n parts.
func waitParts(t *testing.T, s *apptest.Server, n int) []storedPart {
	t.Helper()
	var parts []storedPart
	apptest.WaitFor(t, fmt.Sprintf("%d parts at the main service", n), func() bool {
		parts = allParts(t, s)
		return len(parts) >= n
	})
	return parts
}

// accepted asserts a 200 and returns the receipt id, whoever issued it.
func (r *resp) accepted(t testing.TB) string {
	t.Helper()
	if r.code != 200 {
		t.Fatalf("want 200, got %d Service-Status %q Service-Error %q body %q",
			r.code, r.header.Get("Service-Status"), r.header.Get("Service-Error"), r.body)
	}
	return strings.TrimSpace(r.body)
}

// proxyKey creates a user on the main service and an API key for it.
func proxyKey(t *testing.T, main *apptest.Server, user string) string {
	t.Helper()
	svc := main.App.Access()
	if _, err := svc.CreateUser(context.Background(), user, "", false); err != nil {
		t.Fatal(err)
	}
	key, _, err := svc.CreateAPIKey(context.Background(), access.NewKey{Owner: user})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestProxyChain: sender -> proxy -> proxy -> main service. Every post
// arrives byte-exact, and its stored ReceiptIdPath holds the id the sender
// got, the second proxy's id and the main service's id, in that order.
func TestProxyChain(t *testing.T) {
	main := start(t, nil)
	p2cfg := apptest.ProxyConfig(t, "proxy-two", main.URL+"/datafeed")
	// The second proxy forwards (and asks feed status) with an API key of
	// its own user on the main service.
	p2cfg.ForwardHTTPDestinations[0].APIKey = proxyKey(t, main, "proxy-two")
	p2cfg.Aggregator.MaxItemsPerAggregate = 3
	p2cfg.Aggregator.AggregationFrequency = config.Duration(200 * time.Millisecond)
	p2 := apptest.StartProxy(t, p2cfg)
	p1cfg := apptest.ProxyConfig(t, "proxy-one", p2.URL+"/datafeed")
	p1cfg.Aggregator.AggregationFrequency = config.Duration(200 * time.Millisecond)
	p1 := apptest.StartProxy(t, p1cfg)

	p1RE := regexp.MustCompile(`^\d{13}_\d{4}_P_proxy-one$`)
	p2RE := regexp.MustCompile(`^\d{13}_\d{4}_P_proxy-two$`)
	const n = 7
	sent := map[string]string{} // receipt -> data
	for i := range n {
		data := fmt.Sprintf("event %d\nline two of %d\n", i, i)
		id := post(t, p1, []byte(data), "Feed", testFeed, "System", "sys", "Type", "Raw Events").accepted(t)
		if !p1RE.MatchString(id) {
			t.Fatalf("post %d: receipt %q is not a proxy-one receipt id", i, id)
		}
		sent[id] = data
	}
	parts := waitParts(t, main, n)
	if len(parts) != n {
		t.Fatalf("%d parts stored, want %d", len(parts), n)
	}
	analyst := user(t, main, "chain-analyst", []string{access.Administrator}, nil)
	// findOne asks the main service's API for the streams holding receipt
	// id rid, as an operator would with the id a sender reports.
	findOne := func(rid string) int64 {
		t.Helper()
		p := sxFind(t, analyst, `{"expression":`+sxTerm("Receipt Id", "EQUALS", rid)+`}`)
		if len(p.Streams) != 1 {
			t.Fatalf("find Receipt Id = %s: streams %v, want one", rid, p.ids())
		}
		return p.Streams[0].ID
	}
	for _, p := range parts {
		path := strings.Split(p.meta.Value("ReceiptIdPath"), ",")
		if len(path) != 3 {
			t.Fatalf("stream %d: ReceiptIdPath %q, want three ids", p.stream, p.meta.Value("ReceiptIdPath"))
		}
		data, ok := sent[path[0]]
		if !ok {
			t.Fatalf("stream %d: path starts with %q, which no sender got", p.stream, path[0])
		}
		delete(sent, path[0])
		if !p2RE.MatchString(path[1]) || !receiptRE.MatchString(path[2]) {
			t.Errorf("stream %d: ReceiptIdPath %q: want proxy-one, proxy-two, main service ids", p.stream, p.meta.Value("ReceiptIdPath"))
		}
		if p.meta.Value("ReceiptId") != path[2] {
			t.Errorf("stream %d: ReceiptId %q, want the main service's %q", p.stream, p.meta.Value("ReceiptId"), path[2])
		}
		// Every hop's id finds the stream: the sender's, the second
		// proxy's and the main service's own.
		for _, rid := range path {
			if got := findOne(rid); got != p.stream {
				t.Errorf("find Receipt Id = %s: stream %d, want %d", rid, got, p.stream)
			}
		}
		if string(p.data) != data {
			t.Errorf("stream %d: data %q, want %q", p.stream, p.data, data)
		}
		if p.meta.Value("System") != "sys" || p.meta.Value("Feed") != testFeed {
			t.Errorf("stream %d: attributes lost: %v", p.stream, p.meta.Sorted())
		}
	}
	// The first proxy asks the second whether a feed receives, which asks
	// the main service: a feed the main service does not know is refused
	// at the edge with the main service's code.
	r := post(t, p1, []byte("x"), "Feed", "NO-SUCH-FEED")
	if r.code != 406 || r.header.Get("Service-Status") != "110" {
		t.Fatalf("post for an unknown feed through two proxies: %d %q %q, want 406 / 110\n%s", r.code, r.header.Get("Service-Status"), r.header.Get("Service-Error"), p1.Logs.String())
	}
	// Delivered everywhere: nothing is left at either proxy.
	for _, p := range []*apptest.Server{p1, p2} {
		apptest.WaitFor(t, "the proxy's repository to empty", func() bool { return len(p.Streams()) == 0 })
	}
}
