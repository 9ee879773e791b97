package app_test

// Streams through the REST API: find with filter expressions, sorting and
// paging; a stream's parts and children; byte ranges of a large multi-block
// stream; text in the feed's encoding (and a byte-order mark's), hex, and
// data that is not text; bulk delete and restore. Helpers here are prefixed
// sx so that they cannot collide with other suites' helpers.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/unicode"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
)

type sxStream struct {
	ID          int64             `json:"id"`
	Feed        string            `json:"feed"`
	Type        string            `json:"type"`
	Status      string            `json:"status"`
	CreateTime  string            `json:"createTime"`
	Parts       int               `json:"parts"`
	Attributes  map[string]string `json:"attributes"`
	PartDetails []struct {
		Part        int    `json:"part"`
		DataSize    int64  `json:"dataSize"`
		ContextSize *int64 `json:"contextSize"`
		MetaSize    *int64 `json:"metaSize"`
	} `json:"partDetails"`
	Children []string `json:"children"`
}

type sxPage struct {
	Streams []sxStream `json:"streams"`
	Total   int64      `json:"total"`
	Exact   bool       `json:"exact"`
	Offset  int64      `json:"offset"`
	Limit   int        `json:"limit"`
}

func (p sxPage) ids() []int64 {
	out := []int64{}
	for _, s := range p.Streams {
		out = append(out, s.ID)
	}
	return out
}

type sxText struct {
	Text            string  `json:"text"`
	Mode            string  `json:"mode"`
	Charset         string  `json:"charset"`
	BOM             *string `json:"bom"`
	Offset          int64   `json:"offset"`
	Length          int64   `json:"length"`
	TotalBytes      int64   `json:"totalBytes"`
	TotalChars      *int64  `json:"totalChars"`
	TotalCharsExact bool    `json:"totalCharsExact"`
	NonText         *struct {
		Reason string `json:"reason"`
	} `json:"nonText"`
}

type sxProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Location string `json:"location"`
		Message  string `json:"message"`
	} `json:"errors"`
}

func sxTerm(field, cond, value string) string {
	return fmt.Sprintf(`{"type":"term","field":%q,"condition":%q,"value":%q}`, field, cond, value)
}

func sxOp(op string, kids ...string) string {
	return fmt.Sprintf(`{"type":"operator","op":%q,"children":[%s]}`, op, strings.Join(kids, ","))
}

// sxFind posts a find and returns the page.
func sxFind(t *testing.T, c apiClient, body string) sxPage {
	t.Helper()
	var p sxPage
	c.do("POST", "/streams/find", body).want(t, "find "+body, 200, &p)
	return p
}

