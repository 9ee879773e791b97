package app_test

// Black-box tests of the datafeed endpoint: real HTTP clients (and raw
// connections where a client must misbehave) against whole weir servers.
// Every test runs on SQLite, and on PostgreSQL with WEIR_TEST_DB=postgres.
//
// The reference study's given-then-expect cases (datafeed-and-proxy.md,
// section 10, cases 1-38), re-expressed in weir's terms:
//
//	case  test
//	1     TestDatafeedStatusCodes/100_no_headers_no_body
//	2     TestDatafeedUnknownCompression
//	3     TestDatafeedPlain/NONE
//	4     TestDatafeedEffectiveTime, row periodStartTime_query (feed and periodStartTime as query
//	      parameters, no headers; periodStartTime sets the effective time)
//	5     TestDatafeedPlain/empty
//	6     TestDatafeedPlain/absent
//	7     TestDatafeedGzipInvalid/not_gzip: 500/400; weir's message names the gzip failure
//	      ("gzip: invalid header") rather than the reference's "format"
//	8     TestDatafeedZipInvalid/58_bytes_of_text
//	9     TestDatafeedZipInvalid/SMALL_DATA: weir differs on purpose: 500/400, not a silent 200
//	      with nothing stored (a body declared ZIP that is not a zip is never acknowledged)
//	10    TestDatafeedGzip/GZIP
//	11    TestDatafeedGzip/multi-member
//	12    TestDatafeedEmptyBody (GZIP with Content-Length: 0): 200 with a receipt, nothing stored
//	13    TestDatafeedZipSingleEntry
//	14    TestDatafeedClientDisconnect/NONE: 500/999 logged, nothing stored (the sender is gone,
//	      so the status is asserted from the receive log)
//	15    TestDatafeedClientDisconnect/GZIP
//	16    TestDatafeedClientDisconnect/ZIP
//	17    TestDatafeedZipFeeds/reference_feed: weir differs on purpose: reference feeds are not
//	      special, the two groups are two parts of one stream
//	18    TestDatafeedZipFeeds/meta_names_two_feeds
//	19    TestDatafeedZipFeeds/two_groups_one_feed
//	20    TestDatafeedPlain/Sample_Data (meta holds "StreamSize:11\nTEST:VALUE\n" among the
//	      receiver's keys; TEST sent as a query parameter, since HTTP/1.1 canonicalises header
//	      names to Test)
//	21    TestDatafeedGzipInvalid/truncated
//	22    TestDatafeedZipInvalid/half_an_empty_zip: weir differs on purpose: 500/400 rather than
//	      a silent 200 (see case 9)
//	23    TestDatafeedZipGrouping/txt
//	24    TestDatafeedZipGrouping/dat
//	25    TestDatafeedZipGrouping/txt+meta_interleaved
//	26    TestDatafeedZipGrouping/txt+hdr_interleaved
//	27    TestDatafeedZipGrouping/hdr_before_txt_descending
//	28    TestDatafeedZipGrouping/all_hdr_then_all_txt_descending
//	29    TestDatafeedZipGrouping/all_hdr_descending_then_txt_ascending: in weir parts follow the
//	      order of each group's first entry, so the parts run 10..1 in cases 27-29
//	30    TestDatafeedZipInvalid/corrupt_entry (a zip format error is 500/400 with the cause in
//	      the message); unknown errors are 999: TestDatafeedClientDisconnect,
//	      TestDatafeedBodyIdleTimeout
//	31    TestDatafeedStatusCodes/110_message_context
//	32    TestDatafeedAttributes (headers and query become attributes, GUID, RemoteAddress/Host,
//	      ReceivedPath, ReceiptIdPath = ReceiptId, ReceivedTimeHistory = ReceivedTime)
//	33    TestDatafeedUpstreamHop/guid_remote_and_receipt_info
//	34    TestDatafeedUpstreamHop/guid_without_remote
//	35    TestDatafeedZipSample (groups whose .meta adds no receipt info get the post's)
//	36    TestDatafeedZipUpstreamMeta
//	37    not covered here: X-SSL-Client-V-End belongs to sender authentication (the next issue)
//	38    TestDatafeedReceiptIDs (format ^\d{13}_\d{4}_S_test-node$, strictly increasing),
//	      TestDatafeedNodeNameRejected (a node name that is not [A-Za-z0-9-] is refused); the
//	      format/parse round trip itself is a unit test of internal/receipt

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/streamfile"
)

// TestDatafeedPaths: POST and PUT on every datafeed path and below it; other
// methods get 405 with Service-Status 405; other paths are not the datafeed.
func TestDatafeedPaths(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	paths := []string{"/datafeed", "/datafeed/anything", "/stroom/datafeed", "/stroom/datafeed/x",
		"/stroom/noauth/datafeed", "/stroom/noauth/datafeed/x", "/datafeed/a/b/c"}
	want := map[string]string{} // receipt -> data
	for _, p := range paths {
		for _, m := range []string{http.MethodPost, http.MethodPut} {
			data := m + " " + p
			r := send(t, s, m, p, strings.NewReader(data), "Feed", testFeed)
			want[r.ok(t)] = data
		}
		for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
			r := send(t, s, m, p, strings.NewReader("x"), "Feed", testFeed)
			// A failure like any other: with the status headers.
			r.fails(t, http.StatusMethodNotAllowed, 405, "Method not allowed", m+" is not a datafeed method")
			if allow := r.header.Get("Allow"); !strings.Contains(allow, "POST") || !strings.Contains(allow, "PUT") {
				t.Errorf("%s %s: Allow %q, want POST and PUT", m, p, allow)
			}
		}
	}
	for _, p := range []string{"/datafeedx", "/", "/stroom/datafeedx", "/stroom/noauth"} {
		if r := send(t, s, http.MethodPost, p, strings.NewReader("x"), "Feed", testFeed); r.code != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", p, r.code)
		}
	}
	st := s.Streams()
	if len(st) != len(want) {
		t.Fatalf("%d streams, want %d", len(st), len(want))
	}
	for _, x := range st {
		if got := string(s.Read(x.ID, 0, 0)); got != want[x.ReceiptID] {
			t.Errorf("stream %s: data %q, want %q", x.ReceiptID, got, want[x.ReceiptID])
		}
	}
}

