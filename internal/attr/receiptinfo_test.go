package attr

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	t1 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	t2 = t1.Add(1500 * time.Millisecond)
)

const (
	t1s = "2024-03-01T12:00:00.000Z"
	t2s = "2024-03-01T12:00:01.500Z"
)

func mapOf(kv ...string) *Map {
	m := &Map{}
	for i := 0; i < len(kv); i += 2 {
		m.Put(kv[i], kv[i+1])
	}
	return m
}

func assertAttrs(t *testing.T, got *Map, want map[string]string) {
	t.Helper()
	gotMap := map[string]string{}
	for k, v := range got.All() {
		gotMap[k] = v
	}
	if !reflect.DeepEqual(gotMap, want) {
		t.Fatalf("attributes\n got  %q\n want %q", gotMap, want)
	}
}

// Test 32: a first hop (sender posted directly).
func TestAddReceiptInfoFirstHop(t *testing.T) {
	m := mapOf("Foo", "x", "Bar", "y", "name", "ferret", "colour", "purple",
		"GUID", "g", "RemoteAddress", "192.168.0.1", "RemoteHost", "192.168.0.1")
	AddReceiptInfo(m, Hop{ReceiptID: "id1", Time: t1, Host: "this-host"})
	assertAttrs(t, m, map[string]string{
		"Foo": "x", "Bar": "y", "name": "ferret", "colour": "purple",
		"GUID": "g", "RemoteAddress": "192.168.0.1", "RemoteHost": "192.168.0.1",
		"ReceiptId": "id1", "ReceiptIdPath": "id1",
		"ReceivedTime": t1s, "ReceivedTimeHistory": t1s,
		"ReceivedPath": "this-host",
	})
}

// Test 33: an upstream hop's full receipt info arrives in the headers.
func TestAddReceiptInfoSecondHop(t *testing.T) {
	m := mapOf("GUID", "g", "RemoteAddress", "1.2.3.4", "RemoteHost", "client",
		"ReceiptId", "id1", "ReceiptIdPath", "id1",
		"ReceivedTime", t1s, "ReceivedTimeHistory", t1s, "ReceivedPath", "host1")
	AddReceiptInfo(m, Hop{ReceiptID: "id2", Time: t2, Host: "this-host"})
	assertAttrs(t, m, map[string]string{
		"GUID": "g", "RemoteAddress": "1.2.3.4", "RemoteHost": "client",
		"ReceiptId": "id2", "ReceiptIdPath": "id1,id2",
		"ReceivedTime": t2s, "ReceivedTimeHistory": t1s + "," + t2s,
		"ReceivedPath": "host1,this-host",
	})
}

// Test 34 and section 5.3: the previous id and time without their lists
// still give id1,id2 and t1,t2; a raw (non-normal) previous time is normalised.
func TestAddReceiptInfoWithoutPriorLists(t *testing.T) {
	m := &Map{kvs: []KV{{"GUID", "g"}, {"ReceiptId", "id1"}, {"ReceivedTime", "2024-03-01T14:00:00+02:00"}}}
	AddReceiptInfo(m, Hop{ReceiptID: "id2", Time: t2, Host: "h"})
	assertAttrs(t, m, map[string]string{
		"GUID": "g", "ReceiptId": "id2", "ReceiptIdPath": "id1,id2",
		"ReceivedTime": t2s, "ReceivedTimeHistory": t1s + "," + t2s,
		"ReceivedPath": "h",
	})
}

func TestAddReceiptInfoHistoryHoldsRawPrevious(t *testing.T) {
	// The history already names the previous time in its raw form: not added again.
	raw := "2024-03-01T14:00:00+02:00"
	m := &Map{kvs: []KV{{"ReceivedTime", raw}, {"ReceivedTimeHistory", "t0," + raw}}}
	AddReceiptInfo(m, Hop{Time: t2})
	if got, want := m.Value("ReceivedTimeHistory"), "t0,"+raw+","+t2s; got != want {
		t.Fatalf("history = %q, want %q", got, want)
	}
	// Only the last element is compared for paths, so a path may revisit a host.
	m = mapOf("ReceivedPath", "a,b")
	AddReceiptInfo(m, Hop{Host: "a"})
	if got := m.Value("ReceivedPath"); got != "a,b,a" {
		t.Fatalf("ReceivedPath = %q", got)
	}
}

func TestAddReceiptInfoIsIdempotent(t *testing.T) {
	m := mapOf("ReceiptId", "id1", "ReceivedTime", t1s, "ReceivedPath", "host1")
	h := Hop{ReceiptID: "id2", Time: t2, Host: "h"}
	AddReceiptInfo(m, h)
	once := m.Sorted()
	AddReceiptInfo(m, h)
	if !reflect.DeepEqual(m.Sorted(), once) {
		t.Fatalf("second application changed %q into %q", once, m.Sorted())
	}
	// Empty hop fields change nothing.
	AddReceiptInfo(m, Hop{})
	if !reflect.DeepEqual(m.Sorted(), once) {
		t.Fatalf("empty hop changed %q into %q", once, m.Sorted())
	}
}