// sxGet makes a GET with extra headers and returns the raw response.
func sxGet(t *testing.T, c apiClient, path string, hdr ...string) apiResp {
	t.Helper()
	req, err := http.NewRequest("GET", c.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return apiResp{resp.StatusCode, resp.Header, b}
}

// sxPost posts data to /datafeed and returns the stored stream's id.
func sxPost(t *testing.T, s *apptest.Server, body []byte, hdr ...string) int64 {
	t.Helper()
	return streamByReceipt(t, s, post(t, s, body, hdr...).ok(t)).ID
}

func sxProblemOf(t *testing.T, r apiResp, what string, status int) sxProblem {
	t.Helper()
	var p sxProblem
	r.want(t, what, status, &p)
	return p
}

func TestAPIStreamsFind(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	for _, f := range []string{"FEED-A", "FEED-B", "FEED-C"} {
		s.CreateFeed(f, "", "")
	}
	before := attr.FormatTime(time.Now().Add(-time.Second))
	ids := []int64{
		sxPost(t, s, []byte("a0"), "Feed", "FEED-A", "System", "alpha", "Count", "5"),
		sxPost(t, s, []byte("b1"), "Feed", "FEED-B", "SYSTEM", "beta", "Count", "40"),
		sxPost(t, s, []byte("a2"), "Feed", "FEED-A", "system", "alphabet", "Type", "Raw Reference"),
		sxPost(t, s, []byte("c3"), "Feed", "FEED-C", "Count", "-3"),
		sxPost(t, s, []byte("b4"), "Feed", "FEED-B", "Note", "x*y"),
		sxPost(t, s, []byte("a5"), "Feed", "FEED-A", "Count", "abc"),
	}
	mid := attr.FormatTime(time.Now().Add(time.Second))
	pick := func(is ...int) []int64 {
		out := []int64{}
		for _, i := range is {
			out = append(out, ids[i])
		}
		return out
	}
	admin := user(t, s, "sxadmin", []string{access.Administrator}, nil)
	alice := user(t, s, "alice", nil, map[string]access.Level{"FEED-A": access.View})
	bob := user(t, s, "bob", nil, map[string]access.Level{"FEED-B": access.View, "FEED-C": access.Use})

	expr := func(e string) string { return `{"expression":` + e + `}` }
	for _, tc := range []struct {
		body string
		want []int64
	}{
		{`{}`, pick(0, 1, 2, 3, 4, 5)},
		{expr(sxTerm("Feed", "EQUALS", "FEED-A")), pick(0, 2, 5)},
		{expr(sxTerm("Feed", "EQUALS", "*-B")), pick(1, 4)},
		{expr(sxTerm("Feed", "IN", "FEED-B,FEED-C")), pick(1, 3, 4)},
		{expr(sxTerm("Type", "EQUALS", "Raw Reference")), pick(2)},
		{expr(sxTerm("Status", "EQUALS", "Unlocked")), pick(0, 1, 2, 3, 4, 5)},
		{expr(sxTerm("Id", "BETWEEN", fmt.Sprintf("%d,%d", ids[1], ids[3]))), pick(1, 2, 3)},
		{expr(sxTerm("Id", "GREATER_THAN", fmt.Sprint(ids[4]))), pick(5)},
		{expr(sxTerm("Create Time", "BETWEEN", before+","+mid)), pick(0, 1, 2, 3, 4, 5)},
		{expr(sxTerm("Create Time", "LESS_THAN", before)), pick()},
		{expr(sxTerm("Raw Size", "EQUALS", "2")), pick(0, 1, 2, 3, 4, 5)},
		{expr(sxTerm("Parts", "GREATER_THAN", "1")), pick()},
		// Attributes: any case of the name; numbers, text.
		{expr(sxTerm("attribute:SYSTEM", "EQUALS", "alpha")), pick(0)},
		{expr(sxTerm("attribute:system", "STARTS_WITH", "alpha")), pick(0, 2)},
		{expr(sxTerm("attribute:System", "IS_NULL", "")), pick(3, 4, 5)},
		{expr(sxTerm("attribute:count", "GREATER_THAN", "4")), pick(0, 1)},
		{expr(sxTerm("attribute:count", "LESS_THAN", "0")), pick(3)},
		{expr(sxTerm("attribute:note", "EQUALS", "x*y")), pick(4)},
		{expr(sxTerm("attribute:feed", "EQUALS", "FEED-C")), pick(3)},
		{expr(sxOp("OR", sxTerm("attribute:count", "IS_NULL", ""), sxTerm("Feed", "EQUALS", "FEED-C"))), pick(2, 3, 4)},
		{expr(sxOp("NOT", sxTerm("Feed", "EQUALS", "FEED-A"))), pick(1, 3, 4)},
		{expr(sxOp("AND", sxTerm("Feed", "EQUALS", "FEED-A"), sxOp("NOT", sxTerm("attribute:system", "CONTAINS", "bet")))), pick(0, 5)},
		// Sorting
		{`{"sort":[{"field":"Id","desc":true}]}`, pick(5, 4, 3, 2, 1, 0)},
		{`{"sort":[{"field":"Create Time","desc":true}]}`, pick(5, 4, 3, 2, 1, 0)},
		{`{"sort":[{"field":"Feed"},{"field":"Create Time","desc":true}]}`, pick(5, 2, 0, 4, 1, 3)},
		{`{"sort":[{"field":"Type","desc":true}]}`, pick(2, 5, 4, 3, 1, 0)},
	} {
		p := sxFind(t, admin, tc.body)
		if !slices.Equal(p.ids(), tc.want) || p.Total != int64(len(tc.want)) || !p.Exact {
			t.Errorf("%s: %v total %d exact %v, want %v", tc.body, p.ids(), p.Total, p.Exact, tc.want)
		}
	}
	if p := sxFind(t, admin, expr(sxTerm("attribute:system", "EQUALS", "alpha"))); p.Streams[0].Attributes["System"] != "alpha" ||
		p.Streams[0].Feed != "FEED-A" || p.Streams[0].Status != "UNLOCKED" {
		t.Fatalf("stream object %+v", p.Streams[0])
	}

	// Narrowing: each user sees only the feeds it holds VIEW on (USE is
	// not enough), however the filter is written.
	for _, tc := range []struct {
		c    apiClient
		body string
		want []int64
	}{
		{alice, `{}`, pick(0, 2, 5)},
		{alice, expr(sxTerm("Feed", "EQUALS", "FEED-B")), pick()},
		{alice, expr(sxOp("OR", sxTerm("Feed", "EQUALS", "FEED-B"), sxTerm("attribute:system", "IS_NOT_NULL", ""))), pick(0, 2)},
		{bob, `{}`, pick(1, 4)},
		{bob, expr(sxTerm("Feed", "EQUALS", "FEED-C")), pick()},
	} {
		p := sxFind(t, tc.c, tc.body)
		if !slices.Equal(p.ids(), tc.want) || p.Total != int64(len(tc.want)) || !p.Exact {
			t.Errorf("narrowed %s: %v total %d exact %v, want %v", tc.body, p.ids(), p.Total, p.Exact, tc.want)
		}
	}

	// Paging: a page with more after it has a lower-bound total unless
	// counted; the last page's total is exact.
	p := sxFind(t, admin, `{"limit":2}`)
	if !slices.Equal(p.ids(), pick(0, 1)) || p.Exact || p.Total != 3 || p.Limit != 2 || p.Offset != 0 {
		t.Fatalf("page 1: %+v", p)
	}
	p = sxFind(t, admin, `{"limit":2,"count":true}`)
	if !slices.Equal(p.ids(), pick(0, 1)) || !p.Exact || p.Total != 6 {
		t.Fatalf("page 1 counted: %+v", p)
	}
	p = sxFind(t, admin, `{"limit":2,"offset":2}`)
	if !slices.Equal(p.ids(), pick(2, 3)) || p.Exact || p.Total != 5 {
		t.Fatalf("page 2: %+v", p)
	}
	p = sxFind(t, admin, `{"limit":2,"offset":4}`)
	if !slices.Equal(p.ids(), pick(4, 5)) || !p.Exact || p.Total != 6 {
		t.Fatalf("last page: %+v", p)
	}
	p = sxFind(t, admin, `{"limit":2,"offset":40}`)
	if len(p.Streams) != 0 || !p.Exact || p.Total != 6 {
		t.Fatalf("past the end: %+v", p)
	}
	p = sxFind(t, alice, `{"limit":2}`)
	if !slices.Equal(p.ids(), pick(0, 2)) || p.Exact {
		t.Fatalf("alice page 1: %+v", p)
	}
	p = sxFind(t, alice, `{"limit":2,"offset":2}`)
	if !slices.Equal(p.ids(), pick(5)) || !p.Exact || p.Total != 3 {
		t.Fatalf("alice last page: %+v", p)
	}

	// Invalid requests: 422 naming what is wrong and where.
	for _, tc := range []struct {
		body, location, msg string
	}{
		{expr(sxOp("AND", sxTerm("Feed", "EQUALS", "A"), sxTerm("Colour", "EQUALS", "red"))), "body.expression.children[1].field", "unknown field"},
		{expr(sxTerm("Feed", "GREATER_THAN", "A")), "body.expression.condition", "not a condition of field Feed"},
		{expr(sxTerm("Create Time", "GREATER_THAN", "last tuesday")), "body.expression.value", "dates like"},
		{expr(sxTerm("Id", "BETWEEN", "1")), "body.expression.value", "two values"},
		{expr(sxTerm("Status", "EQUALS", "Gone")), "body.expression.value", "Unlocked, Locked, Deleted"},
		{expr(sxTerm("Id", "LIKE", "1")), "body.expression.condition", ""},
		{`{"sort":[{"field":"Status"}]}`, "body.sort[0].field", ""},
		{`{"limit":5000}`, "body.limit", ""},
		{`{"offset":-1}`, "body.offset", ""},
	} {
		pr := sxProblemOf(t, admin.do("POST", "/streams/find", tc.body), tc.body, 422)
		found := false
		for _, e := range pr.Errors {
			found = found || e.Location == tc.location && strings.Contains(e.Message, tc.msg)
		}
		if !found {
			t.Errorf("%s: problem %+v lacks %s %q", tc.body, pr, tc.location, tc.msg)
		}
	}
	apiClient{t: t, url: s.URL + "/api"}.do("POST", "/streams/find", `{}`).want(t, "find without a key", 401, nil)
}

// sxVaried is n bytes of valid UTF-8 that compress unevenly: runs of
// repeated text (zstd blocks) between runs of random characters, some of
// them multi-byte, so blocks differ and characters straddle block ends.
func sxVaried(n int) []byte {
	rng := rand.New(rand.NewPCG(42, 7))
	alphabet := []rune("abcdefghijklmnopqrstuvwxyz ÄÖÜßéè€日本語𝄞\n0123456789<>/=\"")
	var b bytes.Buffer
	for b.Len() < n {
		if rng.IntN(3) == 0 {
			b.WriteString(strings.Repeat("<event id=\""+strconv.Itoa(b.Len())+"\">repeated text</event>\n", 1+rng.IntN(200)))
			continue
		}
		for range 1 + rng.IntN(20000) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
	}
	out := b.Bytes()
	for !utf8.Valid(out[:n]) {
		n-- // never cut a character
	}
	return out[:n]
}

func TestAPIStreamsRanges(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("BIG-FEED", "", "")
	admin := user(t, s, "sxadmin", []string{access.Administrator}, nil)
	data := sxVaried(3<<20 + 12345) // > 1 MiB: several 256 KiB blocks
	id := sxPost(t, s, data, "Feed", "BIG-FEED")
	path := fmt.Sprintf("/streams/%d", id)

	var st sxStream
	admin.do("GET", path, "").want(t, "get stream", 200, &st)
	if st.Parts != 1 || len(st.PartDetails) != 1 || st.PartDetails[0].DataSize != int64(len(data)) ||
		st.PartDetails[0].ContextSize != nil || st.PartDetails[0].MetaSize == nil || !slices.Equal(st.Children, []string{"Meta Data"}) {
		t.Fatalf("stream detail %+v", st)
	}

	r := sxGet(t, admin, path+"/data")
	if r.status != 200 || !bytes.Equal(r.body, data) || r.header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("whole: %d, %d bytes", r.status, len(r.body))
	}
	etag := r.header.Get("ETag")
	rng := rand.New(rand.NewPCG(1, 1))
	n := int64(len(data))
	ranges := [][2]int64{{0, 1}, {0, 256 << 10}, {256<<10 - 1, 2}, {n - 1, 1}, {n - 10, 0}, {1 << 20, 1 << 20}, {n, 0}}
	for range 20 {
		off := rng.Int64N(n)
		ranges = append(ranges, [2]int64{off, rng.Int64N(n - off + 1)})
	}
	for _, rg := range ranges {
		off, ln := rg[0], rg[1]
		end := n
		if ln > 0 {
			end = min(n, off+ln)
		}
		r := sxGet(t, admin, fmt.Sprintf("%s/data?offset=%d&length=%d", path, off, ln))
		if r.status != 200 || !bytes.Equal(r.body, data[off:end]) || r.header.Get("Content-Length") != strconv.FormatInt(end-off, 10) {
			t.Fatalf("offset %d length %d: %d, %d bytes, want %d", off, ln, r.status, len(r.body), end-off)
		}
		// The same range through the Range header.
		if end > off {
			r = sxGet(t, admin, path+"/data", "Range", fmt.Sprintf("bytes=%d-%d", off, end-1))
			if r.status != 206 || !bytes.Equal(r.body, data[off:end]) ||
				r.header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", off, end-1, n) {
				t.Fatalf("Range %d-%d: %d %q, %d bytes", off, end-1, r.status, r.header.Get("Content-Range"), len(r.body))
			}
		}
	}
	r = sxGet(t, admin, path+"/data", "Range", "bytes=-100")
	if r.status != 206 || !bytes.Equal(r.body, data[n-100:]) || r.header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", n-100, n-1, n) {
		t.Fatalf("suffix range: %d %q", r.status, r.header.Get("Content-Range"))
	}
	// A range within an offset/length selection is relative to it.
	r = sxGet(t, admin, path+"/data?offset=1000&length=500", "Range", "bytes=100-199")
	if r.status != 206 || !bytes.Equal(r.body, data[1100:1200]) || r.header.Get("Content-Range") != "bytes 100-199/500" {
		t.Fatalf("range in selection: %d %q", r.status, r.header.Get("Content-Range"))
	}
	r = sxGet(t, admin, path+"/data", "Range", "bytes=0-9", "If-Range", etag)
	if r.status != 206 || len(r.body) != 10 {
		t.Fatalf("If-Range matching: %d", r.status)
	}
	r = sxGet(t, admin, path+"/data", "Range", "bytes=0-9", "If-Range", `"something-else"`)
	if r.status != 200 || len(r.body) != len(data) {
		t.Fatalf("If-Range not matching: %d", r.status)
	}
	r = sxGet(t, admin, path+"/data", "Range", "bytes=0-1,5-6")
	if r.status != 200 || len(r.body) != len(data) {
		t.Fatalf("several ranges: %d", r.status)
	}
	r = sxGet(t, admin, path+"/data", "Range", fmt.Sprintf("bytes=%d-", n))
	sxProblemOf(t, r, "range past the end", 416)
	if r.header.Get("Content-Range") != fmt.Sprintf("bytes */%d", n) {
		t.Fatalf("416 Content-Range %q", r.header.Get("Content-Range"))
	}
	sxProblemOf(t, sxGet(t, admin, fmt.Sprintf("%s/data?offset=%d", path, n+1)), "offset past the end", 416)

	// Text at character offsets deep in the stream, across blocks.
	runes := []rune(string(data))
	for _, rg := range [][2]int64{{0, 100}, {int64(len(runes)) / 2, 70_000}, {int64(len(runes)) - 5, 100}} {
		var tx sxText
		admin.do("GET", fmt.Sprintf("%s/text?offset=%d&length=%d", path, rg[0], rg[1]), "").want(t, "text range", 200, &tx)
		end := min(int64(len(runes)), rg[0]+rg[1])
		if tx.Text != string(runes[rg[0]:end]) || tx.Length != end-rg[0] || tx.Offset != rg[0] || tx.NonText != nil ||
			tx.Charset != "UTF-8" || tx.TotalBytes != n {
			t.Fatalf("text %v: %d chars at %d, charset %s, nonText %v", rg, tx.Length, tx.Offset, tx.Charset, tx.NonText)
		}
		if tx.TotalCharsExact && *tx.TotalChars != int64(len(runes)) {
			t.Fatalf("text %v: total %d, want %d", rg, *tx.TotalChars, len(runes))
		}
	}
	var tx sxText
	admin.do("GET", fmt.Sprintf("%s/text?offset=%d", path, len(runes)-5), "").want(t, "text to the end", 200, &tx)
	if !tx.TotalCharsExact || *tx.TotalChars != int64(len(runes)) {
		t.Fatalf("total chars at the end: %v %v", *tx.TotalChars, tx.TotalCharsExact)
	}

	// A zip post: parts with and without Context, and ranges over all of them.
	zid := sxPost(t, s, zipOf(t, "001.dat", "first part", "001.ctx", "context one", "002.dat", "second part"),
		"Feed", "BIG-FEED", "Compression", "ZIP")
	zpath := fmt.Sprintf("/streams/%d", zid)
	admin.do("GET", zpath, "").want(t, "get zip stream", 200, &st)
	if st.Parts != 2 || len(st.PartDetails) != 2 || !slices.Equal(st.Children, []string{"Context", "Meta Data"}) ||
		st.PartDetails[0].DataSize != 10 || st.PartDetails[0].ContextSize == nil || *st.PartDetails[0].ContextSize != 11 ||
		st.PartDetails[1].DataSize != 11 || st.PartDetails[1].ContextSize != nil || st.PartDetails[1].MetaSize == nil {
		t.Fatalf("zip stream detail %+v", st)
	}
	for q, want := range map[string]string{
		"/data?offset=6&length=10":               "partsecond",
		"/data?part=2&offset=7":                  "part",
		"/data?child=Context&part=1&offset=8":    "one",
		"/data?child=Context":                    "context one",
		"/data?offset=21":                        "",
		"/data?part=1&offset=0&length=100000000": "first part",
	} {
		if r := sxGet(t, admin, zpath+q); r.status != 200 || string(r.body) != want {
			t.Errorf("%s: %d %q, want %q", q, r.status, r.body, want)
		}
	}
	sxProblemOf(t, sxGet(t, admin, zpath+"/data?part=3"), "part 3", 404)
	// A child a part does not have is 404, as in the text view, not an empty 200.
	sxProblemOf(t, sxGet(t, admin, zpath+"/data?child=Context&part=2"), "part 2 of stream", 404)
}