// TestDatafeedPlain: an uncompressed body (Compression absent, empty, or NONE
// in any case) is stored exactly, with the request's attributes and the
// receiver's, in the stream row and in its Meta Data child (cases 3, 5, 6, 20).
func TestDatafeedPlain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hdr  []string
	}{
		{"absent", nil},
		{"empty", []string{"Compression", ""}},
		{"NONE", []string{"Compression", "NONE"}},
		{"none", []string{"Compression", "none"}},
		{"nOnE", []string{"Compression", " nOnE "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, nil)
			body := "SOME TEST DATA"
			// HTTP/1.1 header names arrive canonicalised: TEST is stored as Test.
			r := post(t, s, []byte(body), append([]string{"Feed", testFeed, "TEST", "VALUE"}, tc.hdr...)...)
			id := r.ok(t)
			st := oneStream(t, s, testFeed, "Raw Events", id)
			want := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Test", "VALUE", "StreamSize", "14")
			wantAttrs(t, "stream", st.Attributes, want)
			wantParts(t, s, st, part{data: body, meta: want})
			if st.EffectiveMs != st.CreateMs {
				t.Errorf("effective %d, want the receive time %d", st.EffectiveMs, st.CreateMs)
			}
			// Durable: the same after a restart.
			s = s.Restart()
			st = oneStream(t, s, testFeed, "Raw Events", id)
			wantParts(t, s, st, part{data: body, meta: want})
		})
	}
	t.Run("Sample Data", func(t *testing.T) { // case 20
		t.Parallel()
		s := start(t, nil)
		// A query parameter keeps the sender's case.
		r := send(t, s, http.MethodPost, "/datafeed?TEST=VALUE", strings.NewReader("Sample Data"), "Feed", testFeed)
		id := r.ok(t)
		st := oneStream(t, s, testFeed, "Raw Events", id)
		m := string(s.Read(st.ID, 2, 0))
		if !strings.Contains(m, "\nStreamSize:11\nTEST:VALUE\n") {
			t.Errorf("meta %q lacks StreamSize:11 then TEST:VALUE", m)
		}
	})
	t.Run("samples", func(t *testing.T) {
		// Real-world shapes (CSV, JSON, XML, BOM) are stored byte for byte.
		t.Parallel()
		s := start(t, nil)
		for _, name := range []string{"BOM_XML-EVENTS~1.in", "JSON-EVENTS~1.in", "DATA_SPLITTER-EVENTS~1.in", "TEST_TRACES~10.in"} {
			b := readSample(t, name)
			id := post(t, s, b, "Feed", testFeed, "Type", "Raw Events", "Compression", "NONE").ok(t)
			st := streamByReceipt(t, s, id)
			if got := s.Read(st.ID, 0, 0); !bytes.Equal(got, b) {
				t.Errorf("%s: stored %d bytes differ from the %d sent", name, len(got), len(b))
			}
			if st.Attributes.Value("StreamSize") != strconv.Itoa(len(b)) || st.RawSize != int64(len(b)) {
				t.Errorf("%s: StreamSize %q raw %d, want %d", name, st.Attributes.Value("StreamSize"), st.RawSize, len(b))
			}
		}
	})
}

// TestDatafeedAttributes: headers and query parameters become attributes;
// names are case-insensitive and known names get their conventional case;
// query parameters win and are URL-decoded; values are trimmed (case 32).
func TestDatafeedAttributes(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	q := "?System=QUERY-SYS&name=ferret&colour=purple%20haze&Plus=a+b&trimmed=%20%20x%20%20&noequals&bad=%zz&empty=&Mixed%20Key=v"
	r := send(t, s, http.MethodPost, "/datafeed"+q, strings.NewReader("data"),
		"feed", testFeed, // lower case: stored as Feed
		"effectivetime", "2024-03-01T14:34:56.5+02:00",
		"sqsmessageid", "m-1",
		"x-custom-thing", "custom value",
		"System", "HEADER-SYS",
		"Foo", "Bar",
		"Environment", "first",
		"Environment", "second", // a header on two lines is one list (RFC 9110 5.3); the reference system keeps the first
		"Content-Type", "text/plain")
	id := r.ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	want := firstHop(t, s, r, id, st.Attributes).with(
		"Feed", testFeed,
		"EffectiveTime", "2024-03-01T12:34:56.500Z",
		"SqsMessageId", "m-1",
		"X-Custom-Thing", "custom value",
		"System", "QUERY-SYS",
		"Foo", "Bar",
		"Environment", "first, second",
		"Content-Type", "text/plain",
		"name", "ferret",
		"colour", "purple haze",
		"Plus", "a b",
		"trimmed", "x",
		"bad", "%zz",
		"empty", "",
		"Mixed Key", "v",
		"StreamSize", "4")
	wantAttrs(t, "stream", st.Attributes, want)
	wantParts(t, s, st, part{data: "data", meta: want})
	if eff := time.Date(2024, 3, 1, 12, 34, 56, 500e6, time.UTC).UnixMilli(); st.EffectiveMs != eff {
		t.Errorf("effective %d, want %d", st.EffectiveMs, eff)
	}
}

