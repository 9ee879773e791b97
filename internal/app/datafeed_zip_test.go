package app_test

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/feed"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/streamfile"
)

// unzip returns a zip's entries by name.
func unzip(t testing.TB, b []byte) map[string]string {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		c, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[f.Name] = string(c)
	}
	return out
}

// zipStreams returns every stream, asserting that all of them belong to the
// post with this receipt id.
func zipStreams(t testing.TB, s interface{ Streams() []meta.Stream }, receipt string, n int) []meta.Stream {
	t.Helper()
	st := s.Streams()
	if len(st) != n {
		t.Fatalf("want %d streams, got %d: %+v", n, len(st), st)
	}
	for _, x := range st {
		if x.ReceiptID != receipt || x.Attributes.Value("ReceiptId") != receipt {
			t.Errorf("stream %d: receipt %q ReceiptId %q, want %q", x.ID, x.ReceiptID, x.Attributes.Value("ReceiptId"), receipt)
		}
	}
	return st
}

// TestDatafeedZipSample posts the reference system's sample zip: four groups
// of data, context and meta become four parts of one stream; each part's meta
// is the request's attributes with the group's .meta on top (case 35: groups
// whose .meta carries no receipt information get the post's).
func TestDatafeedZipSample(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile(sampleZip)
	if err != nil {
		t.Fatal(err)
	}
	entries := unzip(t, body)
	s := start(t, nil)
	r := post(t, s, body, "Feed", testFeed, "Compression", "ZIP", "System", "SAMPLES")
	id := r.ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events", "System", "SAMPLES")
	var parts []part
	total := 0
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("DATA_SPLITTER-EVENTS~SOURCE~%d", i)
		data := entries[name+".dat"]
		if len(data) != 499 {
			t.Fatalf("%s.dat has %d bytes", name, len(data))
		}
		total += len(data)
		parts = append(parts, part{
			data: data,
			ctx:  ptr(entries[name+".ctx"]),
			meta: base.with("Generator", fmt.Sprintf("This comes from meta data %d", i), "StreamSize", itoa(len(data))),
		})
	}
	wantAttrs(t, "stream", st.Attributes, base.with("StreamSize", itoa(total)))
	wantParts(t, s, st, parts...)
	if l := receiveLog(t, s, "receiptId", id); l.num("bytes") != float64(len(body)) || l.num("storedBytes") != float64(total) {
		t.Errorf("log %v", l)
	}
	// Durable.
	s = s.Restart()
	wantParts(t, s, oneStream(t, s, testFeed, "Raw Events", id), parts...)
}

// TestDatafeedZipSingleEntry: a zip with one TEST.txt entry is one part (case 13).
func TestDatafeedZipSingleEntry(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	r := post(t, s, zipOf(t, "TEST.txt", "SOME TEST DATA"), "Feed", testFeed, "Compression", "zip")
	id := r.ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events", "StreamSize", "14")
	wantAttrs(t, "stream", st.Attributes, base)
	wantParts(t, s, st, part{data: "SOME TEST DATA", meta: base})
}