func TestAPIStreamsText(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	admin := user(t, s, "sxadmin", []string{access.Administrator}, nil)
	for _, f := range []string{
		`{"name":"LATIN-FEED","encoding":"ISO-8859-1","contextEncoding":"ISO-8859-1"}`,
		`{"name":"UTF16-FEED","encoding":"UTF-16LE"}`,
		`{"name":"PLAIN-FEED"}`,
	} {
		admin.do("POST", "/feeds", f).want(t, "create feed", 201, nil)
	}
	text := func(id int64, query string) sxText {
		t.Helper()
		var tx sxText
		admin.do("GET", fmt.Sprintf("/streams/%d/text%s", id, query), "").want(t, "text "+query, 200, &tx)
		return tx
	}

	// ISO-8859-1: every byte one character.
	const latinText = "café, naïve, ÿ and ½ £5\n"
	latin, _ := charmap.ISO8859_1.NewEncoder().String(latinText)
	lid := sxPost(t, s, []byte(latin), "Feed", "LATIN-FEED")
	tx := text(lid, "")
	if tx.Text != latinText || tx.Charset != "ISO-8859-1" || tx.BOM != nil || tx.NonText != nil ||
		tx.TotalBytes != int64(len(latin)) || *tx.TotalChars != int64(utf8.RuneCountInString(latinText)) || !tx.TotalCharsExact {
		t.Fatalf("latin-1: %+v", tx)
	}
	if tx = text(lid, "?offset=6&length=5"); tx.Text != "naïve" || tx.Offset != 6 || tx.Length != 5 {
		t.Fatalf("latin-1 range: %+v", tx)
	}

	// UTF-16LE with a byte-order mark: the mark is reported and skipped,
	// offsets count characters.
	const utf16Text = "<?xml version=\"1.0\"?>\n<note lang=\"日本語\">Grüße 𝄞</note>\n"
	enc, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().String(utf16Text)
	u16 := append([]byte{0xFF, 0xFE}, enc...)
	uid := sxPost(t, s, u16, "Feed", "UTF16-FEED")
	tx = text(uid, "")
	if tx.Text != utf16Text || tx.Charset != "UTF-16LE" || tx.BOM == nil || *tx.BOM != "UTF-16LE" || tx.NonText != nil ||
		*tx.TotalChars != int64(utf8.RuneCountInString(utf16Text)) || tx.TotalBytes != int64(len(u16)) {
		t.Fatalf("utf-16le: %+v", tx)
	}
	runes := []rune(utf16Text)
	if tx = text(uid, "?offset=33&length=8"); tx.Text != string(runes[33:41]) || tx.Length != 8 {
		t.Fatalf("utf-16le range: %q (%+v), want %q", tx.Text, tx, string(runes[33:41]))
	}
	// A byte-order mark overrides the feed's encoding.
	pid := sxPost(t, s, u16, "Feed", "PLAIN-FEED")
	if tx = text(pid, ""); tx.Text != utf16Text || tx.Charset != "UTF-16LE" {
		t.Fatalf("bom over UTF-8 feed: %+v", tx)
	}
	// Without the mark, UTF-16 read as UTF-8 is not text, and the reason
	// says what it looks like.
	nid := sxPost(t, s, []byte(enc), "Feed", "PLAIN-FEED")
	if tx = text(nid, ""); tx.NonText == nil || !strings.Contains(tx.NonText.Reason, "UTF-16LE text without a byte-order mark") || tx.Text != "" {
		t.Fatalf("utf-16 without bom: %+v", tx)
	}

	// Hex: bytes, the mark included, in hexdump -C lines.
	tx = text(uid, "?mode=hex&length=20")
	wantHex := "00000000  ff fe 3c 00 3f 00 78 00  6d 00 6c 00 20 00 76 00  |..<.?.x.m.l. .v.|\n" +
		"00000010  65 00 72 00                                       |e.r.|\n"
	if tx.Text != wantHex || tx.Mode != "hex" || tx.Offset != 0 || tx.Length != 20 || tx.TotalChars != nil {
		t.Fatalf("hex:\n%s%+v", tx.Text, tx)
	}
	if tx = text(uid, "?mode=hex&offset=16&length=4"); !strings.HasPrefix(tx.Text, "00000010  65 00 72 00 ") || tx.Offset != 16 {
		t.Fatalf("hex at 16: %q", tx.Text)
	}

	// Children: Context in the feed's context encoding, Meta Data in UTF-8.
	ctx, _ := charmap.ISO8859_1.NewEncoder().String("Zürich")
	zid := sxPost(t, s, zipOf(t, "001.dat", "data", "001.ctx", ctx), "Feed", "LATIN-FEED", "Compression", "ZIP")
	if tx = text(zid, "?child=Context"); tx.Text != "Zürich" || tx.Charset != "ISO-8859-1" {
		t.Fatalf("context: %+v", tx)
	}
	if tx = text(zid, "?child=Meta%20Data"); !strings.Contains(tx.Text, "Feed:LATIN-FEED\n") || tx.Charset != "UTF-8" {
		t.Fatalf("meta data: %+v", tx)
	}

	// gzip sent without a Compression header: stored as sent, flagged,
	// and explained rather than shown as garbage.
	gid := sxPost(t, s, gz(t, "<event>hello</event>\n"), "Feed", "PLAIN-FEED")
	tx = text(gid, "")
	if tx.NonText == nil || tx.Text != "" || tx.Length != 0 {
		t.Fatalf("gzip: %+v", tx)
	}
	for _, w := range []string{"cannot be displayed as text", "starts with gzip magic", "without a Compression header", "UndeclaredCompression: GZIP"} {
		if !strings.Contains(tx.NonText.Reason, w) {
			t.Errorf("gzip reason %q lacks %q", tx.NonText.Reason, w)
		}
	}
	if tx = text(gid, "?mode=hex&length=16"); !strings.HasPrefix(tx.Text, "00000000  1f 8b ") || tx.NonText == nil {
		t.Fatalf("gzip as hex: %+v", tx)
	}

	// Errors.
	sxProblemOf(t, admin.do("GET", fmt.Sprintf("/streams/%d/text?part=2", lid), ""), "part 2", 404)
	sxProblemOf(t, admin.do("GET", fmt.Sprintf("/streams/%d/text?child=Context", lid), ""), "no context", 404)
	sxProblemOf(t, admin.do("GET", fmt.Sprintf("/streams/%d/text?mode=hex&length=70000", lid), ""), "hex too long", 422)
	sxProblemOf(t, admin.do("GET", fmt.Sprintf("/streams/%d/text?mode=bytes", lid), ""), "bad mode", 422)
	admin.do("DELETE", fmt.Sprintf("/streams/%d", lid), "").want(t, "delete", 200, nil)
	pr := sxProblemOf(t, admin.do("GET", fmt.Sprintf("/streams/%d/text", lid), ""), "text of a deleted stream", 409)
	if !strings.Contains(pr.Detail, "restore it") {
		t.Fatalf("deleted: %+v", pr)
	}
	sxProblemOf(t, admin.do("GET", fmt.Sprintf("/streams/%d/data", lid), ""), "data of a deleted stream", 409)
	viewer := user(t, s, "viewer", nil, map[string]access.Level{"PLAIN-FEED": access.View})
	viewer.do("GET", fmt.Sprintf("/streams/%d/text", pid), "").want(t, "text without Data - View", 403, nil)
}