// Test 35: a zip group without .meta content gets the request attributes.
func TestMergeEntryEmpty(t *testing.T) {
	h := Hop{ReceiptID: "id2", Time: t2, Host: "this-host"}
	base := mapOf("Feed", "MY_FEED", "Type", "EVENTS")
	AddReceiptInfo(base, h)
	for _, entry := range []*Map{nil, {}} {
		got := MergeEntry(base, entry, h)
		if !reflect.DeepEqual(pairs(got), pairs(base)) {
			t.Fatalf("MergeEntry(base, %v) = %q, want base %q", entry, pairs(got), pairs(base))
		}
		if got == base {
			t.Fatal("MergeEntry must return a new map")
		}
	}
	assertAttrs(t, base, map[string]string{
		"Feed": "MY_FEED", "Type": "EVENTS",
		"ReceiptId": "id2", "ReceiptIdPath": "id2",
		"ReceivedTime": t2s, "ReceivedTimeHistory": t2s, "ReceivedPath": "this-host",
	})
}

// Test 36: the .meta (from an upstream proxy) names another feed and its own
// receipt info; Feed/Type come from the entry, this hop's id and time win and
// the lists read old,new.
func TestMergeEntryFromUpstream(t *testing.T) {
	h := Hop{ReceiptID: "id2", Time: t2, Host: "host2"}
	base := mapOf("Feed", "MY_FEED", "Type", "EVENTS")
	AddReceiptInfo(base, h)
	baseBefore := base.Sorted()

	full := mapOf("Feed", "OTHER_FEED", "Type", "RAW_EVENTS",
		"ReceiptId", "id1", "ReceiptIdPath", "id1",
		"ReceivedTime", t1s, "ReceivedTimeHistory", t1s, "ReceivedPath", "host1")
	// The same upstream entry without its lists must merge to the same result.
	bare := mapOf("Feed", "OTHER_FEED", "Type", "RAW_EVENTS",
		"ReceiptId", "id1", "ReceivedTime", t1s, "ReceivedPath", "host1")
	want := map[string]string{
		"Feed": "OTHER_FEED", "Type": "RAW_EVENTS",
		"ReceiptId": "id2", "ReceiptIdPath": "id1,id2",
		"ReceivedTime": t2s, "ReceivedTimeHistory": t1s + "," + t2s,
		"ReceivedPath": "host1,host2",
	}
	assertAttrs(t, MergeEntry(base, full, h), want)
	assertAttrs(t, MergeEntry(base, bare, h), want)
	if !reflect.DeepEqual(base.Sorted(), baseBefore) {
		t.Fatal("MergeEntry changed base")
	}
}

func TestMergeEntryOnlyFeedInMeta(t *testing.T) {
	// An entry that overrides ordinary attributes only keeps base's receipt info.
	h := Hop{ReceiptID: "id3", Time: t2, Host: "h3"}
	base := mapOf("Feed", "A", "ReceiptId", "id1", "ReceivedTime", t1s, "ReceivedPath", "h1")
	AddReceiptInfo(base, h)
	got := MergeEntry(base, mapOf("feed", "B", "Extra", "e"), h)
	assertAttrs(t, got, map[string]string{
		"feed": "B", "Extra": "e",
		"ReceiptId": "id3", "ReceiptIdPath": "id1,id3",
		"ReceivedTime": t2s, "ReceivedTimeHistory": t1s + "," + t2s,
		"ReceivedPath": "h1,h3",
	})
}

func TestAppendListItem(t *testing.T) {
	for _, tc := range []struct{ list, item, want string }{
		{"", "a", "a"},
		{"  ", "a", "a"},
		{"a", "a", "a"},
		{"a", "b", "a,b"},
		{"a,b", "a", "a,b,a"},
		{"a, b ", "b", "a, b "},
		{"a", "", "a"},
	} {
		if got := AppendListItem(tc.list, tc.item); got != tc.want {
			t.Errorf("AppendListItem(%q, %q) = %q, want %q", tc.list, tc.item, got, tc.want)
		}
	}
}

func TestEarlierReceiptIDs(t *testing.T) {
	long := strings.Repeat("x", 129)
	many := make([]string, MaxEarlierReceiptIDs+3)
	for i := range many {
		many[i] = "p" + strconv.Itoa(i)
	}
	cases := []struct {
		path, self string
		want       []string
	}{
		{"", "", nil},
		{"main", "main", nil}, // a post straight to this hop
		{"edge,proxy,main", "main", []string{"edge", "proxy"}}, // oldest first
		{" edge , ,edge,main", "main", []string{"edge"}},       // blanks and repeats
		{"a b,c\x00d,e\tf," + long + ",ok,main", "main", []string{"ok"}},
		{"edge,main,proxy", "main", []string{"edge", "proxy"}}, // wherever this hop's id is
		{strings.Join(many, ",") + ",main", "main", many[:MaxEarlierReceiptIDs]},
	}
	for _, c := range cases {
		m := &Map{}
		if c.path != "" {
			m.Put(KeyReceiptIDPath, c.path)
		}
		if c.self != "" {
			m.Put(KeyReceiptID, c.self)
		}
		if got := EarlierReceiptIDs(m); !slices.Equal(got, c.want) {
			t.Errorf("EarlierReceiptIDs(path %q, id %q) = %q, want %q", c.path, c.self, got, c.want)
		}
	}
}