// TestDatafeedZipGrouping: entries are grouped by base name into parts, in the
// order each group first appears; .meta/.hdr/.header/.met are meta, .ctx and
// .context context, .mf/.manifest manifests (cases 23-29).
func TestDatafeedZipGrouping(t *testing.T) {
	t.Parallel()
	asc := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	desc := []int{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	entries := func(order []int, f func(i int) []string) []string {
		var out []string
		for _, i := range order {
			out = append(out, f(i)...)
		}
		return out
	}
	data := func(ext string) func(int) []string {
		return func(i int) []string { return []string{fmt.Sprintf("%d.%s", i, ext), fmt.Sprintf("data %d\n", i)} }
	}
	metaEntry := func(ext string) func(int) []string {
		return func(i int) []string { return []string{fmt.Sprintf("%d.%s", i, ext), fmt.Sprintf("META:VALUE%d\n", i)} }
	}
	both := func(first, second func(int) []string) func(int) []string {
		return func(i int) []string { return append(first(i), second(i)...) }
	}
	for _, tc := range []struct {
		name     string
		entries  []string
		order    []int // the parts' numbers, in stored order
		withMeta bool
	}{
		{"txt", entries(asc, data("txt")), asc, false},                                                                               // case 23
		{"dat", entries(asc, data("dat")), asc, false},                                                                               // case 24
		{"txt+meta_interleaved", entries(asc, both(data("txt"), metaEntry("meta"))), asc, true},                                      // case 25
		{"txt+hdr_interleaved", entries(asc, both(data("txt"), metaEntry("hdr"))), asc, true},                                        // case 26
		{"hdr_before_txt_descending", entries(desc, both(metaEntry("hdr"), data("txt"))), desc, true},                                // case 27
		{"all_hdr_then_all_txt_descending", append(entries(desc, metaEntry("hdr")), entries(desc, data("txt"))...), desc, true},      // case 28
		{"all_hdr_descending_then_txt_ascending", append(entries(desc, metaEntry("hdr")), entries(asc, data("txt"))...), desc, true}, // case 29
		{"header_and_met", append(entries(asc[:5], both(data("dat"), metaEntry("header"))), entries(asc[5:], both(metaEntry("met"), data("DAT")))...), asc, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, nil)
			r := send(t, s, http.MethodPost, "/datafeed?TEST=VALUE", bytes.NewReader(zipOf(t, tc.entries...)), "Feed", testFeed, "Compression", "ZIP")
			id := r.ok(t)
			st := oneStream(t, s, testFeed, "Raw Events", id)
			base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events", "TEST", "VALUE")
			var parts []part
			total := 0
			for _, i := range tc.order {
				d := fmt.Sprintf("data %d\n", i)
				total += len(d)
				m := base.with("StreamSize", itoa(len(d)))
				if tc.withMeta {
					m["META"] = fmt.Sprintf("VALUE%d", i)
				}
				parts = append(parts, part{data: d, meta: m})
			}
			wantAttrs(t, "stream", st.Attributes, base.with("StreamSize", itoa(total)))
			wantParts(t, s, st, parts...)
		})
	}
	t.Run("kinds", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		body := zipOf(t,
			"001.dat", "d1", "001.ctx", "c1", "001.meta", "K:1",
			"002.context", "c2", "002.hdr", "K:2", "002.dat", "d2",
			"003.header", "K:3", "003.txt", "d3",
			"004.MET", "K:4", "004.DAT", "d4", "004.CTX", "c4",
			// A manifest applies first, its group's meta wins.
			"005.mf", "K:manifest\nM:5", "005.meta", "K:5", "005.dat", "d5",
			"006.manifest", "M:6", "006.dat", "d6",
			"dir/", "",
			"dir/007.dat", "d7", "dir/007.meta", "K:7",
			// An unknown extension with no known sibling is a data entry named in full.
			"2023.11.15.10001", "d8",
			// A group with no data entry still is a part, with empty data.
			"009.meta", "K:9",
			// An empty meta entry adds nothing.
			"010.dat", "d10", "010.meta", "",
		)
		r := post(t, s, body, "Feed", testFeed, "Compression", "ZIP")
		id := r.ok(t)
		st := oneStream(t, s, testFeed, "Raw Events", id)
		base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events")
		m := func(d string, kv ...string) attrs { return base.with(append(kv, "StreamSize", itoa(len(d)))...) }
		wantParts(t, s, st,
			part{data: "d1", ctx: ptr("c1"), meta: m("d1", "K", "1")},
			part{data: "d2", ctx: ptr("c2"), meta: m("d2", "K", "2")},
			part{data: "d3", meta: m("d3", "K", "3")},
			part{data: "d4", ctx: ptr("c4"), meta: m("d4", "K", "4")},
			part{data: "d5", meta: m("d5", "K", "5", "M", "5")},
			part{data: "d6", meta: m("d6", "M", "6")},
			part{data: "d7", meta: m("d7", "K", "7")},
			part{data: "d8", meta: m("d8")},
			part{data: "", meta: m("", "K", "9")},
			part{data: "d10", meta: m("d10")},
		)
		wantAttrs(t, "stream", st.Attributes, base.with("StreamSize", itoa(len("d1d2d3d4d5d6d7d8d10"))))
	})
	// Some Windows tools separate directories with '\': such names group
	// as they are, as the reference system groups them (a dot in a
	// directory's name is not an extension), and a directory entry is
	// skipped; only a name that escapes the root is refused (TestDatafeedZipInvalid).
	t.Run("windows_separators", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		body := zipOf(t,
			`logs\`, "",
			`logs\001.meta`, "K:1", `logs\001.dat`, "d1",
			`logs\v1.2\events`, "d2", `logs\v1.2\events.meta`, "K:2",
		)
		r := post(t, s, body, "Feed", testFeed, "Compression", "ZIP")
		id := r.ok(t)
		st := oneStream(t, s, testFeed, "Raw Events", id)
		base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events")
		wantParts(t, s, st,
			part{data: "d1", meta: base.with("K", "1", "StreamSize", "2")},
			part{data: "d2", meta: base.with("K", "2", "StreamSize", "2")},
		)
	})
	// A meta entry written in a legacy code page (windows-1252, as Windows
	// tools still write text) is read as the reference system reads it, and
	// as weir takes such bytes in a header: each byte that is not UTF-8 is
	// U+FFFD; the rest of the entry holds.
	t.Run("meta_not_utf8", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		r := post(t, s, zipOf(t, "001.meta", "Feed:"+testFeed+"\r\nDescription:Donn\xe9es \xff\r\n", "001.dat", "caf\xe9"),
			"Compression", "ZIP")
		id := r.ok(t)
		st := oneStream(t, s, testFeed, "Raw Events", id)
		base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events")
		wantParts(t, s, st, part{data: "caf\xe9", meta: base.with("Description", "Donn\uFFFDes \uFFFD", "StreamSize", "4")})
	})
}

// TestDatafeedZipFeeds: a group's meta entry may name another feed (and type):
// its parts go to a stream on that feed, every stream of the post shares the
// receipt id, and every feed is checked (cases 17-19).
func TestDatafeedZipFeeds(t *testing.T) {
	t.Parallel()
	t.Run("meta_names_two_feeds", func(t *testing.T) { // case 18
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("FEED-A", "", "")
		s.CreateFeed("FEED-B", "", "Events")
		body := zipOf(t,
			"1.meta", "Feed:FEED-A", "1.dat", "a1",
			"2.meta", "Feed:FEED-B", "2.dat", "b2",
			"3.dat", "t3", // no meta: the header's feed
			"4.meta", "Feed:FEED-A\nX:4", "4.dat", "a4",
		)
		r := post(t, s, body, "Feed", testFeed, "Compression", "ZIP")
		id := r.ok(t)
		st := zipStreams(t, s, id, 3)
		base := firstHop(t, s, r, id, st[0].Attributes)
		a := base.with("Feed", "FEED-A", "Type", "Raw Events")
		b := base.with("Feed", "FEED-B", "Type", "Events")
		h := base.with("Feed", testFeed, "Type", "Raw Events")
		checkStream(t, st[0], "FEED-A", "Raw Events", id)
		wantAttrs(t, "FEED-A", st[0].Attributes, a.with("StreamSize", "4"))
		wantParts(t, s, st[0], part{data: "a1", meta: a.with("StreamSize", "2")}, part{data: "a4", meta: a.with("X", "4", "StreamSize", "2")})
		checkStream(t, st[1], "FEED-B", "Events", id)
		wantAttrs(t, "FEED-B", st[1].Attributes, b.with("StreamSize", "2"))
		wantParts(t, s, st[1], part{data: "b2", meta: b.with("StreamSize", "2")})
		checkStream(t, st[2], testFeed, "Raw Events", id)
		wantAttrs(t, testFeed, st[2].Attributes, h.with("StreamSize", "2"))
		wantParts(t, s, st[2], part{data: "t3", meta: h.with("StreamSize", "2")})
	})
	t.Run("two_groups_one_feed", func(t *testing.T) { // case 19
		t.Parallel()
		s := start(t, nil)
		id := post(t, s, zipOf(t, "1.meta", "Feed:"+testFeed, "1.dat", "one", "2.dat", "two"), "Feed", testFeed, "Compression", "ZIP").ok(t)
		st := oneStream(t, s, testFeed, "Raw Events", id)
		if st.Parts != 2 || string(s.Read(st.ID, 0, 1)) != "two" {
			t.Errorf("parts %d", st.Parts)
		}
	})
	t.Run("reference_feed", func(t *testing.T) { // case 17
		// Reference data is never aggregated: each group is a stream
		// (TestDatafeedZipReferenceGroups has the details).
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("REF-FEED", "", "Raw Reference")
		body := zipOf(t, "1.meta", "A:1", "1.ctx", "c1", "1.dat", "r1", "2.meta", "A:2", "2.ctx", "c2", "2.dat", "r2")
		id := post(t, s, body, "Feed", "REF-FEED", "Compression", "ZIP").ok(t)
		for i, st := range zipStreams(t, s, id, 2) {
			checkStream(t, st, "REF-FEED", "Raw Reference", id)
			if st.Parts != 1 || string(s.Read(st.ID, streamfile.Context, 0)) != fmt.Sprintf("c%d", i+1) {
				t.Errorf("stream %d: parts %d", i, st.Parts)
			}
		}
	})
	t.Run("meta_type", func(t *testing.T) {
		// A Type in a meta entry sends the group to a stream of that type.
		t.Parallel()
		s := start(t, nil)
		id := post(t, s, zipOf(t, "1.meta", "Type:Events", "1.dat", "e", "2.dat", "r"), "Feed", testFeed, "Compression", "ZIP").ok(t)
		st := zipStreams(t, s, id, 2)
		checkStream(t, st[0], testFeed, "Events", id)
		checkStream(t, st[1], testFeed, "Raw Events", id)
	})
	t.Run("meta_effective_time", func(t *testing.T) {
		// The first part's EffectiveTime (or periodStartTime) sets the stream's.
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("FEED-A", "", "")
		body := zipOf(t, "1.meta", "EffectiveTime:2024-03-01T14:34:56+02:00", "1.dat", "x",
			"2.meta", "Feed:FEED-A\nperiodStartTime:2020-05-06T07:08:09.010Z", "2.dat", "y")
		id := post(t, s, body, "Feed", testFeed, "Compression", "ZIP").ok(t)
		st := zipStreams(t, s, id, 2)
		if st[0].EffectiveMs != 1709296496000 || st[1].EffectiveMs != 1588748889010 {
			t.Errorf("effective %d %d", st[0].EffectiveMs, st[1].EffectiveMs)
		}
		if m := string(s.Read(st[0].ID, 2, 0)); !strings.HasPrefix(m, "EffectiveTime:2024-03-01T12:34:56.000Z\n") {
			t.Errorf("meta %q", m)
		}
	})
	t.Run("no_feed_header", func(t *testing.T) {
		// The feeds may be named only in the meta entries.
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("FEED-A", "", "")
		body := zipOf(t, "1.meta", "Feed:FEED-A", "1.dat", "a", "2.meta", "Feed:"+testFeed, "2.dat", "t")
		r := post(t, s, body, "Compression", "ZIP", "GUID", "nofeed")
		id := r.ok(t)
		st := zipStreams(t, s, id, 2)
		checkStream(t, st[0], "FEED-A", "Raw Events", id)
		checkStream(t, st[1], testFeed, "Raw Events", id)
		if got := string(s.Read(st[0].ID, 0, 0)) + string(s.Read(st[1].ID, 0, 0)); got != "at" {
			t.Errorf("data %q", got)
		}
		if l := receiveLog(t, s, "guid", "nofeed"); l.str("feed") != "FEED-A" {
			t.Errorf("log %v", l)
		}
		// A group that names no feed fails the post.
		s2 := start(t, nil)
		post(t, s2, zipOf(t, "1.meta", "Feed:"+testFeed, "1.dat", "a", "2.dat", "b"), "Compression", "ZIP").
			fails(t, 406, 100, "Feed must be specified", `"2"`)
		// The Type header is still checked before the body.
		post(t, s2, body, "Compression", "ZIP", "Type", "Bogus").fails(t, 406, 102)
		nothingStored(t, s2)
	})
	t.Run("rejected_group_rejects_post", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("REJECTING", feed.Reject, "")
		// The first group is written before the second is checked; all of
		// it must go.
		big := strings.Repeat("first group data\n", 50000)
		for _, tc := range []struct {
			name   string
			body   []byte
			hdr    []string
			status int
			msg    string
		}{
			{"rejecting_feed", zipOf(t, "1.dat", big, "2.meta", "Feed:REJECTING", "2.dat", "x"), []string{"Feed", testFeed}, 110, `part "2"`},
			{"unknown_feed", zipOf(t, "1.dat", big, "2.meta", "Feed:NO-SUCH-FEED", "2.dat", "x"), []string{"Feed", testFeed}, 110, "NO-SUCH-FEED"},
			{"bad_type", zipOf(t, "1.dat", big, "2.meta", "Type:Bogus", "2.dat", "x"), []string{"Feed", testFeed}, 102, "Bogus"},
			{"no_feed_header", zipOf(t, "1.meta", "Feed:"+testFeed, "1.dat", big, "2.meta", "Feed:REJECTING", "2.dat", "x"), nil, 110, "[Feed: REJECTING, "},
			// The refused part names no feed: neither does the message (not part 1's).
			{"no_feed_anywhere", zipOf(t, "1.meta", "Feed:"+testFeed, "1.dat", big, "2.dat", "x"), nil, 100, "Feed must be specified [Compression: ZIP] - "},
		} {
			post(t, s, tc.body, append([]string{"Compression", "ZIP"}, tc.hdr...)...).fails(t, 406, tc.status, tc.msg)
			nothingStored(t, s)
		}
	})
	t.Run("dropped_groups_skipped", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		s.CreateFeed("DROPPING", feed.Drop, "")
		r := post(t, s, zipOf(t, "1.dat", "one", "2.meta", "Feed:DROPPING", "2.dat", "two", "3.dat", "three"), "Feed", testFeed, "Compression", "ZIP")
		id := r.ok(t)
		st := oneStream(t, s, testFeed, "Raw Events", id)
		base := firstHop(t, s, r, id, st.Attributes).with("Feed", testFeed, "Type", "Raw Events")
		wantParts(t, s, st, part{data: "one", meta: base.with("StreamSize", "3")}, part{data: "three", meta: base.with("StreamSize", "5")})
		// Every group dropped: 200, nothing stored.
		s2 := start(t, nil)
		s2.CreateFeed("DROPPING", feed.Drop, "")
		id = post(t, s2, zipOf(t, "1.meta", "Feed:DROPPING", "1.dat", "x"), "Feed", testFeed, "Compression", "ZIP").ok(t)
		if l := receiveLog(t, s2, "receiptId", id); l.str("outcome") != "dropped" {
			t.Errorf("log %v", l)
		}
		nothingStored(t, s2)
	})
}

// TestDatafeedZipReferenceGroups: reference data is looked up by effective
// time, so a zip's groups of a reference type (the feed's default type or
// the Type header) become one stream each, each with its own effective
// time: its group's EffectiveTime, else the post's, else the receipt time
// (section 4.5, case 17). Every stream of the post has its receipt id. The
// same zip of another type is one stream of two parts (case 19).
func TestDatafeedZipReferenceGroups(t *testing.T) {
	t.Parallel()
	ms := func(v string) int64 {
		tm, err := time.Parse(time.RFC3339, v)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	const t1, t2 = "2024-03-01T12:00:00.000Z", "2024-04-01T06:30:00.000Z"
	body := zipOf(t, "1.meta", "EffectiveTime:"+t1+"\nA:1", "1.ctx", "c1", "1.dat", "ref one",
		"2.meta", "EffectiveTime:"+t2+"\nA:2", "2.dat", "ref two!")
	s := start(t, nil)
	s.CreateFeed("REF-DEFAULT", "", "Raw Reference")
	s.CreateFeed("EVENTS-FEED", "", "Raw Events")

	for _, c := range []struct {
		name string
		hdr  []string
	}{
		{"feed_default_type", []string{"Feed", "REF-DEFAULT"}},
		{"type_header", []string{"Feed", "EVENTS-FEED", "Type", "raw reference"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, s, body, append([]string{"Compression", "ZIP", "System", "REF"}, c.hdr...)...)
			id := r.ok(t)
			var st []meta.Stream
			for _, x := range s.Streams() {
				if x.ReceiptID == id {
					st = append(st, x)
				}
			}
			if len(st) != 2 {
				t.Fatalf("want 2 streams, got %d: %+v", len(st), st)
			}
			want := []struct {
				data, ctx, a string // ctx "": the group has none
				eff          int64
			}{{"ref one", "c1", "1", ms(t1)}, {"ref two!", "", "2", ms(t2)}}
			for i, w := range want {
				x := st[i]
				checkStream(t, x, c.hdr[1], "Raw Reference", id)
				if x.Parts != 1 || x.EffectiveMs != w.eff {
					t.Errorf("stream %d: parts %d effective %d, want 1 %d", i, x.Parts, x.EffectiveMs, w.eff)
				}
				if x.Attributes.Value("ReceiptId") != id || x.Attributes.Value("StreamSize") != itoa(len(w.data)) {
					t.Errorf("stream %d: attributes %v", i, toAttrs(x.Attributes))
				}
				if d := string(s.Read(x.ID, streamfile.Data, 0)); d != w.data {
					t.Errorf("stream %d: data %q", i, d)
				}
				if w.ctx != "" {
					if ctx := string(s.Read(x.ID, streamfile.Context, 0)); ctx != w.ctx {
						t.Errorf("stream %d: context %q", i, ctx)
					}
				}
				m := string(s.Read(x.ID, streamfile.Meta, 0))
				for _, line := range []string{"A:" + w.a + "\n", "Type:Raw Reference\n", "System:REF\n", "ReceiptId:" + id + "\n"} {
					if !strings.Contains(m, line) {
						t.Errorf("stream %d: meta %q lacks %q", i, m, line)
					}
				}
			}
		})
	}

	t.Run("effective_time_fallback", func(t *testing.T) {
		// A group without EffectiveTime takes the post's; with neither,
		// the receipt time.
		const post1 = "2023-01-02T03:04:05.006Z"
		groups := zipOf(t, "1.meta", "EffectiveTime:"+t1, "1.dat", "a", "2.dat", "b")
		id := post(t, s, groups, "Feed", "REF-DEFAULT", "Compression", "ZIP", "EffectiveTime", post1).ok(t)
		id2 := post(t, s, groups, "Feed", "REF-DEFAULT", "Compression", "ZIP").ok(t)
		var got, got2 []meta.Stream
		for _, x := range s.Streams() {
			switch x.ReceiptID {
			case id:
				got = append(got, x)
			case id2:
				got2 = append(got2, x)
			}
		}
		if len(got) != 2 || len(got2) != 2 {
			t.Fatalf("streams %d and %d, want 2 and 2", len(got), len(got2))
		}
		if got[0].EffectiveMs != ms(t1) || got[1].EffectiveMs != ms(post1) {
			t.Errorf("with the post's EffectiveTime: effective %d %d", got[0].EffectiveMs, got[1].EffectiveMs)
		}
		if got2[0].EffectiveMs != ms(t1) || got2[1].EffectiveMs != got2[1].CreateMs {
			t.Errorf("without: effective %d %d, create %d", got2[0].EffectiveMs, got2[1].EffectiveMs, got2[1].CreateMs)
		}
	})

	t.Run("events_feed", func(t *testing.T) {
		// Not reference data: one stream of two parts, whose effective
		// time is the first group's.
		id := post(t, s, body, "Feed", "EVENTS-FEED", "Compression", "ZIP").ok(t)
		var st []meta.Stream
		for _, x := range s.Streams() {
			if x.ReceiptID == id {
				st = append(st, x)
			}
		}
		if len(st) != 1 {
			t.Fatalf("want 1 stream, got %d: %+v", len(st), st)
		}
		checkStream(t, st[0], "EVENTS-FEED", "Raw Events", id)
		if st[0].Parts != 2 || st[0].EffectiveMs != ms(t1) || string(s.Read(st[0].ID, streamfile.Data, 1)) != "ref two!" {
			t.Errorf("parts %d effective %d", st[0].Parts, st[0].EffectiveMs)
		}
	})

	t.Run("mixed_types", func(t *testing.T) {
		// A meta entry's Type decides per group: the reference groups are
		// a stream each, the event groups parts of one stream.
		mixed := zipOf(t, "1.dat", "e1", "2.meta", "Type:Raw Reference", "2.dat", "r2",
			"3.dat", "e3", "4.meta", "Type:Raw Reference", "4.dat", "r4")
		id := post(t, s, mixed, "Feed", "EVENTS-FEED", "Compression", "ZIP").ok(t)
		var got []string
		for _, x := range s.Streams() {
			if x.ReceiptID != id {
				continue
			}
			d := x.Type + ":"
			for p := range x.Parts {
				d += string(s.Read(x.ID, streamfile.Data, p))
			}
			got = append(got, d)
		}
		if strings.Join(got, " ") != "Raw Events:e1e3 Raw Reference:r2 Raw Reference:r4" {
			t.Errorf("streams %q", got)
		}
	})
}

// TestDatafeedZipUpstreamMeta: a meta entry written by an upstream proxy
// carries Feed, Type and earlier receipt information: Feed and Type come from
// it, ReceiptId and ReceivedTime are this hop's, and every list reads
// old,new (case 36).
func TestDatafeedZipUpstreamMeta(t *testing.T) {
	t.Parallel()
	const (
		p1 = "0000000000001_0000_P_proxy-1"
		t1 = "2024-01-02T03:04:05.678Z"
	)
	s := start(t, nil)
	s.CreateFeed("OTHER-FEED", "", "")
	entry := strings.Join([]string{"Feed:OTHER-FEED", "Type:Events", "ReceiptId:" + p1, "ReceivedTime:" + t1,
		"ReceivedPath:proxyhost", "GUID:g-upstream", "Proxied:yes"}, "\n")
	r := post(t, s, zipOf(t, "0000000001.meta", entry, "0000000001.dat", "proxied data"), "Feed", testFeed, "Compression", "ZIP")
	id := r.ok(t)
	st := oneStream(t, s, "OTHER-FEED", "Events", id)
	now := st.Attributes.Value("ReceivedTime")
	// The stream's GUID is its part's, g-upstream (checked below), not
	// the random one firstHop looks for.
	a := st.Attributes.Clone()
	a.Put("GUID", "00000000-0000-4000-8000-000000000000")
	hop := firstHop(t, s, r, id, a)
	partMeta := hop.with(
		"Feed", "OTHER-FEED", "Type", "Events", "GUID", "g-upstream", "Proxied", "yes",
		"ReceiptIdPath", p1+","+id, "ReceivedTimeHistory", t1+","+now, "ReceivedPath", "proxyhost,"+hostName(t),
		"StreamSize", "12")
	// The stream's only part says it: so does the stream, whose attributes
	// finds search.
	wantAttrs(t, "stream", st.Attributes, partMeta)
	wantParts(t, s, st, part{data: "proxied data", meta: partMeta})
}

// TestDatafeedZipInvalid: a body declared ZIP that is not a valid zip is
// 500/400; a zip that breaks the Stroom zip format (names escaping the root,
// duplicate entries, bad meta) is 406/104; nothing is stored (cases 8, 9, 22, 30).
func TestDatafeedZipInvalid(t *testing.T) {
	t.Parallel()
	// A STORED entry whose bytes no longer match its CRC.
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "1.dat", Method: zip.Store})
	io.WriteString(w, "SOME TEST DATA THAT WILL BE CORRUPTED")
	zw.Close()
	corrupt := b.Bytes()
	i := bytes.Index(corrupt, []byte("CORRUPTED"))
	corrupt[i] = 'X'
	empty := zipOf(t)
	truncated := zipOf(t, "1.dat", strings.Repeat("data ", 1000))
	for _, tc := range []struct {
		name           string
		body           []byte
		http, status   int
		msg            string
		maxMetaEntries bool
	}{
		{"58_bytes_of_text", []byte(strings.Repeat("x", 58)), 500, 400, "not a valid zip", false}, // case 8
		{"SMALL_DATA", []byte("SMALL DATA"), 500, 400, "not a valid zip", false},                  // case 9
		{"half_an_empty_zip", empty[:len(empty)/2], 500, 400, "not a valid zip", false},           // case 22
		{"truncated", truncated[:len(truncated)-30], 500, 400, "Compressed stream invalid", false},
		{"corrupt_entry", corrupt, 500, 400, "checksum", false}, // case 30
		{"escaping_name", zipOf(t, "../x.dat", "x"), 406, 104, "escapes", false},
		{"escaping_name_inside", zipOf(t, "a/../../x.dat", "x"), 406, 104, "escapes", false},
		{"absolute_name", zipOf(t, "/etc/x.dat", "x"), 406, 104, "absolute", false},
		{"backslash_name", zipOf(t, `..\x.dat`, "x"), 406, 104, "Data format is invalid", false},
		{"name_ending_in_dot", zipOf(t, "x.", "x"), 406, 104, "Data format is invalid", false},
		{"comma_in_extension", zipOf(t, "x.d,at", "x"), 406, 104, "','", false},
		{"duplicate_entry", zipOf(t, "1.dat", "a", "1.dat", "b"), 406, 104, `"1.dat"`, false},
		{"two_meta_entries", zipOf(t, "1.dat", "a", "1.meta", "A:1", "1.hdr", "A:2"), 406, 104, "meta", false},
		{"binary_meta", zipOf(t, "1.dat", "a", "1.meta", "A:\x00"), 406, 104, "NUL", false},
		{"meta_too_large", zipOf(t, "1.dat", "a", "1.meta", "A:"+strings.Repeat("v", 2000)), 413, 410, "maxMetaEntrySize", true},
		// A directory entry is skipped, so one that holds bytes is
		// refused rather than its data lost. (Go's writer will not put
		// data in a name ending in '/': the name is patched in after.)
		{"directory_with_data", renamed(t, zipOf(t, "1.dat", "a", "dirZ", "hidden"), "dirZ", "dir/"), 406, 104, `"dir/" names a directory`, false},
		{"backslash_directory_with_data", zipOf(t, "1.dat", "a", `dir\`, "hidden"), 406, 104, "names a directory", false},
		{"name_only_slashes", renamed(t, zipOf(t, "1.dat", "a", "Z@", ""), "Z@", "//"), 406, 104, "absolute", false},
		{"name_only_backslash", zipOf(t, "1.dat", "a", `\`, ""), 406, 104, "absolute", false},
		// Only the last directory of two joined zips is read: the first
		// zip's entries would be lost.
		{"two_zips_joined", append(zipOf(t, "1.dat", "first"), zipOf(t, "2.dat", "second")...), 500, 400, "two zips joined", false},
		{"encrypted_entry", encrypted(t, zipOf(t, "1.dat", "x")), 500, 400, "encrypted", false},
		{"bytes_before_the_zip", append([]byte("JUNK"), zipOf(t, "1.dat", "x")...), 500, 400, "does not start with a zip entry", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, func(c *config.Config) {
				if tc.maxMetaEntries {
					c.Receive.MaxMetaEntrySize = 1 << 10
				}
			})
			post(t, s, tc.body, "Feed", testFeed, "Compression", "ZIP").fails(t, tc.http, tc.status, tc.msg)
			nothingStored(t, s)
		})
	}
}

// encrypted sets the encryption flag of every entry of a zip (in local
// headers and directory), as a zip made with a password has it.
func encrypted(t testing.TB, b []byte) []byte {
	t.Helper()
	b = bytes.Clone(b)
	n := 0
	for i := 0; i+8 <= len(b); i++ {
		switch string(b[i : i+4]) {
		case "PK\x03\x04":
			b[i+6] |= 1
			n++
		case "PK\x01\x02":
			b[i+8] |= 1
			n++
		}
	}
	if n == 0 {
		t.Fatal("no zip headers found")
	}
	return b
}

// renamed replaces an entry's name in a zip, in its local header and its
// directory entry, by another of the same length.
func renamed(t testing.TB, zip []byte, from, to string) []byte {
	t.Helper()
	if len(from) != len(to) || bytes.Count(zip, []byte(from)) != 2 {
		t.Fatalf("cannot rename %q to %q in this zip", from, to)
	}
	return bytes.ReplaceAll(zip, []byte(from), []byte(to))
}

// TestDatafeedZipEmpty: a zip without entries (or only directories) is 200
// with a receipt and nothing stored.
func TestDatafeedZipEmpty(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	for _, body := range [][]byte{zipOf(t), zipOf(t, "dir/", "", "dir/sub/", "")} {
		id := post(t, s, body, "Feed", testFeed, "Compression", "ZIP").ok(t)
		if l := receiveLog(t, s, "receiptId", id); l.str("outcome") != "empty" {
			t.Errorf("log %v", l)
		}
	}
	nothingStored(t, s)
}

// TestDatafeedZipCommonMeta: what the meta entries of every part of a
// stream say alike is the stream's own attribute too, over the headers, so
// that a find by it works; what only some parts say stays with them.
func TestDatafeedZipCommonMeta(t *testing.T) {
	t.Parallel()
	s := start(t, nil)
	admin := user(t, s, "zipadmin", []string{access.Administrator}, nil)
	body := zipOf(t,
		"001.meta", "System:WEB\nEnvironment:PROD\nHost-Name:a", "001.dat", "one",
		"002.meta", "System:WEB\nEnvironment:TEST", "002.dat", "two",
		"003.meta", "system:WEB\nEnvironment:PROD\nHost-Name:a", "003.dat", "three",
	)
	id := post(t, s, body, "Feed", testFeed, "Compression", "ZIP", "System", "HEADER", "Environment", "HDR-ENV").ok(t)
	st := oneStream(t, s, testFeed, "Raw Events", id)
	for name, want := range map[string]string{"System": "WEB", "Environment": "HDR-ENV", "Host-Name": "", "Feed": testFeed, "Type": "Raw Events"} {
		if got := st.Attributes.Value(name); got != want {
			t.Errorf("stream attribute %s = %q, want %q", name, got, want)
		}
	}
	if got := st.Attributes.Value("ReceiptIdPath"); got != id {
		t.Errorf("ReceiptIdPath %q, want this hop's %q only", got, id)
	}
	find := func(field, value string) []int64 {
		return sxFind(t, admin, `{"expression":`+sxTerm(field, "EQUALS", value)+`}`).ids()
	}
	if got := find("attribute:System", "WEB"); !slices.Equal(got, []int64{st.ID}) {
		t.Errorf("find System WEB: %v, want [%d]", got, st.ID)
	}
	if got := find("attribute:System", "HEADER"); len(got) != 0 {
		t.Errorf("find System HEADER: %v, want none (the parts' meta overrides it)", got)
	}
}