func TestAPIStreamsBulk(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	s.CreateFeed("FEED-B", "", "")
	var a, b []int64
	for i := range 3 {
		a = append(a, sxPost(t, s, []byte("a"), "Feed", "FEED-A", "Batch", strconv.Itoa(i)))
		b = append(b, sxPost(t, s, []byte("b"), "Feed", "FEED-B", "Batch", strconv.Itoa(i)))
	}
	admin := user(t, s, "sxadmin", []string{access.Administrator}, nil)
	alice := user(t, s, "alice", []string{access.DataDelete, access.DataView},
		map[string]access.Level{"FEED-A": access.Delete, "FEED-B": access.View})
	bob := user(t, s, "bob", nil, map[string]access.Level{"FEED-A": access.Delete})

	type result struct {
		Matched int64 `json:"matched"`
		Changed int64 `json:"changed"`
		DryRun  bool  `json:"dryRun"`
	}
	bulk := func(c apiClient, op, expr string, dry bool, matched, changed int64) {
		t.Helper()
		var r result
		c.do("POST", "/streams/"+op, fmt.Sprintf(`{"expression":%s,"dryRun":%v}`, expr, dry)).want(t, op, 200, &r)
		if r.Matched != matched || r.Changed != changed || r.DryRun != dry {
			t.Fatalf("%s %s dry %v: %+v, want matched %d changed %d", op, expr, dry, r, matched, changed)
		}
	}
	statusIs := func(status string) []int64 {
		t.Helper()
		return sxFind(t, admin, `{"expression":`+sxTerm("Status", "EQUALS", status)+`}`).ids()
	}
	rawEvents := sxTerm("Type", "EQUALS", "Raw Events")

	// A dry run counts, changing nothing; alice acts only where she holds DELETE.
	bulk(alice, "delete", rawEvents, true, 3, 3)
	if got := statusIs("Deleted"); len(got) != 0 {
		t.Fatalf("dry run deleted %v", got)
	}
	bulk(admin, "delete", rawEvents, true, 6, 6)
	bulk(alice, "delete", rawEvents, false, 3, 3)
	if got := statusIs("Deleted"); !slices.Equal(got, a) {
		t.Fatalf("deleted %v, want FEED-A's %v", got, a)
	}
	if got := statusIs("Unlocked"); !slices.Equal(got, b) {
		t.Fatalf("left %v, want FEED-B's %v", got, b)
	}
	bulk(alice, "delete", rawEvents, false, 3, 0) // already deleted
	sxProblemOf(t, alice.do("GET", fmt.Sprintf("/streams/%d/data", a[0]), ""), "read deleted", 409)

	// By attribute, across both feeds, as admin.
	bulk(admin, "delete", sxTerm("attribute:BATCH", "EQUALS", "1"), true, 2, 1)
	bulk(admin, "delete", sxTerm("attribute:BATCH", "EQUALS", "1"), false, 2, 1)
	if got := statusIs("Deleted"); !slices.Equal(got, []int64{a[0], a[1], b[1], a[2]}) {
		t.Fatalf("after attribute delete: %v", got)
	}

	// Restore: dry run, then for real, only alice's feeds.
	bulk(alice, "restore", sxTerm("Status", "EQUALS", "Deleted"), true, 3, 3)
	bulk(alice, "restore", sxTerm("Status", "EQUALS", "Deleted"), false, 3, 3)
	if got := statusIs("Deleted"); !slices.Equal(got, []int64{b[1]}) {
		t.Fatalf("after alice's restore: %v", got)
	}
	if r := alice.do("GET", fmt.Sprintf("/streams/%d/data", a[0]), ""); r.status != 200 || string(r.body) != "a" {
		t.Fatalf("restored data: %d %q", r.status, r.body)
	}
	bulk(admin, "restore", sxTerm("Feed", "EQUALS", "FEED-*"), false, 6, 1)
	if got := statusIs("Unlocked"); len(got) != 6 {
		t.Fatalf("after admin's restore: %v", got)
	}

	// Permission and validation.
	bob.do("POST", "/streams/delete", `{"expression":`+rawEvents+`}`).want(t, "bob without Data - Delete", 403, nil)
	for _, body := range []string{
		`{}`,
		`{"expression":{"type":"operator","op":"AND","children":[]}}`,
		`{"expression":{"type":"operator","children":[{"type":"term","enabled":false,"field":"Id","condition":"EQUALS","value":"1"}]}}`,
		`{"expression":` + sxTerm("Nope", "EQUALS", "x") + `}`,
	} {
		admin.do("POST", "/streams/delete", body).want(t, "bulk "+body, 422, nil)
	}
	if got := statusIs("Unlocked"); len(got) != 6 {
		t.Fatalf("a refused bulk changed something: %v", got)
	}
	var one sxStream
	admin.do("DELETE", fmt.Sprintf("/streams/%d", b[2]), "").want(t, "single delete", 200, &one)
	if one.Status != "DELETED" {
		t.Fatalf("single delete: %+v", one)
	}
	var decoded map[string]any
	if err := json.Unmarshal(admin.do("POST", "/streams/restore", `{"expression":`+sxTerm("Id", "EQUALS", fmt.Sprint(b[2]))+`}`).body, &decoded); err != nil ||
		decoded["changed"] != float64(1) {
		t.Fatalf("restore one: %v %v", decoded, err)
	}
}

