package app_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// operation is an operation resource as a client reads it.
type operation struct {
	ID         string            `json:"id"`
	Kind       string            `json:"kind"`
	State      string            `json:"state"`
	Owner      string            `json:"owner"`
	Done       int64             `json:"done"`
	Total      int64             `json:"total"`
	Result     json.RawMessage   `json:"result"`
	Error      string            `json:"error"`
	CreateTime string            `json:"createTime"`
	FinishTime string            `json:"finishTime"`
	Links      map[string]string `json:"links"`
}

type exportResult struct {
	FileSize int64     `json:"fileSize"`
	Streams  int       `json:"streams"`
	Parts    int       `json:"parts"`
	Skipped  int       `json:"skipped"`
	Download string    `json:"download"`
	Feeds    *[]string `json:"feeds"`
}

type importResult struct {
	Streams   []int64 `json:"streams"`
	Parts     int     `json:"parts"`
	Bytes     int64   `json:"bytes"`
	ReceiptID string  `json:"receiptId"`
}

var operationPath = regexp.MustCompile(`^/api/operations/[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// raw sends a request with a binary body (or none) and returns the answer.
func (c apiClient) raw(method, path string, body []byte, contentType string) apiResp {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return apiResp{resp.StatusCode, resp.Header, b}
}

// rawHeader sends a GET with one extra header.
func (c apiClient) rawHeader(method, path, name, value string) apiResp {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set(name, value)
	resp, err := client.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return apiResp{resp.StatusCode, resp.Header, b}
}

// accepted asserts a 202 with a Location of the operation it describes,
// and returns that path below /api.
func accepted(t *testing.T, r apiResp, what string) string {
	t.Helper()
	var op operation
	r.want(t, what, http.StatusAccepted, &op)
	loc := r.header.Get("Location")
	if !operationPath.MatchString(loc) || loc != "/api/operations/"+op.ID || op.Links["self"] != loc {
		t.Fatalf("%s: Location %q for operation %+v", what, loc, op)
	}
	// A fast worker may have finished it before the answer was written.
	if !slices.Contains([]string{"PENDING", "RUNNING", "SUCCEEDED", "FAILED"}, op.State) {
		t.Fatalf("%s: new operation is %s", what, op.State)
	}
	return strings.TrimPrefix(loc, "/api")
}

// poll reads the operation until it has finished.
func poll(t *testing.T, c apiClient, path string) operation {
	t.Helper()
	var op operation
	// Generous: an export of 192 MiB (TestAPIOperationsAcrossARestart) took
	// over 10 s under -race on a loaded CI machine. A bound on a hang only.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		op = operation{}
		c.do("GET", path, "").want(t, "poll operation", 200, &op)
		if op.FinishTime != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for operation %s to finish: %+v", path, op)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !dateRE.MatchString(op.CreateTime) || !dateRE.MatchString(op.FinishTime) {
		t.Errorf("operation times %q %q", op.CreateTime, op.FinishTime)
	}
	return op
}

// succeeded polls to the end, asserts SUCCEEDED and decodes the result.
func succeeded(t *testing.T, c apiClient, path string, result any) operation {
	t.Helper()
	op := poll(t, c, path)
	if op.State != "SUCCEEDED" || op.Error != "" {
		t.Fatalf("operation %s: %s %q", op.ID, op.State, op.Error)
	}
	if op.Total != op.Done {
		t.Errorf("operation %s finished at %d/%d", op.ID, op.Done, op.Total)
	}
	if err := json.Unmarshal(op.Result, result); err != nil {
		t.Fatalf("result %s: %v", op.Result, err)
	}
	return op
}

// storedPart is one part of a stored stream.
type storedPart struct {
	stream int64
	feed   string
	typ    string
	data   []byte
	ctx    []byte // nil: no context
	meta   *attr.Map
}

func storedParts(t *testing.T, s *apptest.Server, st meta.Stream) []storedPart {
	t.Helper()
	r, err := s.App.Store().Open(t.Context(), st.ID)
	if err != nil {
		t.Fatalf("open stream %d: %v", st.ID, err)
	}
	defer r.Close()
	var out []storedPart
	for i := range r.Parts() {
		p := storedPart{stream: st.ID, feed: st.Feed, typ: st.Type, data: s.Read(st.ID, streamfile.Data, i)}
		if r.Has(streamfile.Context, i) {
			p.ctx = s.Read(st.ID, streamfile.Context, i)
		}
		m, err := attr.ParseMeta(s.Read(st.ID, streamfile.Meta, i))
		if err != nil {
			t.Fatal(err)
		}
		p.meta = m
		out = append(out, p)
	}
	return out
}

// hopKeys are the attributes every receipt sets for itself.
var hopKeys = []string{"ReceiptId", "ReceiptIdPath", "ReceivedTime", "ReceivedTimeHistory", "ReceivedPath"}

// sameParts asserts that the new parts hold exactly the data and context
// of the originals, in the same feeds and types, with the same attributes
// apart from the new hop's receipt information, Type (which the export
// adds to parts whose attributes lacked it), added (attributes of the new
// request that parts without them take) and overridden (attributes the new
// hop sets on every part). Parts are matched by data, which is unique in
// these tests; receipt is the new hop's receipt id.
func sameParts(t *testing.T, orig, got []storedPart, receipt string, added, overridden attrs) {
	t.Helper()
	if len(orig) != len(got) {
		t.Fatalf("%d parts, want %d", len(got), len(orig))
	}
	byData := map[string]storedPart{}
	for _, p := range got {
		byData[string(p.data)] = p
	}
	for _, o := range orig {
		g, ok := byData[string(o.data)]
		if !ok {
			t.Errorf("part of stream %d (%s) missing", o.stream, trunc(o.data))
			continue
		}
		what := fmt.Sprintf("part of stream %d (now stream %d)", o.stream, g.stream)
		if g.feed != o.feed || g.typ != o.typ {
			t.Errorf("%s: %s/%s, want %s/%s", what, g.feed, g.typ, o.feed, o.typ)
		}
		if !bytes.Equal(g.ctx, o.ctx) || (g.ctx == nil) != (o.ctx == nil) {
			t.Errorf("%s: context %q, want %q", what, g.ctx, o.ctx)
		}
		want := toAttrs(o.meta).without(hopKeys...)
		if _, ok := want["Type"]; !ok {
			want["Type"] = o.typ
		}
		for k, v := range added {
			if _, ok := want[k]; !ok {
				want[k] = v
			}
		}
		for k, v := range overridden {
			want[k] = v
		}
		wantAttrs(t, what, withoutKeys(g.meta, hopKeys...), want)
		if p, want := g.meta.Value("ReceiptIdPath"), o.meta.Value("ReceiptIdPath")+","+receipt; p != want {
			t.Errorf("%s: ReceiptIdPath %q, want %q", what, p, want)
		}
		if g.meta.Value("ReceiptId") != receipt || !strings.HasPrefix(g.meta.Value("ReceivedTimeHistory"), o.meta.Value("ReceivedTimeHistory")+",") {
			t.Errorf("%s: hop %q %q", what, g.meta.Value("ReceiptId"), g.meta.Value("ReceivedTimeHistory"))
		}
	}
}

func withoutKeys(m *attr.Map, keys ...string) *attr.Map {
	out := m.Clone()
	for _, k := range keys {
		out.Delete(k)
	}
	return out
}

// zipEntries lists a zip's entry names and asserts every entry is DEFLATE.
func zipEntries(t *testing.T, b []byte) []string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("not a zip: %v", err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if f.Method != zip.Deflate {
			t.Errorf("entry %s has method %d, want DEFLATE", f.Name, f.Method)
		}
	}
	return names
}

func partsOfFeeds(t *testing.T, s *apptest.Server, feeds ...string) []storedPart {
	t.Helper()
	var out []storedPart
	for _, st := range s.Streams() {
		if slices.Contains(feeds, st.Feed) && st.Status == meta.Unlocked {
			out = append(out, storedParts(t, s, st)...)
		}
	}
	return out
}

// TestAPIExportRoundTrip exports a selection, downloads the zip and posts it
// back to /datafeed: the new streams hold the same data, context and
// attributes. The same zip imported through /api/imports gives the same,
// with the importer as the uploader.
func TestAPIExportRoundTrip(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	for _, f := range []string{"FEED-A", "FEED-B", "FEED-HIDDEN"} {
		s.CreateFeed(f, "", "")
	}
	// A plain post (no Type: the feed's default), a gzip post, a zip of
	// parts of two feeds and types with context and binary data, and data
	// the exporter may not see.
	post(t, s, []byte("alpha 1\nalpha 2\n"), "Feed", "FEED-A", "System", "SYS", "Environment", "PROD").ok(t)
	post(t, s, gz(t, "gzipped beta\n"), "Feed", "FEED-B", "Type", "Raw Reference", "Compression", "GZIP").ok(t)
	binary := make([]byte, 300<<10)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range binary {
		binary[i] = byte(rng.IntN(256))
	}
	post(t, s, zipOf(t,
		"x/001.meta", "Feed:FEED-A\nType:Events\nEffectiveTime:2024-01-02T03:04:05.000Z\nCustom:one\n",
		"x/001.dat", "event data 1\n",
		"x/001.ctx", "context 1\n",
		"x/002.meta", "Feed:FEED-B\nCustom:two\n",
		"x/002.dat", string(binary),
		"x/003.dat", "",
		"x/003.ctx", "context of an empty part\n",
	), "Feed", "FEED-A", "Type", "Events", "Compression", "ZIP", "GUID", "0b4e8f8e-1111-4222-8333-444455556666").ok(t)
	post(t, s, []byte("hidden\n"), "Feed", "FEED-HIDDEN").ok(t)
	orig := partsOfFeeds(t, s, "FEED-A", "FEED-B")
	if len(orig) != 5 {
		t.Fatalf("%d parts posted, want 5", len(orig))
	}
	nOrig := len(s.Streams())

	exporter := user(t, s, "exporter", []string{access.DataExport},
		map[string]access.Level{"FEED-A": access.View, "FEED-B": access.View})
	exportLoc := accepted(t, exporter.do("POST", "/exports", `{}`), "export")
	loc := exportLoc
	var res exportResult
	op := succeeded(t, exporter, loc, &res)
	if op.Kind != "export" || op.Owner != "exporter" || op.Total != 4 {
		t.Fatalf("export operation %+v", op)
	}
	if res.Streams != 4 || res.Parts != 5 || res.Skipped != 0 || res.Download != "/api"+loc+"/download" ||
		op.Links["download"] != res.Download {
		t.Fatalf("export result %+v links %v", res, op.Links)
	}
	dl := exporter.raw("GET", loc+"/download", nil, "")
	if dl.status != 200 || dl.header.Get("Content-Type") != "application/zip" || int64(len(dl.body)) != res.FileSize {
		t.Fatalf("download: %d %q %d bytes, want %d: %s", dl.status, dl.header.Get("Content-Type"), len(dl.body), res.FileSize, trunc(dl.body))
	}
	names := zipEntries(t, dl.body)
	want := []string{"0000000001.meta", "0000000001.dat"} // stream 1: one part, no context
	want = append(want, "0000000002.meta", "0000000002.dat")
	want = append(want, "0000000003.meta", "0000000003.ctx", "0000000003.dat", "0000000004.meta", "0000000004.ctx", "0000000004.dat")
	want = append(want, "0000000005.meta", "0000000005.dat")
	if !slices.Equal(names, want) {
		t.Fatalf("entries %v, want %v", names, want)
	}

	// Posted back to /datafeed: the same data, context and attributes.
	receipt := post(t, s, dl.body, "Compression", "ZIP").ok(t)
	var reposted []storedPart
	for _, st := range s.Streams()[nOrig:] {
		if st.ReceiptID != receipt {
			t.Fatalf("stream %d is not from the re-post", st.ID)
		}
		reposted = append(reposted, storedParts(t, s, st)...)
	}
	// The re-post is a first hop without a GUID header: parts that came
	// with one get the sender's address, as any such post's parts do.
	firstHopAddr := attrs{"RemoteAddress": "127.0.0.1", "RemoteHost": "127.0.0.1"}
	sameParts(t, orig, reposted, receipt, firstHopAddr, nil)

	// The same zip imported through the API.
	importer := user(t, s, "importer", []string{access.DataImport}, nil)
	loc = accepted(t, importer.raw("POST", "/imports", dl.body, "application/zip"), "import")
	var ir importResult
	op = succeeded(t, importer, loc, &ir)
	if op.Kind != "import" || op.Total != int64(len(dl.body)) || ir.Parts != 5 || len(ir.Streams) == 0 {
		t.Fatalf("import %+v result %+v", op, ir)
	}
	var imported []storedPart
	for _, id := range ir.Streams {
		st, err := s.App.Repo().GetStream(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.ReceiptID != ir.ReceiptID || st.Attributes.Value("UploadUsername") != "Importer" {
			t.Errorf("imported stream %d: receipt %q attributes %v", id, st.ReceiptID, toAttrs(st.Attributes))
		}
		imported = append(imported, storedParts(t, s, st)...)
	}
	sameParts(t, orig, imported, ir.ReceiptID, nil, attrs{"UploadUserId": "importer", "UploadUsername": "Importer"})
	if ir.Bytes != int64(len("alpha 1\nalpha 2\ngzipped beta\nevent data 1\n")+len(binary)) {
		t.Errorf("import bytes %d", ir.Bytes)
	}

	// One stream as a zip, at once: the same entries an export writes.
	var multi meta.Stream
	for _, st := range s.Streams() {
		if st.Parts == 2 && st.Feed == "FEED-A" {
			multi = st
			break
		}
	}
	one := exporter.raw("GET", fmt.Sprintf("/streams/%d/zip", multi.ID), nil, "")
	if one.status != 200 || one.header.Get("Content-Type") != "application/zip" {
		t.Fatalf("stream zip: %d %s", one.status, one.body)
	}
	if names := zipEntries(t, one.body); !slices.Equal(names, []string{"0000000001.meta", "0000000001.ctx", "0000000001.dat",
		"0000000002.meta", "0000000002.ctx", "0000000002.dat"}) {
		t.Fatalf("stream zip entries %v", names)
	}
	receipt = post(t, s, one.body, "Compression", "ZIP").ok(t)
	var again []storedPart
	for _, st := range s.Streams() {
		if st.ReceiptID == receipt {
			again = append(again, storedParts(t, s, st)...)
		}
	}
	sameParts(t, storedParts(t, s, multi), again, receipt, firstHopAddr, nil)

	// The finished export survives a restart: any node (here the next
	// server on the same data and database) reports it and serves its zip.
	s = s.Restart()
	exporter.url = s.URL + "/api"
	if op := poll(t, exporter, exportLoc); op.State != "SUCCEEDED" || op.Links["download"] != res.Download {
		t.Fatalf("export after restart: %+v", op)
	}
	if again := exporter.raw("GET", exportLoc+"/download", nil, ""); again.status != 200 || !bytes.Equal(again.body, dl.body) {
		t.Fatalf("download after restart: %d, %d bytes", again.status, len(again.body))
	}
	// Range requests work (large downloads can resume).
	part := exporter.rawHeader("GET", exportLoc+"/download", "Range", "bytes=10-19")
	if part.status != http.StatusPartialContent || !bytes.Equal(part.body, dl.body[10:20]) {
		t.Fatalf("range: %d %q", part.status, part.body)
	}
}

// TestAPIOperationsPermissions: exports and imports need their permission,
// an export is narrowed to the feeds its owner may view, and an operation
// is visible to its owner and Administrators only (404 for anyone else).
func TestAPIOperationsPermissions(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	for _, f := range []string{"FEED-A", "FEED-B"} {
		s.CreateFeed(f, "", "")
		post(t, s, []byte("data of "+f), "Feed", f).ok(t)
	}
	ids := map[string]int64{}
	for _, st := range s.Streams() {
		ids[st.Feed] = st.ID
	}
	exporter := user(t, s, "exporter", []string{access.DataExport}, map[string]access.Level{"FEED-A": access.View})
	viewer := user(t, s, "viewer", []string{access.DataView}, map[string]access.Level{"FEED-A": access.View, "FEED-B": access.View})
	other := user(t, s, "other", []string{access.DataExport, access.DataImport}, map[string]access.Level{"FEED-A": access.View})
	admin := user(t, s, "root", []string{access.Administrator}, nil)

	viewer.do("POST", "/exports", `{}`).want(t, "export without Data - Export", 403, nil)
	viewer.raw("POST", "/imports", zipOf(t, "1.dat", "x"), "application/zip").want(t, "import without Data - Import", 403, nil)
	viewer.raw("GET", fmt.Sprintf("/streams/%d/zip", ids["FEED-A"]), nil, "").want(t, "stream zip without Data - Export", 403, nil)
	exporter.raw("GET", fmt.Sprintf("/streams/%d/zip", ids["FEED-B"]), nil, "").want(t, "stream zip of an invisible feed", 403, nil)
	exporter.raw("GET", "/streams/999999/zip", nil, "").want(t, "stream zip of a missing stream", 404, nil)
	exporter.do("POST", "/exports", `{"status":"DELETED"}`).want(t, "export of deleted streams", 422, nil)

	// Named ids are narrowed too: what the owner may not view is skipped.
	loc := accepted(t, exporter.do("POST", "/exports", fmt.Sprintf(`{"ids":[%d,%d,999999]}`, ids["FEED-A"], ids["FEED-B"])), "export ids")
	var res exportResult
	op := succeeded(t, exporter, loc, &res)
	if res.Streams != 1 || res.Parts != 1 || res.Skipped != 2 {
		t.Fatalf("narrowed export %+v", res)
	}
	dl := exporter.raw("GET", loc+"/download", nil, "")
	if dl.status != 200 || !slices.Equal(zipEntries(t, dl.body), []string{"0000000001.meta", "0000000001.dat"}) {
		t.Fatalf("narrowed download %d", dl.status)
	}
	// A feed the owner may not view exports nothing (an empty zip).
	loc2 := accepted(t, exporter.do("POST", "/exports", `{"feed":"FEED-B"}`), "export of an invisible feed")
	succeeded(t, exporter, loc2, &res)
	if res.Streams != 0 || res.Parts != 0 {
		t.Fatalf("export of an invisible feed %+v", res)
	}
	if dl := exporter.raw("GET", loc2+"/download", nil, ""); dl.status != 200 || len(zipEntries(t, dl.body)) != 0 {
		t.Fatalf("empty download %d %d bytes", dl.status, len(dl.body))
	}

	// Another user cannot see, cancel or download it; an Administrator
	// sees and downloads it (an operation is its owner's and
	// administrators').
	other.do("GET", loc, "").want(t, "another user's operation", 404, nil)
	other.do("DELETE", loc, "").want(t, "cancel another user's operation", 404, nil)
	other.raw("GET", loc+"/download", nil, "").want(t, "download another user's export", 404, nil)
	other.do("GET", "/operations?owner=exporter", "").want(t, "list another user's operations", 403, nil)
	other.do("GET", "/operations/not-an-id", "").want(t, "missing operation", 404, nil)
	var got operation
	admin.do("GET", loc, "").want(t, "administrator reads", 200, &got)
	if got.ID != op.ID || got.Owner != "exporter" {
		t.Fatalf("administrator sees %+v", got)
	}
	if adl := admin.raw("GET", loc+"/download", nil, ""); adl.status != 200 || !bytes.Equal(adl.body, dl.body) {
		t.Fatalf("administrator downloads another's export: %d, %d bytes, want the owner's %d", adl.status, len(adl.body), len(dl.body))
	}
	// An owner who loses VIEW on a feed the zip holds may not download it
	// any more (the zip is a copy of that feed's data); an export of no
	// feed's streams stays theirs, and VIEW given back restores the first.
	if res.Feeds == nil || len(*res.Feeds) != 0 {
		t.Fatalf("an empty export lists feeds %v, want none", res.Feeds)
	}
	var first exportResult
	succeeded(t, exporter, loc, &first)
	if first.Feeds == nil || !slices.Equal(*first.Feeds, []string{"FEED-A"}) {
		t.Fatalf("export lists feeds %v, want FEED-A", first.Feeds)
	}
	if err := s.App.Access().SetFeedLevel(context.Background(), "exporter", "FEED-A", access.Use); err != nil {
		t.Fatal(err)
	}
	revoked := exporter.raw("GET", loc+"/download", nil, "")
	revoked.want(t, "download after VIEW on its feed was taken away", 403, nil)
	if bytes.Contains(revoked.body, []byte("FEED-A")) {
		t.Errorf("the 403 names the feed: %s", revoked.body)
	}
	exporter.raw("GET", loc2+"/download", nil, "").want(t, "download of an export of no feed's streams", 200, nil)
	admin.raw("GET", loc+"/download", nil, "").want(t, "administrator downloads it still", 200, nil)
	if err := s.App.Access().SetFeedLevel(context.Background(), "exporter", "FEED-A", access.View); err != nil {
		t.Fatal(err)
	}
	exporter.raw("GET", loc+"/download", nil, "").want(t, "download with VIEW given back", 200, nil)

	var list struct {
		Operations []operation `json:"operations"`
	}
	other.do("GET", "/operations", "").want(t, "other lists", 200, &list)
	if len(list.Operations) != 0 {
		t.Fatalf("other lists %+v", list.Operations)
	}
	exporter.do("GET", "/operations", "").want(t, "owner lists", 200, &list)
	if len(list.Operations) != 2 || list.Operations[0].ID != strings.TrimPrefix(loc2, "/operations/") || list.Operations[1].ID != op.ID {
		t.Fatalf("owner lists %+v", list.Operations)
	}
	admin.do("GET", "/operations?kind=export&state=SUCCEEDED", "").want(t, "administrator lists", 200, &list)
	if len(list.Operations) != 2 {
		t.Fatalf("administrator lists %+v", list.Operations)
	}

	// Deleting a finished operation removes it and its export file.
	exportFile := filepath.Join(s.Cfg.Data, "exports", op.ID+".zip")
	if _, err := os.Stat(exportFile); err != nil {
		t.Fatalf("export file: %v", err)
	}
	exporter.do("DELETE", loc, "").want(t, "remove a finished operation", 200, nil)
	exporter.do("GET", loc, "").want(t, "removed operation", 404, nil)
	exporter.raw("GET", loc+"/download", nil, "").want(t, "download of a removed export", 404, nil)
	if _, err := os.Stat(exportFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("export file left behind: %v", err)
	}
	exporter.do("GET", "/operations", "").want(t, "owner lists after removal", 200, &list)
	if len(list.Operations) != 1 {
		t.Fatalf("owner lists %+v", list.Operations)
	}

	// An import has no download.
	iloc := accepted(t, other.raw("POST", "/imports", zipOf(t, "1.meta", "Feed:FEED-A\n", "1.dat", "imported"), "application/zip"), "import")
	var ir importResult
	succeeded(t, other, iloc, &ir)
	if len(ir.Streams) != 1 || ir.Parts != 1 {
		t.Fatalf("import %+v", ir)
	}
	other.raw("GET", iloc+"/download", nil, "").want(t, "download of an import", 404, nil)
	if got := s.Read(ir.Streams[0], streamfile.Data, 0); string(got) != "imported" {
		t.Fatalf("imported data %q", got)
	}

	// A deleted stream's zip is 409, as its data and text are.
	gone := fmt.Sprintf("/streams/%d", ir.Streams[0])
	admin.do("DELETE", gone, "").want(t, "delete the imported stream", 200, nil)
	exporter.raw("GET", gone+"/zip", nil, "").want(t, "zip of a deleted stream", 409, nil)
}

// TestAPIImportFailures: a bad zip, or one a post would be refused for,
// fails its operation with the post's message; the body is bounded.
func TestAPIImportFailures(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) { c.Receive.MaxRequestSize = 64 << 10 })
	s.CreateFeed("FEED-A", "", "")
	imp := user(t, s, "importer", []string{access.DataImport}, nil)
	for _, tc := range []struct {
		what string
		body []byte
		want []string
	}{
		{"not a zip", []byte(strings.Repeat("this is not a zip file. ", 10)), []string{"Compressed stream invalid", "not a valid zip"}},
		{"unknown feed", zipOf(t, "1.meta", "Feed:NO-SUCH-FEED\n", "1.dat", "x"), []string{"Feed is not set to receive data", `feed "NO-SUCH-FEED" does not exist`}},
		{"no feed", zipOf(t, "1.dat", "x"), []string{"Feed must be specified", `part "1"`}},
		{"bad type", zipOf(t, "1.meta", "Feed:FEED-A\nType:Nonsense\n", "1.dat", "x"), []string{"Data type is invalid"}},
		{"escaping name", zipOf(t, "../1.dat", "x"), []string{"escapes the archive root"}},
		{"expands too far", zipOf(t, "1.meta", "Feed:FEED-A\n", "1.dat", strings.Repeat("z", 100<<10)), []string{"Maximum request size exceeded"}},
	} {
		loc := accepted(t, imp.raw("POST", "/imports", tc.body, "application/zip"), tc.what)
		op := poll(t, imp, loc)
		if op.State != "FAILED" {
			t.Errorf("%s: %s", tc.what, op.State)
		}
		for _, w := range tc.want {
			if !strings.Contains(op.Error, w) {
				t.Errorf("%s: error %q does not say %q", tc.what, op.Error, w)
			}
		}
	}
	if n := len(s.Streams()); n != 0 {
		t.Fatalf("%d streams stored by failed imports", n)
	}
	imp.raw("POST", "/imports", nil, "application/zip").want(t, "empty body", 400, nil)
	imp.raw("POST", "/imports", make([]byte, 65<<10), "application/zip").want(t, "too large", 413, nil)
	// Without a Content-Length the limit applies while the body is read.
	req, err := http.NewRequest("POST", imp.url+"/imports", io.MultiReader(bytes.NewReader(make([]byte, 65<<10))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+imp.key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || req.ContentLength != 0 {
		t.Fatalf("chunked too large: %d (content length %d)", resp.StatusCode, req.ContentLength)
	}
	// Nothing is left staged.
	entries, err := os.ReadDir(filepath.Join(s.Cfg.Data, "imports"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("staged files left: %v %v", entries, err)
	}
}

// TestAPIDownloadOfDamagedStream: a stream whose stored bytes were damaged
// on disk cannot be downloaded as if it were whole. The data download has
// a Content-Length and the zip download is chunked: both must end in an
// error the client sees (the connection cut short), never a 200 whose body
// reads to its end.
func TestAPIDownloadOfDamagedStream(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-DAMAGED", "", "")
	// Log lines that do not compress away: several blocks, all damaged below.
	var lines strings.Builder
	for i := range 40000 {
		fmt.Fprintf(&lines, "line %d value %x\n", i, uint64(i)*0x9E3779B97F4A7C15)
	}
	body := []byte(lines.String())
	post(t, s, body, "Feed", "FEED-DAMAGED").ok(t)
	st := s.Streams()[0]
	path := s.App.Store().Path(st)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Flip bytes all through the stream's stored bytes (its blocks carry
	// checksums), leaving the first and last 4 KiB: the header and the
	// index stay readable, so the download starts and fails in its body.
	size := st.FileSize
	if st.Pack == "" { // its own file
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		size = fi.Size()
	}
	if size < 16<<10 {
		t.Fatalf("stream %+v stored in %d bytes: too small to damage its middle", st, size)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, st.PackOffset); err != nil {
		t.Fatal(err)
	}
	for i := int64(4096); i < size-4096; i += 512 {
		buf[i] ^= 0xA5
	}
	if _, err := f.WriteAt(buf, st.PackOffset); err != nil {
		t.Fatal(err)
	}
	f.Close()

	viewer := user(t, s, "viewer", []string{access.DataView, access.DataExport}, map[string]access.Level{"FEED-DAMAGED": access.View})
	for _, path := range []string{fmt.Sprintf("/streams/%d/data", st.ID), fmt.Sprintf("/streams/%d/zip", st.ID)} {
		req, err := http.NewRequest("GET", viewer.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+viewer.key)
		resp, err := client.Do(req)
		if err != nil {
			continue // cut before an answer: a failure the client sees
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			t.Errorf("GET %s: 200 with %d bytes read to their end from a damaged stream", path, len(b))
		}
	}
	if !strings.Contains(s.Logs.String(), "ended early") {
		t.Errorf("no log line says a download ended early")
	}
}

// TestAPIOperationFilesLeftByACrash: a server killed (kill -9, a power
// cut) in the middle of an export or an upload leaves files under
// exports/ and imports/ that no run will ever remove: the partial zip of an
// export that was then cancelled or deleted before anything re-ran it,
// the staged zip of an import that has finished, an upload cut short
// before its operation was recorded, an export's zip whose operation was
// deleted just before the crash. The next start removes them, and keeps
// what is still wanted: a finished export's zip, a pending import's zip,
// an upload that may still be arriving (on a data directory shared with
// other nodes).
func TestAPIOperationFilesLeftByACrash(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	post(t, s, []byte("alpha\n"), "Feed", "FEED-A").ok(t)
	admin := user(t, s, "opsadmin", []string{access.Administrator}, nil)
	exportLoc := accepted(t, admin.do("POST", "/exports", `{}`), "export")
	succeeded(t, admin, exportLoc, &exportResult{})
	failedLoc := accepted(t, admin.raw("POST", "/imports", []byte("not a zip at all"), "application/zip"), "import")
	if op := poll(t, admin, failedLoc); op.State != "FAILED" {
		t.Fatalf("import of garbage: %+v", op)
	}
	exportID, failedID := filepath.Base(exportLoc), filepath.Base(failedLoc)
	s.Stop()

	exports, imports := filepath.Join(s.Cfg.Data, "exports"), filepath.Join(s.Cfg.Data, "imports")
	old := time.Now().Add(-2 * time.Hour)
	plant := func(path string, mtime time.Time) string {
		t.Helper()
		if err := os.WriteFile(path, []byte("left by a crash"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return path
	}
	gone := []string{
		plant(filepath.Join(exports, failedID+".zip.123.partial"), time.Now()), // its operation is final
		plant(filepath.Join(exports, "0d0e3c1a-1111-4222-8333-444455556666.zip.7.partial"), old),
		plant(filepath.Join(exports, "0d0e3c1a-1111-4222-8333-444455556666.zip"), old), // no such operation
		plant(filepath.Join(imports, failedID+".zip"), time.Now()),                     // its operation is final
		plant(filepath.Join(imports, "1d0e3c1a-1111-4222-8333-444455556666.zip.9.partial"), old),
		plant(filepath.Join(imports, "2d0e3c1a-1111-4222-8333-444455556666.zip"), old),
	}
	kept := []string{
		filepath.Join(exports, exportID+".zip"),
		plant(filepath.Join(imports, "3d0e3c1a-1111-4222-8333-444455556666.zip.9.partial"), time.Now()),
		plant(filepath.Join(imports, "4d0e3c1a-1111-4222-8333-444455556666.zip"), time.Now()),
	}

	s = s.Restart()
	for _, f := range gone {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after a restart: %v", filepath.Base(f), err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s removed: %v", filepath.Base(f), err)
		}
	}
	admin.url = s.URL + "/api"
	if dl := admin.raw("GET", exportLoc+"/download", nil, ""); dl.status != 200 {
		t.Fatalf("download after restart: %d %s", dl.status, dl.body)
	}
}

// TestAPIExportLeavesFreeSpace: exports share the data volume with the
// streams, so an export stops (FAILED, saying why, its partial zip
// removed) rather than take the free space below api.exportMinFreeSpace,
// and posts are received as before. Here the minimum is more than any
// disk has, as if the disk were nearly full.
func TestAPIExportLeavesFreeSpace(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) { c.API.ExportMinFreeSpace = 1 << 60 })
	s.CreateFeed("FEED-A", "", "")
	post(t, s, []byte("alpha\n"), "Feed", "FEED-A").ok(t)
	exporter := user(t, s, "exporter", []string{access.DataExport}, map[string]access.Level{"FEED-A": access.View})
	loc := accepted(t, exporter.do("POST", "/exports", `{}`), "export")
	op := poll(t, exporter, loc)
	if op.State != "FAILED" || !strings.Contains(op.Error, "the disk is nearly full") ||
		!strings.Contains(op.Error, "api.exportMinFreeSpace (1048576TiB)") {
		t.Fatalf("export on a nearly full disk: %+v", op)
	}
	exporter.raw("GET", loc+"/download", nil, "").want(t, "download of a failed export", 409, nil)
	if entries, err := os.ReadDir(filepath.Join(s.Cfg.Data, "exports")); err != nil || len(entries) != 0 {
		t.Fatalf("files left by the failed export: %v %v", entries, err)
	}
	post(t, s, []byte("beta\n"), "Feed", "FEED-A").ok(t)
}

// smallDataVolume mounts a tmpfs of size bytes as a fresh directory, for a
// server to fill; it skips the test where mounting is not allowed (not
// root). The mount is undone after the server stops.
func smallDataVolume(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a small volume to fill: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestAPIOperationsOnAFullDisk: on a data volume that fills up, an upload
// to /imports is answered as a post to /datafeed would be, 503 with
// Retry-After and the reason (not a 500 that says nothing), and leaves
// nothing staged; an export that fills the volume fails saying so and
// removes its partial zip, so the space is there again.
func TestAPIOperationsOnAFullDisk(t *testing.T) {
	t.Parallel()
	data := smallDataVolume(t, 48<<20)
	s := apptest.Start(t, func(c *config.Config) {
		c.Data = data
		c.API.ExportMinFreeSpace = 0
	})
	s.CreateFeed("FEED-A", "", "")
	admin := user(t, s, "opsadmin", []string{access.Administrator}, nil)

	big := make([]byte, 64<<20)
	r := admin.raw("POST", "/imports", big, "application/zip")
	if r.status != 503 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "disk") {
		t.Fatalf("import larger than the free space: %d %v %s", r.status, r.header, r.body)
	}
	if entries, err := os.ReadDir(filepath.Join(data, "imports")); err != nil || len(entries) != 0 {
		t.Fatalf("staged files left: %v %v", entries, err)
	}

	// Incompressible data, stored in several posts, exported in one zip
	// that does not fit next to them.
	rng := rand.New(rand.NewPCG(5, 6))
	chunk := make([]byte, 4<<20)
	for range 6 {
		for i := range chunk {
			chunk[i] = byte(rng.IntN(256))
		}
		post(t, s, chunk, "Feed", "FEED-A").ok(t)
	}
	loc := accepted(t, admin.do("POST", "/exports", `{}`), "export")
	op := poll(t, admin, loc)
	if op.State != "FAILED" || !strings.Contains(op.Error, "the disk is full") {
		t.Fatalf("export larger than the free space: %+v", op)
	}
	if entries, err := os.ReadDir(filepath.Join(data, "exports")); err != nil || len(entries) != 0 {
		t.Fatalf("files left by the failed export: %v %v", entries, err)
	}
	post(t, s, []byte("still received\n"), "Feed", "FEED-A").ok(t)
}

// TestAPIExportRetention: a finished export, its operation and its zip,
// is removed api.exportRetention after it finished, so that exports do not
// pile up on the data volume; a running export is not touched.
func TestAPIExportRetention(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) { c.API.ExportRetention = config.Duration(time.Second) })
	s.CreateFeed("FEED-A", "", "")
	post(t, s, []byte("alpha\n"), "Feed", "FEED-A").ok(t)
	exporter := user(t, s, "exporter", []string{access.DataExport}, map[string]access.Level{"FEED-A": access.View})
	loc := accepted(t, exporter.do("POST", "/exports", `{}`), "export")
	succeeded(t, exporter, loc, &exportResult{})
	exporter.raw("GET", loc+"/download", nil, "").want(t, "download at once", 200, nil)
	file := filepath.Join(s.Cfg.Data, "exports", filepath.Base(loc)+".zip")
	apptest.WaitFor(t, "the export to expire", func() bool {
		_, err := os.Stat(file)
		return errors.Is(err, os.ErrNotExist)
	})
	exporter.do("GET", loc, "").want(t, "expired export", 404, nil)
	exporter.raw("GET", loc+"/download", nil, "").want(t, "download of an expired export", 404, nil)
}

// TestAPIImportHostile: zips built to hurt, uploaded to /imports, fail
// their operation with the reason (as a post of them would be refused),
// store nothing and leave nothing staged; the server imports a good zip
// afterwards.
func TestAPIImportHostile(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) {
		c.Receive.MaxRequestSize = 32 << 20
		c.Receive.MaxZipEntries = 1000
	})
	s.CreateFeed("FEED-A", "", "")
	s.CreateFeed("FEED-R", "REJECT", "")
	imp := user(t, s, "importer", []string{access.DataImport}, nil)
	good := zipOf(t, "1.meta", "Feed:FEED-A\n", "1.dat", "good\n")
	noDirectory := good[:bytes.LastIndex(good, []byte("PK\x01\x02"))]
	noDirectory = noDirectory[:bytes.Index(good, []byte("PK\x01\x02"))]
	random := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range random {
		random[i] = byte(rng.IntN(256))
	}
	for _, tc := range []struct {
		what string
		body []byte
		want string
	}{
		{"a bomb: 100 entries of 1 MiB of zeros each", zipOfBombs(t, 100), ""},
		{"a bomb with a feed", append([]byte(nil), zipWithMetaAndBomb(t)...), "Maximum request size exceeded"},
		{"more entries than maxZipEntries", zipOfEntries(t, 3000), "more than receive.maxZipEntries"},
		{"truncated", good[:len(good)/2], "not a valid zip"},
		{"without a central directory", noDirectory, "not a valid zip"},
		{"random bytes", random, "not a valid zip"},
		{"an absolute name", zipOf(t, "/etc/1.meta", "Feed:FEED-A\n", "/etc/1.dat", "x"), "absolute names are not allowed"},
		{"a part for a REJECT feed", zipOf(t, "1.meta", "Feed:FEED-A\n", "1.dat", "x", "2.meta", "Feed:FEED-R\n", "2.dat", "y"), "Feed is not set to receive data"},
		{"a parent name", zipOf(t, "a/../../1.meta", "Feed:FEED-A\n", "a/../../1.dat", "x"), "escapes the archive root"},
	} {
		loc := accepted(t, imp.raw("POST", "/imports", tc.body, "application/zip"), tc.what)
		op := poll(t, imp, loc)
		if op.State != "FAILED" || !strings.Contains(op.Error, tc.want) {
			t.Errorf("%s: %s %q", tc.what, op.State, op.Error)
		}
		t.Logf("%s: %s", tc.what, op.Error)
	}
	if n := len(s.Streams()); n != 0 {
		t.Fatalf("%d streams stored by failed imports", n)
	}
	if entries, err := os.ReadDir(filepath.Join(s.Cfg.Data, "imports")); err != nil || len(entries) != 0 {
		t.Fatalf("staged files left: %v %v", entries, err)
	}
	succeeded(t, imp, accepted(t, imp.raw("POST", "/imports", good, "application/zip"), "good"), &importResult{})
}

// zipWithMetaAndBomb is a zip of one part of FEED-A whose data entry
// inflates from a few KiB to 64 MiB of zeros.
func zipWithMetaAndBomb(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.Create("1.meta")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(w, "Feed:FEED-A\n")
	seg := newDeflateZeros(64).bytes()
	w, err = zw.CreateRaw(&zip.FileHeader{Name: "1.dat", Method: zip.Deflate,
		CompressedSize64: uint64(len(seg)), UncompressedSize64: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(seg)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestAPIExportImportToAnotherServer: an export imported into another weir
// recreates every part byte for byte, context included, with the same
// attributes, also those that came as bytes that are not UTF-8 (Latin-1
// from an old sender, a zip's meta entry with raw bytes), which receipt
// reads as U+FFFD (README) and the round trip keeps as stored.
func TestAPIExportImportToAnotherServer(t *testing.T) {
	t.Parallel()
	a, b := apptest.Start(t, nil), apptest.Start(t, nil)
	for _, s := range []*apptest.Server{a, b} {
		s.CreateFeed("FEED-A", "", "")
		s.CreateFeed("FEED-B", "", "")
	}
	binary := make([]byte, 700<<10)
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range binary {
		binary[i] = byte(rng.IntN(256))
	}
	post(t, a, []byte("plain\n"), "Feed", "FEED-A", "Cafe", "cr\xe8me", "System", "\xff\xfe").ok(t)
	post(t, a, zipOf(t,
		"1.meta", "Feed:FEED-A\nLatin:\xe9t\xe9\n",
		"1.ctx", "ctx \x00\xff\n",
		"1.dat", string(binary),
		"2.meta", "Feed:FEED-B\nType:Raw Events\nRaw:\x80\x81\n",
		"2.dat", "second\xff\n",
		"3.meta", "Feed:FEED-A\n",
		"3.dat", "",
	), "Feed", "FEED-A", "Compression", "ZIP").ok(t)
	orig := partsOfFeeds(t, a, "FEED-A", "FEED-B")

	ea := user(t, a, "exporter", []string{access.DataExport}, map[string]access.Level{"FEED-A": access.View, "FEED-B": access.View})
	loc := accepted(t, ea.do("POST", "/exports", `{}`), "export")
	succeeded(t, ea, loc, &exportResult{})
	dl := ea.raw("GET", loc+"/download", nil, "")
	if dl.status != 200 {
		t.Fatalf("download: %d %s", dl.status, dl.body)
	}

	ib := user(t, b, "importer", []string{access.DataImport}, nil)
	var ir importResult
	succeeded(t, ib, accepted(t, ib.raw("POST", "/imports", dl.body, "application/zip"), "import"), &ir)
	got := partsOfFeeds(t, b, "FEED-A", "FEED-B")
	sameParts(t, orig, got, ir.ReceiptID, nil, attrs{"UploadUserId": "importer", "UploadUsername": "Importer"})
	for _, p := range got {
		if v := p.meta.Value("Cafe"); p.feed == "FEED-A" && string(p.data) == "plain\n" && v != "cr\ufffdme" {
			t.Errorf("Latin-1 attribute %q", v)
		}
	}
}

// TestAPIOperationsAcrossARestart: an export and an import that a graceful
// stop interrupts leave no partial file, show RUNNING until their lease
// lapses (30 s) and then run again from the start on the restarted
// server: the export's zip and the import's streams are then exactly
// what an uninterrupted run gives, the import's stored once.
func TestAPIOperationsAcrossARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for an operation lease to lapse")
	}
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	const streams = 48
	postIncompressible(t, s, "FEED-A", 11, streams)
	admin := user(t, s, "opsadmin", []string{access.Administrator}, nil)
	// A complete export first, to compare with and to import.
	var whole exportResult
	succeeded(t, admin, accepted(t, admin.do("POST", "/exports", `{}`), "export"), &whole)
	want := admin.raw("GET", whole.Download[len("/api"):], nil, "")
	if want.status != 200 {
		t.Fatalf("download: %d", want.status)
	}

	importLoc := accepted(t, admin.raw("POST", "/imports", want.body, "application/zip"), "import")
	exportLoc := accepted(t, admin.do("POST", "/exports", `{}`), "export")
	// Stopped at once: the workers have just claimed them, and writing
	// a zip of 192 MiB takes longer than that.
	before, beforeImport := poll1(t, admin, exportLoc), poll1(t, admin, importLoc)
	s.Stop()
	for _, dir := range []string{"exports", "imports"} {
		entries, _ := os.ReadDir(filepath.Join(s.Cfg.Data, dir))
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".partial") {
				t.Errorf("%s/%s left by the stop", dir, e.Name())
			}
		}
	}
	s = s.Restart()
	admin.url = s.URL + "/api"
	t.Logf("before the stop the export was %s, the import %s; after: %s, %s", before.State, beforeImport.State,
		poll1(t, admin, exportLoc).State, poll1(t, admin, importLoc).State)
	for _, loc := range []string{exportLoc, importLoc} {
		if op := poll1(t, admin, loc); op.FinishTime != "" && op.State != "SUCCEEDED" {
			t.Fatalf("after the restart: %+v", op)
		}
	}
	for deadline := time.Now().Add(5 * time.Minute); poll1(t, admin, exportLoc).FinishTime == "" ||
		poll1(t, admin, importLoc).FinishTime == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not finished after the restart: %+v %+v", poll1(t, admin, exportLoc), poll1(t, admin, importLoc))
		}
	}
	var res exportResult
	succeeded(t, admin, exportLoc, &res)
	if got := admin.raw("GET", exportLoc+"/download", nil, ""); got.status != 200 || len(got.body) != len(want.body) ||
		!slices.Equal(zipEntries(t, got.body), zipEntries(t, want.body)) {
		t.Fatalf("export after restart: %d, %d bytes, want %d", got.status, len(got.body), len(want.body))
	}
	var ir importResult
	succeeded(t, admin, importLoc, &ir)
	n := 0
	for _, st := range s.Streams() {
		if st.ReceiptID == ir.ReceiptID {
			n += st.Parts
		}
	}
	if n != streams || ir.Parts != streams {
		t.Fatalf("the import stored %d parts (result %d), want %d", n, ir.Parts, streams)
	}
}

// poll1 reads an operation once.
func poll1(t *testing.T, c apiClient, loc string) operation {
	t.Helper()
	var op operation
	c.do("GET", loc, "").want(t, "get operation", 200, &op)
	return op
}

// TestAPIManyOperationsAtOnce: many imports and exports submitted at once
// by several users all finish, each import's parts stored once, each
// export whole; nothing is left staged.
func TestAPIManyOperationsAtOnce(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	const each = 12
	users := []apiClient{
		user(t, s, "one", []string{access.DataImport, access.DataExport}, map[string]access.Level{"FEED-A": access.View}),
		user(t, s, "two", []string{access.DataImport, access.DataExport}, map[string]access.Level{"FEED-A": access.View}),
	}
	var wg sync.WaitGroup
	locs := make(chan [2]string, 2*len(users)*each)
	for ui, c := range users {
		for i := range each {
			wg.Go(func() {
				body := zipOf(t, "1.meta", "Feed:FEED-A\n", "1.dat", fmt.Sprintf("user %d import %d\n", ui, i))
				locs <- [2]string{c.key, accepted(t, c.raw("POST", "/imports", body, "application/zip"), "import")}
				locs <- [2]string{c.key, accepted(t, c.do("POST", "/exports", `{}`), "export")}
			})
		}
	}
	wg.Wait()
	close(locs)
	for l := range locs {
		c := users[0]
		if l[0] != c.key {
			c = users[1]
		}
		pollLong(t, "operation "+l[1], func() bool { return poll1(t, c, l[1]).FinishTime != "" })
		if op := poll1(t, c, l[1]); op.State != "SUCCEEDED" {
			t.Errorf("%s: %+v", l[1], op)
		}
	}
	if n := len(s.Streams()); n != 2*each {
		t.Fatalf("%d streams, want %d", n, 2*each)
	}
	if entries, err := os.ReadDir(filepath.Join(s.Cfg.Data, "imports")); err != nil || len(entries) != 0 {
		t.Fatalf("staged files left: %v %v", entries, err)
	}
}

// TestAPIOperationsPerUser: a user with api.maxOperationsPerUser exports
// and imports pending or running gets 429 with Retry-After for another
// (an upload is refused before it is staged); other users are not held
// up, and once the user's operations have finished they may submit again.
func TestAPIOperationsPerUser(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, func(c *config.Config) { c.API.MaxOperationsPerUser = 2 })
	s.CreateFeed("FEED-A", "", "")
	postIncompressible(t, s, "FEED-A", 13, 24)
	perms := []string{access.DataExport, access.DataImport}
	busy := user(t, s, "busy", perms, map[string]access.Level{"FEED-A": access.View})
	other := user(t, s, "other", perms, map[string]access.Level{"FEED-A": access.View})
	// Each export writes 96 MiB of data that does not compress: the
	// third request comes long before the first two have finished.
	first := accepted(t, busy.do("POST", "/exports", `{}`), "first export")
	second := accepted(t, busy.do("POST", "/exports", `{}`), "second export")
	r := busy.do("POST", "/exports", `{}`)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" ||
		!strings.Contains(string(r.body), "api.maxOperationsPerUser") {
		t.Fatalf("third export: %d %v %s", r.status, r.header, r.body)
	}
	busy.raw("POST", "/imports", zipOf(t, "1.meta", "Feed:FEED-A\n", "1.dat", "x"), "application/zip").want(t, "import over the bound", 429, nil)
	if entries, err := os.ReadDir(filepath.Join(s.Cfg.Data, "imports")); err != nil || len(entries) != 0 {
		t.Fatalf("staged files: %v %v", entries, err)
	}
	accepted(t, other.do("POST", "/exports", `{"ids":[1]}`), "another user's export")
	for _, loc := range []string{first, second} {
		pollLong(t, "export "+loc, func() bool { return poll1(t, busy, loc).FinishTime != "" })
	}
	succeeded(t, busy, accepted(t, busy.do("POST", "/exports", `{"ids":[1]}`), "export after the first finished"), &exportResult{})
}

// TestAPICancelRunning: an export and an import cancelled while they run
// end CANCELLED (not overwritten by an outcome), leave no partial or
// staged file, and the import stores all of its zip or none of it.
func TestAPICancelRunning(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	postIncompressible(t, s, "FEED-A", 15, 24)
	admin := user(t, s, "opsadmin", []string{access.Administrator}, nil)
	var whole exportResult
	succeeded(t, admin, accepted(t, admin.do("POST", "/exports", `{}`), "export"), &whole)
	zipBody := admin.raw("GET", whole.Download[len("/api"):], nil, "").body
	nBefore := len(s.Streams())

	exportLoc := accepted(t, admin.do("POST", "/exports", `{}`), "export")
	var op operation
	admin.do("DELETE", exportLoc, "").want(t, "cancel the export", 200, &op)
	importLoc := accepted(t, admin.raw("POST", "/imports", zipBody, "application/zip"), "import")
	admin.do("DELETE", importLoc, "").want(t, "cancel the import", 200, &op)
	time.Sleep(2 * time.Second) // heartbeats: an outcome recorded late would show by now
	for _, loc := range []string{exportLoc, importLoc} {
		if op := poll1(t, admin, loc); op.State != "CANCELLED" {
			t.Errorf("%s after cancel: %+v", loc, op)
		}
	}
	// Their files go as each notices its cancellation, between two streams
	// (4 MiB each), which can take a while on a loaded machine.
	kept := filepath.Base(whole.Download[:len(whole.Download)-len("/download")]) + ".zip"
	pollLong(t, "no partial export or staged import left", func() bool {
		imports, err := os.ReadDir(filepath.Join(s.Cfg.Data, "imports"))
		if err != nil || len(imports) != 0 {
			return false
		}
		exports, _ := os.ReadDir(filepath.Join(s.Cfg.Data, "exports"))
		for _, e := range exports {
			if e.Name() != kept {
				return false
			}
		}
		return true
	})
	if n := len(s.Streams()) - nBefore; n != 0 && n != 24 {
		t.Errorf("the cancelled import stored %d of 24 streams", n)
	}
}

// postIncompressible posts n streams of 4 MiB that do not compress to feed
// (each a different window of one random 1 MiB block from seed), so that
// an export of them takes long enough to be caught running.
func postIncompressible(t *testing.T, s *apptest.Server, feed string, seed uint64, n int) {
	t.Helper()
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range block {
		block[i] = byte(rng.IntN(256))
	}
	for i := range n {
		body, _ := io.ReadAll(&patternReader{block: block, n: 4 << 20, off: int64(i) * 4096})
		post(t, s, body, "Feed", feed).ok(t)
	}
}

// TestAPIImportDecidedWhenItRuns: an import queued behind other operations
// is decided when it runs, as a post is when it arrives: an owner disabled,
// or no longer holding Data - Import, since it was queued stores nothing.
func TestAPIImportDecidedWhenItRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("queues exports of 96 MiB ahead of the imports")
	}
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-A", "", "")
	postIncompressible(t, s, "FEED-A", 7, 24)
	admin := user(t, s, "opsadmin", []string{access.Administrator}, nil)
	carol := user(t, s, "carol", []string{access.DataImport}, map[string]access.Level{"FEED-A": access.View})
	dave := user(t, s, "dave", []string{access.DataImport}, map[string]access.Level{"FEED-A": access.View})
	body := zipOf(t, "001.meta", "Feed:FEED-A", "001.dat", "queued import")
	// Enough exports to keep every worker busy for seconds.
	var exports []string
	for range 6 {
		exports = append(exports, accepted(t, admin.do("POST", "/exports", `{}`), "export"))
	}
	carolLoc := accepted(t, carol.raw("POST", "/imports", body, "application/zip"), "import by carol")
	daveLoc := accepted(t, dave.raw("POST", "/imports", body, "application/zip"), "import by dave")
	ctx := context.Background()
	if err := s.App.Access().RevokeApp(ctx, "carol", access.DataImport); err != nil {
		t.Fatal(err)
	}
	if err := s.App.Access().SetEnabled(ctx, "dave", false); err != nil {
		t.Fatal(err)
	}
	for _, loc := range []string{carolLoc, daveLoc} {
		if op := poll1(t, admin, loc); op.State != "PENDING" {
			t.Fatalf("%s was %s before its owner lost the right to import: the test needs it queued", loc, op.State)
		}
	}
	for loc, want := range map[string]string{carolLoc: "no longer holds the application permission Data - Import", daveLoc: "disabled"} {
		op := poll(t, admin, loc)
		if op.State != "FAILED" || !strings.Contains(op.Error, want) {
			t.Errorf("%s: %s %q, want FAILED saying %q", loc, op.State, op.Error, want)
		}
	}
	for _, st := range s.Streams() {
		if st.Feed == "FEED-A" && st.Parts == 1 && st.RawSize == int64(len("queued import")) {
			t.Errorf("stream %d was imported by an owner who could no longer import", st.ID)
		}
	}
	for _, loc := range exports {
		poll(t, admin, loc)
	}
}