// TestDatafeedExcludedHeaders: credentials, hop-by-hop and transport headers
// and the compression declarations are never stored, whether sent as headers
// or as query parameters.
func TestDatafeedExcludedHeaders(t *testing.T) {
	t.Parallel()
	// No authenticator at all, so that the credential headers below are only
	// data to leave out (authentication is tested in security_test.go).
	s := start(t, func(c *config.Config) { c.Receive.EnabledAuthenticationTypes = nil })
	excluded := []string{
		"Authorization: Bearer sdk_secret",
		"Proxy-Authorization: Basic c2VjcmV0",
		"Cookie: session=secret",
		"Connection: keep-alive",
		"Keep-Alive: timeout=5",
		"Compression: NONE",
		"Content-Encoding: identity",
		"Expect: 100-continue",
		"Accept: */*",
		"Accept-Encoding: gzip",
		"TE: trailers",
		"X-Amzn-Oidc-Accesstoken: secret",
		"X-Amzn-Oidc-Identity: someone",
		"X-Amzn-Oidc-Data: secret",
	}
	lines := append([]string{"Feed: " + testFeed, "User-Agent: " + userAgent, "GUID: g-1", "Kept: yes", "Content-Length: 4"}, excluded...)
	r := rawRequest(t, s, head(s, "POST /datafeed?authorization=q&Cookie=q&content-length=9&Kept2=yes HTTP/1.1", lines...), []byte("data"))
	id := r.ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	rt := st.Attributes.Value("ReceivedTime")
	checkTime(t, rt, r)
	want := attrs{
		"Feed": testFeed, "GUID": "g-1", "Kept": "yes", "Kept2": "yes", "User-Agent": userAgent, "Host": addr(s),
		"UploadUserId": "UNAUTHENTICATED_USER", "UploadUsername": "UNAUTHENTICATED_USER",
		"ReceiptId": id, "ReceiptIdPath": id, "ReceivedTime": rt, "ReceivedTimeHistory": rt,
		"ReceivedPath": hostName(t), "StreamSize": "4",
	}
	wantAttrs(t, "stream", st.Attributes, want)
	wantParts(t, s, st, part{data: "data", meta: want})

	// Transfer-Encoding (a chunked body) is not stored either.
	r = rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: "+testFeed, "Transfer-Encoding: chunked", "GUID: g-2"),
		[]byte("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"))
	id = r.ok(t)
	st = streamByReceipt(t, s, id)
	if got := string(s.Read(st.ID, 0, 0)); got != "abcde" {
		t.Errorf("chunked data %q", got)
	}
	for _, k := range []string{"Transfer-Encoding", "Content-Length"} {
		if _, ok := st.Attributes.Get(k); ok {
			t.Errorf("%s stored", k)
		}
	}
}

// TestDatafeedUpstreamHop: a post that already carries receipt information
// (from a proxy) keeps it and appends this hop (cases 33, 34, and section 5.3).
func TestDatafeedUpstreamHop(t *testing.T) {
	t.Parallel()
	const (
		p1 = "0000000000001_0000_P_proxy-1"
		t1 = "2024-01-02T03:04:05.678Z"
	)
	for _, tc := range []struct {
		name string
		hdr  []string
		want func(id, now string) attrs
	}{
		{
			"guid_remote_and_receipt_info",
			[]string{"GUID", "g-1", "RemoteAddress", "10.0.0.1", "RemoteHost", "upstream.example",
				"ReceiptId", p1, "ReceiptIdPath", p1, "ReceivedTime", t1, "ReceivedTimeHistory", t1, "ReceivedPath", "proxyhost"},
			func(id, now string) attrs {
				return attrs{"GUID": "g-1", "RemoteAddress": "10.0.0.1", "RemoteHost": "upstream.example",
					"ReceiptId": id, "ReceiptIdPath": p1 + "," + id, "ReceivedTime": now,
					"ReceivedTimeHistory": t1 + "," + now, "ReceivedPath": "proxyhost,"}
			},
		},
		{
			// No path and no history: they start from the upstream values,
			// and an upstream ReceivedTime is normalised to UTC.
			"receipt_id_without_path",
			[]string{"GUID", "g-2", "ReceiptId", p1, "ReceivedTime", "2024-01-02T05:04:05.678+02:00"},
			func(id, now string) attrs {
				return attrs{"GUID": "g-2", "ReceiptId": id, "ReceiptIdPath": p1 + "," + id,
					"ReceivedTime": now, "ReceivedTimeHistory": t1 + "," + now, "ReceivedPath": ""}
			},
		},
		{
			"guid_without_remote",
			[]string{"GUID", "g-3"},
			func(id, now string) attrs {
				return attrs{"GUID": "g-3", "ReceiptId": id, "ReceiptIdPath": id,
					"ReceivedTime": now, "ReceivedTimeHistory": now, "ReceivedPath": ""}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, nil)
			r := post(t, s, []byte("data"), append([]string{"Feed", testFeed}, tc.hdr...)...)
			id := r.ok(t)
			st := oneStream(t, s, testFeed, "Raw Events", id)
			now := st.Attributes.Value("ReceivedTime")
			checkTime(t, now, r)
			want := tc.want(id, now).with("Feed", testFeed, "User-Agent", userAgent, "Host", addr(s), "StreamSize", "4",
				"UploadUserId", "UNAUTHENTICATED_USER", "UploadUsername", "UNAUTHENTICATED_USER")
			want["ReceivedPath"] += hostName(t)
			wantAttrs(t, "stream", st.Attributes, want)
			wantParts(t, s, st, part{data: "data", meta: want})
		})
	}
}