// TestAPIStreamsTextTotal: totalChars estimates the whole part's
// characters whatever range was asked for (it was the characters up to the
// range's end over the bytes read ahead: 10 for ?length=10 on a small
// part), and a client that pages while offset < totalChars reads it all.
func TestAPIStreamsTextTotal(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("TOTAL-FEED", "", "")
	admin := user(t, s, "sxadmin", []string{access.Administrator}, nil)
	text := func(id int64, query string) sxText {
		t.Helper()
		var tx sxText
		admin.do("GET", fmt.Sprintf("/streams/%d/text%s", id, query), "").want(t, "text "+query, 200, &tx)
		return tx
	}
	rng := rand.New(rand.NewPCG(5, 6))
	pick := func(n int, alphabet string) string {
		a := []rune(alphabet)
		r := make([]rune, n)
		for i := range r {
			r[i] = a[rng.IntN(len(a))]
		}
		return string(r)
	}

	ascii := pick(2526, "abcdefgh <>/\n")
	aid := sxPost(t, s, []byte(ascii), "Feed", "TOTAL-FEED")
	for _, q := range []string{"?length=10", "?offset=2000&length=10", "?offset=2520&length=10", ""} {
		if tx := text(aid, q); tx.TotalChars == nil || *tx.TotalChars != 2526 {
			t.Errorf("ascii %s: totalChars %s (exact %v), want 2526", q, string(admJSONRaw(tx.TotalChars)), tx.TotalCharsExact)
		}
	}

	// Multi-byte UTF-8, larger than a read, so only an estimate is known.
	mixed := pick(300_000, "abc é€𝄞\n日本")
	chars := int64(utf8.RuneCountInString(mixed))
	mid := sxPost(t, s, []byte(mixed), "Feed", "TOTAL-FEED")
	for _, q := range []string{"?length=10", "?offset=2000&length=10"} {
		tx := text(mid, q)
		if tx.TotalCharsExact || tx.TotalChars == nil || float64(*tx.TotalChars) < 0.98*float64(chars) || float64(*tx.TotalChars) > 1.02*float64(chars) {
			t.Errorf("utf-8 %s: totalChars %s (exact %v), want about %d", q, string(admJSONRaw(tx.TotalChars)), tx.TotalCharsExact, chars)
		}
	}
	// Paging: ASCII first, then three bytes a character, so the early
	// estimates are low.
	skewed := pick(50_000, "abc\n") + pick(150_000, "日本語")
	sid := sxPost(t, s, []byte(skewed), "Feed", "TOTAL-FEED")
	var all strings.Builder
	var offset, total int64 = 0, 1
	for pages := 0; offset < total; pages++ {
		if pages > 100 {
			t.Fatalf("no end after %d pages", pages)
		}
		tx := text(sid, fmt.Sprintf("?offset=%d&length=9000", offset))
		all.WriteString(tx.Text)
		offset, total = offset+tx.Length, *tx.TotalChars
	}
	if all.String() != skewed {
		t.Fatalf("paging read %d characters, want %d", utf8.RuneCountInString(all.String()), utf8.RuneCountInString(skewed))
	}
}