// TestDatafeedEffectiveTime: EffectiveTime is normalised to UTC with
// milliseconds and sets the stream's effective time; periodStartTime is the
// fallback; an unparseable value is kept and the receive time is used.
func TestDatafeedEffectiveTime(t *testing.T) {
	t.Parallel()
	ms := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	s := start(t, nil)
	for _, tc := range []struct {
		name, path string
		hdr        []string
		key, value string // the stored attribute
		effective  int64  // 0: the receive time
	}{
		{"offset", "/datafeed", []string{"EffectiveTime", "2024-03-01T14:34:56+02:00"}, "EffectiveTime", "2024-03-01T12:34:56.000Z", ms("2024-03-01T12:34:56Z")},
		{"utc", "/datafeed", []string{"EffectiveTime", "2024-03-01T12:34:56.789Z"}, "EffectiveTime", "2024-03-01T12:34:56.789Z", ms("2024-03-01T12:34:56.789Z")},
		{"no_offset", "/datafeed", []string{"EffectiveTime", "2024-03-01T12:34:56.7"}, "EffectiveTime", "2024-03-01T12:34:56.700Z", ms("2024-03-01T12:34:56.7Z")},
		{"epoch_ms", "/datafeed", []string{"EffectiveTime", "1709296496789"}, "EffectiveTime", "2024-03-01T12:34:56.789Z", ms("2024-03-01T12:34:56.789Z")},
		{"lower_case_header", "/datafeed", []string{"effectivetime", "2024-03-01T12:34:56Z"}, "EffectiveTime", "2024-03-01T12:34:56.000Z", ms("2024-03-01T12:34:56Z")},
		{"unparseable", "/datafeed", []string{"EffectiveTime", "yesterday"}, "EffectiveTime", "yesterday", 0},
		{"periodStartTime_header", "/datafeed", []string{"periodStartTime", "2020-05-06T07:08:09.010Z"}, "periodStartTime", "2020-05-06T07:08:09.010Z", ms("2020-05-06T07:08:09.010Z")},
		// Case 4: feed and times as query parameters, no headers at all.
		{"periodStartTime_query", "/datafeed?feed=" + testFeed + "&periodStartTime=2020-05-06T07:08:09.010Z&periodEndTime=2020-05-06T08:08:09.010Z", nil, "periodStartTime", "2020-05-06T07:08:09.010Z", ms("2020-05-06T07:08:09.010Z")},
		{"EffectiveTime_wins", "/datafeed?periodStartTime=2020-05-06T07:08:09.010Z", []string{"EffectiveTime", "2021-01-01T00:00:00Z"}, "EffectiveTime", "2021-01-01T00:00:00.000Z", ms("2021-01-01T00:00:00Z")},
	} {
		hdr := tc.hdr
		if !strings.Contains(tc.path, "feed=") {
			hdr = append([]string{"Feed", testFeed}, hdr...)
		}
		id := send(t, s, http.MethodPost, tc.path, strings.NewReader("SOME TEST DATA"), hdr...).ok(t)
		st := streamByReceipt(t, s, id)
		if got := st.Attributes.Value(tc.key); got != tc.value {
			t.Errorf("%s: %s %q, want %q", tc.name, tc.key, got, tc.value)
		}
		want := tc.effective
		if want == 0 {
			want = st.CreateMs
		}
		if st.EffectiveMs != want {
			t.Errorf("%s: effective %d, want %d", tc.name, st.EffectiveMs, want)
		}
		if got := string(s.Read(st.ID, 0, 0)); got != "SOME TEST DATA" {
			t.Errorf("%s: data %q", tc.name, got)
		}
	}
}

// TestDatafeedReceiptIDs: receipt ids have the reference shape and strictly
// increase, for one sender after another and for senders posting at once
// (case 38).
func TestDatafeedReceiptIDs(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	prev := ""
	for i := range 30 {
		id := post(t, s, []byte("seq "+strconv.Itoa(i)), "Feed", testFeed).ok(t)
		if id <= prev {
			t.Errorf("receipt %s after %s", id, prev)
		}
		prev = id
	}
	const senders, each = 8, 12
	var (
		mu  sync.Mutex
		all = map[string]string{} // receipt -> data
		wg  sync.WaitGroup
	)
	for g := range senders {
		wg.Go(func() {
			last := ""
			for i := range each {
				data := fmt.Sprintf("sender %d post %d", g, i)
				r := post(t, s, []byte(data), "Feed", testFeed)
				if r.code != http.StatusOK {
					t.Errorf("sender %d: %d %s", g, r.code, r.body)
					return
				}
				id := strings.TrimSuffix(r.body, "\n")
				if !receiptRE.MatchString(id) || id <= last {
					t.Errorf("sender %d: receipt %q after %q", g, id, last)
				}
				last = id
				mu.Lock()
				if _, dup := all[id]; dup {
					t.Errorf("receipt %s issued twice", id)
				}
				all[id] = data
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(all) != senders*each {
		t.Fatalf("%d distinct receipts, want %d", len(all), senders*each)
	}
	for id, data := range all {
		st := streamByReceipt(t, s, id)
		if got := string(s.Read(st.ID, 0, 0)); got != data || st.Attributes.Value("ReceiptId") != id {
			t.Errorf("receipt %s: data %q ReceiptId %q", id, got, st.Attributes.Value("ReceiptId"))
		}
	}
}

// TestDatafeedNodeNameRejected: receipt ids are <ms>_<seq>_S_<node>, so a node
// name outside [A-Za-z0-9-] is refused at start (case 38).
func TestDatafeedNodeNameRejected(t *testing.T) {
	t.Parallel()
	for _, node := range []string{"foo bar", "foo_bar", "node?"} {
		cfg := apptest.Config(t)
		cfg.Node = node
		a, err := app.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = a.Shutdown(time.Minute)
			t.Errorf("node %q accepted", node)
		} else if !strings.Contains(err.Error(), "node") {
			t.Errorf("node %q: error %v does not name the node", node, err)
		}
	}
}

// TestDatafeedStatusCodes covers the status table for the receipt checks.
func TestDatafeedStatusCodes(t *testing.T) {
	t.Parallel()
	withMode := func(m config.CheckMode) func(*config.Config) {
		return func(c *config.Config) { c.Receive.ReceiptCheckMode = m }
	}
	t.Run("100_no_headers_no_body", func(t *testing.T) { // case 1
		t.Parallel()
		s := start(t, nil)
		post(t, s, nil).fails(t, 406, 100, "Feed must be specified")
		post(t, s, []byte("data"), "Feed", "  ").fails(t, 406, 100, "Feed must be specified")
		post(t, s, []byte("data"), "Type", "Events").fails(t, 406, 100, "Feed must be specified")
		nothingStored(t, s)
	})
	t.Run("101_feed_existence", func(t *testing.T) {
		t.Parallel()
		s := start(t, withMode(config.FeedExistence))
		post(t, s, []byte("data"), "Feed", "NO-SUCH-FEED").fails(t, 406, 101, "Feed is not defined", "NO-SUCH-FEED")
		nothingStored(t, s)
		// The feed's status is not checked in this mode: a REJECT feed receives.
		s.CreateFeed("REJECTING", feed.Reject, "")
		id := post(t, s, []byte("data"), "Feed", "REJECTING").ok(t)
		oneStream(t, s, "REJECTING", "Raw Events", id)
	})
	t.Run("411_http10_without_length", func(t *testing.T) {
		// An HTTP/1.0 body without Content-Length is not read by the HTTP
		// server: it must not be answered 200 as an empty post.
		t.Parallel()
		s := start(t, nil)
		rawRequest(t, s, head(s, "POST /datafeed HTTP/1.0", "Feed: "+testFeed), nil).
			fails(t, http.StatusLengthRequired, 411, "Content-Length")
		nothingStored(t, s)
		// With its length, an HTTP/1.0 post is received.
		id := rawRequest(t, s, head(s, "POST /datafeed HTTP/1.0", "Feed: "+testFeed, "Content-Length: 5"), []byte("data\n")).ok(t)
		if got := string(s.Read(oneStream(t, s, testFeed, "Raw Events", id).ID, streamfile.Data, 0)); got != "data\n" {
			t.Errorf("stored %q", got)
		}
	})
	t.Run("102_bad_type", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		post(t, s, []byte("data"), "Feed", testFeed, "Type", "Bogus").fails(t, 406, 102, "Data type is invalid",
			"[Feed: TEST-FEED, Type: Bogus] - ")
		nothingStored(t, s)
		// Types match case-insensitively and are stored with the configured spelling.
		id := post(t, s, []byte("data"), "Feed", testFeed, "Type", "raw REFERENCE").ok(t)
		st := oneStream(t, s, testFeed, "Raw Reference", id)
		// The Type attribute agrees with the stream's type, in its meta too.
		if got := st.Attributes.Value("Type"); got != "Raw Reference" {
			t.Errorf("Type attribute %q, want Raw Reference", got)
		}
		if m := string(s.Read(st.ID, streamfile.Meta, 0)); !strings.Contains(m, "Type:Raw Reference\n") {
			t.Errorf("meta %q", m)
		}
	})
	t.Run("102_custom_meta_types", func(t *testing.T) {
		t.Parallel()
		s := start(t, func(c *config.Config) { c.Receive.MetaTypes = []string{"Raw Events", "Audit"} })
		post(t, s, []byte("data"), "Feed", testFeed, "Type", "Events").fails(t, 406, 102, "Events")
		id := post(t, s, []byte("data"), "Feed", testFeed, "Type", "audit").ok(t)
		oneStream(t, s, testFeed, "Audit", id)
	})
	t.Run("110_unknown_and_rejecting_feeds", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("REJECTING", feed.Reject, "")
		post(t, s, []byte("data"), "Feed", "NO-SUCH-FEED").fails(t, 406, 110, "Feed is not set to receive data", "NO-SUCH-FEED")
		post(t, s, []byte("data"), "Feed", "REJECTING").fails(t, 406, 110, "Feed is not set to receive data", "REJECT")
		// Feed names are exact: another case is another (unknown) feed.
		post(t, s, []byte("data"), "Feed", "test-feed").fails(t, 406, 110)
		// Checked before the body is read: a sender that waits for 100
		// Continue gets the answer without sending its body.
		r := rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: REJECTING", "Expect: 100-continue", "Content-Length: 1000"), nil)
		r.fails(t, 406, 110)
		nothingStored(t, s)
	})
	t.Run("110_odd_feed_names", func(t *testing.T) {
		// Whatever bytes a sender puts in a feed name, it is an unknown
		// feed on either database, and the answer stays one header line.
		t.Parallel()
		for _, mode := range []config.CheckMode{config.FeedStatus, config.FeedExistence, config.ReceiveAll} {
			s := start(t, withMode(mode))
			want := map[config.CheckMode]int{config.FeedStatus: 110}[mode]
			if want == 0 {
				want = 101
			}
			r := send(t, s, http.MethodPost, "/datafeed?feed=BAD%0D%0AInjected:%20yes%00", strings.NewReader("x"))
			r.fails(t, 406, want, `BAD\r\nInjected: yes\x00`)
			if r.header.Get("Injected") != "" {
				t.Errorf("header injected")
			}
			send(t, s, http.MethodPost, "/datafeed?feed=%FF%FE", strings.NewReader("x")).fails(t, 406, want)
			rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: CAF\xc9", "Content-Length: 1"), []byte("x")).fails(t, 406, want)
			rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: A\tB", "Content-Length: 1"), []byte("x")).fails(t, 406, want)
			nothingStored(t, s)
		}
	})
	t.Run("110_message_context", func(t *testing.T) { // case 31
		t.Parallel()
		s := start(t, nil)
		post(t, s, gz(t, "data"), "Feed", "MY_FEED", "Compression", "GZIP", "Type", "Events").
			fails(t, 406, 110, "Feed is not set to receive data [Feed: MY_FEED, Compression: GZIP, Type: Events]", "MY_FEED")
		nothingStored(t, s)
	})
	t.Run("drop_feed", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("DROPPING", feed.Drop, "")
		post(t, s, []byte("data"), "Feed", "DROPPING").ok(t)
		post(t, s, gz(t, "data"), "Feed", "DROPPING", "Compression", "GZIP").ok(t)
		// The compression rules hold for a dropped post too (the reference
		// answers 200): the sender learns its posts are malformed.
		post(t, s, []byte("data"), "Feed", "DROPPING", "Compression", "BZIP2").fails(t, 406, 200, "BZIP2")
		post(t, s, gz(t, "data"), "Feed", "DROPPING", "Compression", "GZIP", "Content-Encoding", "gzip").fails(t, 500, 400, "twice")
		// The body is not needed: the answer comes without it.
		r := rawRequest(t, s, head(s, "POST /datafeed HTTP/1.1", "Feed: DROPPING", "Expect: 100-continue", "Content-Length: 1000", "GUID: drop-1"), nil)
		r.ok(t)
		l := receiveLog(t, s, "guid", "drop-1")
		if l.str("outcome") != "dropped" || l.num("bytes") != 0 {
			t.Errorf("drop log line %v", l)
		}
		nothingStored(t, s)
	})
	t.Run("113_reject_all", func(t *testing.T) {
		t.Parallel()
		s := start(t, withMode(config.RejectAll))
		post(t, s, []byte("data"), "Feed", testFeed).fails(t, 406, 113, "rejected")
		post(t, s, []byte("data"), "Feed", "NO-SUCH-FEED").fails(t, 406, 113)
		nothingStored(t, s)
	})
	t.Run("drop_all", func(t *testing.T) {
		t.Parallel()
		s := start(t, withMode(config.DropAll))
		post(t, s, []byte("data"), "Feed", testFeed).ok(t)
		post(t, s, []byte("data"), "Feed", "NO-SUCH-FEED").ok(t)
		post(t, s, zipOf(t, "1.dat", "x"), "Feed", testFeed, "Compression", "ZIP").ok(t)
		nothingStored(t, s)
	})
	t.Run("receive_all", func(t *testing.T) {
		t.Parallel()
		s := start(t, withMode(config.ReceiveAll))
		id := post(t, s, []byte("data"), "Feed", "NO-SUCH-FEED").ok(t)
		st := oneStream(t, s, "NO-SUCH-FEED", "Raw Events", id)
		wantParts(t, s, st, part{data: "data", meta: toAttrs(st.Attributes)})
		if _, err := s.App.Repo().GetFeed(t.Context(), "NO-SUCH-FEED"); err == nil {
			t.Errorf("RECEIVE_ALL created the feed")
		}
		// Still needs a feed name.
		post(t, s, []byte("data")).fails(t, 406, 100)
	})
	t.Run("120_default_type_not_a_meta_type", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("ODD-TYPE", "", "Weird Type")
		post(t, s, []byte("data"), "Feed", "ODD-TYPE").fails(t, 406, 120, "Unexpected data type", "Weird Type")
		nothingStored(t, s)
		// A Type header that is a meta type overrides the feed's default.
		id := post(t, s, []byte("data"), "Feed", "ODD-TYPE", "Type", "Events").ok(t)
		oneStream(t, s, "ODD-TYPE", "Events", id)
	})
	t.Run("feed_default_type", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("REF-FEED", "", "Raw Reference")
		id := post(t, s, []byte("data"), "Feed", "REF-FEED").ok(t)
		st := oneStream(t, s, "REF-FEED", "Raw Reference", id)
		if _, ok := st.Attributes.Get("Type"); ok {
			t.Errorf("a Type attribute was added: %q", st.Attributes.Value("Type"))
		}
	})
}