// admJSONRaw is v as JSON, for messages (a pointer shows its value, or null).
func admJSONRaw(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// TestStreamsEpochEffectiveTime: an EffectiveTime of 0 (1970-01-01, which
// reference data valid since ever is often given) is a time like any
// other: shown, found by a time search, and not taken for none.
func TestStreamsEpochEffectiveTime(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	admin := user(t, s, "sxadmin", []string{access.Administrator}, nil)
	epoch := post(t, s, []byte("ref"), "Feed", testFeed, "Type", "Raw Reference", "EffectiveTime", "0").ok(t)
	later := post(t, s, []byte("ref"), "Feed", testFeed, "Type", "Raw Reference", "EffectiveTime", "1970-01-01T00:00:00.001Z").ok(t)
	ids := map[string]int64{}
	for name, receipt := range map[string]string{"epoch": epoch, "later": later} {
		ids[name] = streamByReceipt(t, s, receipt).ID
	}
	var st struct {
		EffectiveTime string `json:"effectiveTime"`
	}
	admin.do("GET", fmt.Sprintf("/streams/%d", ids["epoch"]), "").want(t, "get", 200, &st)
	if st.EffectiveTime != "1970-01-01T00:00:00.000Z" {
		t.Errorf("effectiveTime %q, want 1970-01-01T00:00:00.000Z", st.EffectiveTime)
	}
	expr := func(e string) string { return `{"expression":` + e + `}` }
	for _, tc := range []struct {
		body string
		want []int64
	}{
		{expr(sxTerm("Effective Time", "LESS_THAN", "2000-01-01T00:00:00.000Z")), []int64{ids["epoch"], ids["later"]}},
		{expr(sxTerm("Effective Time", "EQUALS", "1970-01-01T00:00:00.000Z")), []int64{ids["epoch"]}},
		{expr(sxTerm("Effective Time", "IS_NULL", "")), []int64{}},
		{expr(sxTerm("Effective Time", "IS_NOT_NULL", "")), []int64{ids["epoch"], ids["later"]}},
	} {
		if got := sxFind(t, admin, tc.body).ids(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.body, got, tc.want)
		}
	}
}