// TestDatafeedFeedNameGeneration: with generation on and no Feed header, the
// feed name comes from the template (section 7.2, case 48 examples).
func TestDatafeedFeedNameGeneration(t *testing.T) {
	t.Parallel()
	hdr := []string{"AccountId", "123", "Component", "Component XYZ", "Format", "XML"}
	gen := func(template string, mandatory ...string) func(*config.Config) {
		return func(c *config.Config) {
			c.Receive.FeedNameGenerationEnabled = true
			c.Receive.FeedNameTemplate = template
			c.Receive.FeedNameGenerationMandatoryHeaders = mandatory
		}
	}
	for _, tc := range []struct{ template, feed string }{
		{"${AccountId}-${compONENT}-${FORMAT}", "123-COMPONENT_XYZ-XML"},
		{"#foo!-${AccountId}-#bar!", "_FOO_-123-_BAR_"},
		{"${AccountId}-${unknown}-${FORMAT}", "123--XML"},
		{"foo bar", "FOO_BAR"},
	} {
		t.Run(tc.feed, func(t *testing.T) {
			t.Parallel()
			s := start(t, gen(tc.template, "AccountId", "Component", "Format"))
			// In FEED_STATUS mode the generated feed must exist.
			post(t, s, []byte("data"), hdr...).fails(t, 406, 110, tc.feed)
			s.CreateFeed(tc.feed, "", "")
			r := post(t, s, []byte("data"), hdr...)
			id := r.ok(t)
			st := streamByReceipt(t, s, id)
			checkStream(t, st, tc.feed, "Raw Events", id)
			want := firstHop(t, s, r, id, st.Attributes).with("Feed", tc.feed, "AccountId", "123",
				"Component", "Component XYZ", "Format", "XML", "StreamSize", "4")
			wantAttrs(t, "stream", st.Attributes, want)
			wantParts(t, s, st, part{data: "data", meta: want})
		})
	}
	t.Run("mandatory_header_missing", func(t *testing.T) {
		t.Parallel()
		s := start(t, gen("${AccountId}-${Component}-${Format}", "AccountId", "Component", "Format"))
		post(t, s, []byte("data"), "AccountId", "123", "Component", "C").
			fails(t, 406, 103, "A mandatory header is missing", "Mandatory header 'Format' must be provided")
		post(t, s, []byte("data"), "AccountId", "123", "Component", "C", "Format", " ").
			fails(t, 406, 103, "'Format'")
		// The default mandatory headers include Schema.
		s2 := start(t, func(c *config.Config) { c.Receive.FeedNameGenerationEnabled = true })
		post(t, s2, []byte("data"), hdr...).fails(t, 406, 103, "'Schema'")
		nothingStored(t, s)
		nothingStored(t, s2)
	})
	t.Run("supplied_feed_untouched", func(t *testing.T) {
		t.Parallel()
		s := start(t, gen("${AccountId}-${Component}-${Format}", "AccountId", "Component", "Format"))
		s.CreateFeed("MY_FEED", "", "")
		id := post(t, s, []byte("data"), "Feed", "MY_FEED").ok(t) // mandatory headers not needed
		oneStream(t, s, "MY_FEED", "Raw Events", id)
	})
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		post(t, s, []byte("data"), hdr...).fails(t, 406, 100)
		s.CreateFeed("MY_FEED", "", "")
		id := post(t, s, []byte("data"), append([]string{"Feed", "MY_FEED"}, hdr...)...).ok(t)
		oneStream(t, s, "MY_FEED", "Raw Events", id)
	})
	t.Run("auto_create", func(t *testing.T) {
		t.Parallel()
		s := start(t, func(c *config.Config) {
			gen("${AccountId}-${Component}-${Format}", "AccountId", "Component", "Format")(c)
			c.Receive.FeedNameGenerationAutoCreate = true
		})
		id := post(t, s, []byte("data"), hdr...).ok(t)
		oneStream(t, s, "123-COMPONENT_XYZ-XML", "Raw Events", id)
		f, err := s.App.Repo().GetFeed(t.Context(), "123-COMPONENT_XYZ-XML")
		if err != nil {
			t.Fatalf("generated feed not created: %v", err)
		}
		if f.Status != feed.Receive || f.StreamType != "Raw Events" {
			t.Errorf("created feed %+v", f)
		}
		// The second post finds it.
		id2 := post(t, s, []byte("more"), hdr...).ok(t)
		checkStream(t, streamByReceipt(t, s, id2), "123-COMPONENT_XYZ-XML", "Raw Events", id2)
		// A generated name that breaks the feed name pattern is not created.
		post(t, s, []byte("data"), "AccountId", "1", "Component", "", "Format", "X").fails(t, 406, 103, "'Component'")
		s3 := start(t, func(c *config.Config) {
			gen("${AccountId}", "AccountId")(c)
			c.Receive.FeedNameGenerationAutoCreate = true
		})
		post(t, s3, []byte("data"), "AccountId", "1").fails(t, 406, 101, "cannot be created")
		if _, err := s3.App.Repo().GetFeed(t.Context(), "1"); err == nil {
			t.Errorf("feed 1 created")
		}
		nothingStored(t, s3)
	})
}

// TestDatafeedHealthAndMetrics: /healthz, /readyz and the Prometheus metrics
// of receipts and group commits.
func TestDatafeedHealthAndMetrics(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	if r := send(t, s, http.MethodGet, "/healthz", nil); r.code != 200 {
		t.Errorf("/healthz %d %q", r.code, r.body)
	}
	if r := send(t, s, http.MethodGet, "/readyz", nil); r.code != 200 {
		t.Errorf("/readyz %d %q", r.code, r.body)
	}
	post(t, s, []byte("SOME TEST DATA"), "Feed", testFeed).ok(t)
	post(t, s, []byte("more"), "Feed", testFeed).ok(t)
	post(t, s, []byte("x"), "Feed", "NO-SUCH-FEED").fails(t, 406, 110)
	waitMetric(t, s, `weir_receive_requests_total{feed="TEST-FEED",outcome="received",status="0"}`, 2)
	// Unknown feeds share one label value, so senders cannot add series.
	waitMetric(t, s, `weir_receive_requests_total{feed="-",outcome="rejected",status="110"}`, 1)
	waitMetric(t, s, `weir_receive_bytes_total{feed="TEST-FEED"}`, 18)
	s.Sync() // the posts' rows may follow their answers
	if v := metric(t, s, "weir_store_commit_batch_size_count"); v < 1 {
		t.Errorf("weir_store_commit_batch_size_count %g", v)
	}
	if v := metric(t, s, "weir_store_rows_pending"); v != 0 {
		t.Errorf("weir_store_rows_pending %g once every row is in", v)
	}
	if v := metric(t, s, `weir_receive_duration_seconds_count{outcome="received"}`); v != 2 {
		t.Errorf("weir_receive_duration_seconds_count %g", v)
	}
}

// TestDatafeedReceiveLog: one JSON receive-log line per post, with the
// receipt id, feed, outcome, status, bytes and duration.
func TestDatafeedReceiveLog(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	s.CreateFeed("DROPPING", feed.Drop, "")
	ok := post(t, s, []byte("SOME TEST DATA"), "Feed", testFeed, "GUID", "log-ok").ok(t)
	post(t, s, []byte("x"), "Feed", "NO-SUCH-FEED", "GUID", "log-rejected").fails(t, 406, 110)
	drop := post(t, s, []byte("x"), "Feed", "DROPPING", "GUID", "log-dropped").ok(t)
	empty := post(t, s, nil, "Feed", testFeed, "GUID", "log-empty").ok(t)
	post(t, s, []byte("not gzip"), "Feed", testFeed, "Compression", "GZIP", "GUID", "log-error").fails(t, 500, 400)
	for _, tc := range []struct {
		guid, receipt, feed, outcome string
		status, bytes                float64
	}{
		{"log-ok", ok, testFeed, "received", 0, 14},
		{"log-rejected", "", "NO-SUCH-FEED", "rejected", 110, 0},
		{"log-dropped", drop, "DROPPING", "dropped", 0, 0},
		{"log-empty", empty, testFeed, "empty", 0, 0},
		{"log-error", "", testFeed, "error", 400, 8},
	} {
		l := receiveLog(t, s, "guid", tc.guid)
		if tc.receipt != "" && l.str("receiptId") != tc.receipt || !receiptRE.MatchString(l.str("receiptId")) {
			t.Errorf("%s: receiptId %q, want %q", tc.guid, l.str("receiptId"), tc.receipt)
		}
		if l.str("feed") != tc.feed || l.str("outcome") != tc.outcome || l.num("status") != tc.status || l.num("bytes") != tc.bytes {
			t.Errorf("%s: line %v; want feed %s outcome %s status %g bytes %g", tc.guid, l, tc.feed, tc.outcome, tc.status, tc.bytes)
		}
		if d, ok := l["durationMs"].(float64); !ok || d < 0 {
			t.Errorf("%s: durationMs %v", tc.guid, l["durationMs"])
		}
		if l.str("path") != "/datafeed" || l.str("time") == "" || l.str("level") == "" {
			t.Errorf("%s: line %v", tc.guid, l)
		}
	}
	if n := len(receiveLogs(t, s)); n != 5 {
		t.Errorf("%d receive log lines, want 5", n)
	}
	// A received post's line names its stream.
	st := streamByReceipt(t, s, ok)
	if l := receiveLog(t, s, "receiptId", ok); fmt.Sprint(l["streams"]) != fmt.Sprint([]any{float64(st.ID)}) {
		t.Errorf("streams %v, want [%d]", l["streams"], st.ID)
	}
}

// TestReceivedPathNamesTheDockerHost: in a container, ReceivedPath names
// the machine (DOCKER_HOST_HOSTNAME, else DOCKER_HOST_IP), as the reference
// system's does, not the container's random host name. Not parallel: it
// sets the environment of the whole process.
func TestReceivedPathNamesTheDockerHost(t *testing.T) {
	for _, c := range []struct{ hostname, ip, want string }{
		{"docker-host.example", "10.0.0.7", "docker-host.example"},
		{"", "10.0.0.7", "10.0.0.7"},
	} {
		t.Setenv("DOCKER_HOST_HOSTNAME", c.hostname)
		t.Setenv("DOCKER_HOST_IP", c.ip)
		s := start(t, nil)
		id := post(t, s, []byte("data"), "Feed", testFeed).ok(t)
		if got := streamByReceipt(t, s, id).Attributes.Value("ReceivedPath"); got != c.want {
			t.Errorf("DOCKER_HOST_HOSTNAME %q, DOCKER_HOST_IP %q: ReceivedPath %q, want %q", c.hostname, c.ip, got, c.want)
		}
		s.Stop()
	}
}
