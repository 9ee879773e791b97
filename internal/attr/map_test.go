package attr

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// pairs lists the map in insertion order, for compact assertions.
func pairs(m *Map) []KV {
	var out []KV
	for k, v := range m.All() {
		out = append(out, KV{k, v})
	}
	return out
}

func TestPutGet(t *testing.T) {
	type put struct{ k, v string }
	tests := []struct {
		name string
		puts []put
		want []KV // insertion order
	}{
		{"empty", nil, nil},
		{"one", []put{{"Feed", "A"}}, []KV{{"Feed", "A"}}},
		{"last writer's case and value win, position kept",
			[]put{{"feed", "A"}, {"Type", "T"}, {"FEED", "B"}},
			[]KV{{"FEED", "B"}, {"Type", "T"}}},
		{"key and value trimmed",
			[]put{{"  System \t", "  sys one \r\n"}},
			[]KV{{"System", "sys one"}}},
		{"trimmed keys collide",
			[]put{{"a", "1"}, {" A ", "2"}},
			[]KV{{"A", "2"}}},
		{"blank key ignored",
			[]put{{"", "x"}, {"   ", "y"}},
			nil},
		{"empty value kept",
			[]put{{"Empty", "   "}},
			[]KV{{"Empty", ""}}},
		{"only ASCII letters fold: the kelvin sign is not k",
			[]put{{"k", "1"}, {"\u212a", "2"}},
			[]KV{{"k", "1"}, {"\u212a", "2"}}},
		{"ASCII letters fold in a non-ASCII name",
			[]put{{"straße", "1"}, {"STRAßE", "2"}},
			[]KV{{"STRAßE", "2"}}},
		{"EffectiveTime normalised",
			[]put{{"EffectiveTime", "2024-03-01T14:34:56+02:00"}},
			[]KV{{"EffectiveTime", "2024-03-01T12:34:56.000Z"}}},
		{"receivedtime normalised in any case (weir differs from Stroom)",
			[]put{{"receivedtime", "1709296496789"}},
			[]KV{{"receivedtime", "2024-03-01T12:34:56.789Z"}}},
		{"unparseable date kept verbatim",
			[]put{{"EffectiveTime", "yesterday"}},
			[]KV{{"EffectiveTime", "yesterday"}}},
		{"other keys are not dates",
			[]put{{"PeriodStartTime", "1709296496789"}},
			[]KV{{"PeriodStartTime", "1709296496789"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Map
			for _, p := range tc.puts {
				m.Put(p.k, p.v)
			}
			if got := pairs(&m); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("All() = %q, want %q", got, tc.want)
			}
			if m.Len() != len(tc.want) {
				t.Fatalf("Len() = %d, want %d", m.Len(), len(tc.want))
			}
			for _, kv := range tc.want {
				for _, k := range []string{kv.Key, asciiUpper(kv.Key), FoldName(kv.Key), " " + kv.Key + " "} {
					if v, ok := m.Get(k); !ok || v != kv.Value {
						t.Errorf("Get(%q) = %q, %v; want %q, true", k, v, ok, kv.Value)
					}
				}
			}
		})
	}
}

func TestGetAbsent(t *testing.T) {
	var m Map
	m.Put("Feed", "A")
	if v, ok := m.Get("Fee"); ok || v != "" {
		t.Fatalf("Get(absent) = %q, %v", v, ok)
	}
	if v := m.Value("Type"); v != "" {
		t.Fatalf("Value(absent) = %q", v)
	}
	var nilMap *Map
	if _, ok := nilMap.Get("x"); ok || nilMap.Len() != 0 || nilMap.Sorted() != nil || len(pairs(nilMap)) != 0 {
		t.Fatal("nil *Map should read as empty")
	}
}

func TestDelete(t *testing.T) {
	var m Map
	for _, k := range []string{"a", "b", "c", "d"} {
		m.Put(k, k)
	}
	m.Delete(" B ")
	m.Delete("zzz")
	want := []KV{{"a", "a"}, {"c", "c"}, {"d", "d"}}
	if got := pairs(&m); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Delete: %q, want %q", got, want)
	}
	m.Put("b", "again")
	if got := pairs(&m); got[len(got)-1] != (KV{"b", "again"}) {
		t.Fatalf("re-added key should go last: %q", got)
	}
}

func TestAllStopsEarly(t *testing.T) {
	var m Map
	m.Put("a", "1")
	m.Put("b", "2")
	n := 0
	for range m.All() {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("iterated %d times after break", n)
	}
}

func TestSorted(t *testing.T) {
	var m Map
	for _, k := range []string{"b", "Type", "A", "_x", "feed", "C", "aa"} {
		m.Put(k, "v"+k)
	}
	var keys []string
	for _, kv := range m.Sorted() {
		keys = append(keys, kv.Key)
	}
	// Case-insensitive, '_' before letters as in Java's compareToIgnoreCase.
	want := []string{"_x", "A", "aa", "b", "C", "feed", "Type"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("Sorted keys = %q, want %q", keys, want)
	}
	// Sorted is a copy; insertion order is untouched.
	if first := pairs(&m)[0].Key; first != "b" {
		t.Fatalf("Sorted changed the map's order: first key %q", first)
	}
}

func TestCompareFoldTies(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"abc", "ABC", 0},
		{"abc", "abd", -1},
		{"ab", "abc", -1},
		{"Z", "a", 1},
		{"é", "É", 0},
		{"", "", 0},
	} {
		if got := compareFold(tc.a, tc.b); got != tc.want {
			t.Errorf("compareFold(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCloneIsIndependent(t *testing.T) {
	var m Map
	m.Put("a", "1")
	c := m.Clone()
	c.Put("a", "2")
	c.Put("b", "3")
	if m.Value("a") != "1" || m.Len() != 1 {
		t.Fatalf("changing the clone changed the original: %q", pairs(&m))
	}
	if c.Value("a") != "2" || c.Len() != 2 {
		t.Fatalf("clone = %q", pairs(c))
	}
	if got := (*Map)(nil).Clone(); got == nil || got.Len() != 0 {
		t.Fatal("Clone of nil should be an empty map")
	}
}

func TestOverlay(t *testing.T) {
	var base, top Map
	base.Put("Feed", "A")
	base.Put("System", "S")
	top.Put("FEED", "B")
	top.Put("Extra", "E")
	base.Overlay(&top)
	base.Overlay(nil)
	want := []KV{{"FEED", "B"}, {"System", "S"}, {"Extra", "E"}}
	if got := pairs(&base); !reflect.DeepEqual(got, want) {
		t.Fatalf("Overlay = %q, want %q", got, want)
	}
}

// TestLargeMapIndex checks that maps past indexThreshold, which switch to a
// hash index, behave exactly like small ones.
func TestLargeMapIndex(t *testing.T) {
	var m Map
	const n = indexThreshold * 3
	for i := range n {
		m.Put(fmt.Sprintf("Key-%d", i), fmt.Sprint(i))
	}
	if m.idx == nil {
		t.Fatal("expected an index on a large map")
	}
	m.Put("KEY-5", "five")           // replace keeps position and takes new case
	m.Put("k", "1")                  // ASCII k ...
	m.Put("K", "ascii")              // ... and K are one key
	m.Put("\u212a", "kelvin")        // the kelvin sign is another: only ASCII letters fold
	m.Put("straße", "x")             // non-ASCII key
	m.Put("STRASSE", "not the same") // "straße" and "STRASSE" differ
	for i := 10; i < 20; i++ {
		m.Delete(fmt.Sprintf("key-%d", i))
	}
	if got := pairs(&m)[5]; got != (KV{"KEY-5", "five"}) {
		t.Fatalf("position 5 = %q", got)
	}
	if v := m.Value("k"); v != "ascii" {
		t.Fatalf("Value(k) = %q", v)
	}
	if v := m.Value("\u212a"); v != "kelvin" {
		t.Fatalf("Value(kelvin sign) = %q", v)
	}
	if v := m.Value("STRASSE"); v != "not the same" {
		t.Fatalf("Value(STRASSE) = %q", v)
	}
	if v := m.Value("STRAßE"); v != "x" {
		t.Fatalf("Value(STRAßE) = %q", v)
	}
	if _, ok := m.Get("Straße"); !ok {
		t.Fatal("Straße not found: ASCII letters fold in a non-ASCII name too")
	}
	if _, ok := m.Get("key-15"); ok {
		t.Fatal("deleted key still found")
	}
	if v := m.Value("key-25"); v != "25" {
		t.Fatalf("after deletes, Value(key-25) = %q", v)
	}
	if want := n + 4 - 10; m.Len() != want {
		t.Fatalf("Len = %d, want %d", m.Len(), want)
	}
	// Every key must be found through the index under any case, at its position.
	for i, kv := range pairs(&m) {
		if j := m.find(asciiUpper(kv.Key)); j != i {
			t.Fatalf("find(%q) = %d, want %d", asciiUpper(kv.Key), j, i)
		}
	}
	c := m.Clone()
	c.Put("key-30", "changed")
	if m.Value("key-30") != "30" {
		t.Fatal("clone shares its index with the original")
	}
}

// TestFoldNameMatchesEqualName: FoldName and EqualName agree, fold ASCII
// letters only (as SQLite's lower() and PostgreSQL's under COLLATE "C",
// which the stream queries use), and EqualName agrees with EqualFold on
// ASCII.
func TestFoldNameMatchesEqualName(t *testing.T) {
	words := []string{"k", "K", "\u212a", "s", "S", "ſ", "straße", "STRASSE", "Straße", "Σ", "σ", "é", "É", "a\xffb", "a\xfeb", "a\ufffdb", "", "Feed", "FEED", "feed", "[", "{", "@", "`"}
	for _, a := range words {
		for _, b := range words {
			if got, want := FoldName(a) == FoldName(b), EqualName(a, b); got != want {
				t.Errorf("FoldName(%q)==FoldName(%q) is %v, EqualName is %v", a, b, got, want)
			}
			ascii := func(s string) bool {
				for i := 0; i < len(s); i++ {
					if s[i] >= utf8.RuneSelf {
						return false
					}
				}
				return true
			}
			if ascii(a) && ascii(b) && EqualName(a, b) != strings.EqualFold(a, b) {
				t.Errorf("EqualName(%q, %q) = %v, EqualFold differs", a, b, EqualName(a, b))
			}
		}
	}
	for _, tc := range []struct{ a, b string }{{"\u212a", "k"}, {"ſ", "s"}, {"É", "é"}, {"Σ", "σ"}} {
		if EqualName(tc.a, tc.b) {
			t.Errorf("EqualName(%q, %q): only ASCII letters fold", tc.a, tc.b)
		}
	}
	if s := "already-lower"; FoldName(s) != s || testing.AllocsPerRun(10, func() { FoldName(s) }) != 0 {
		t.Error("FoldName of a lower-case name allocates")
	}
}

// asciiUpper is s with ASCII letters in upper case.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

func TestJSONRoundTrip(t *testing.T) {
	var m Map
	m.Put("Type", "Raw Events")
	m.Put("feed", "MY_FEED")
	m.Put("Quote\"d", "line\nbreak \\ tab\t \x01 <html> é \u2028 end")
	m.Put("Empty", "")
	// Called directly: json.Marshal would re-escape <, > and & in the output.
	b, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"Empty":"","feed":"MY_FEED","Quote\"d":"line\nbreak \\ tab\t \u0001 <html> é \u2028 end","Type":"Raw Events"}`
	if string(b) != want {
		t.Fatalf("MarshalJSON = %s\nwant          %s", b, want)
	}
	// encoding/json must agree on what the string means.
	var plain map[string]string
	if err := json.Unmarshal(b, &plain); err != nil || plain["Quote\"d"] != m.Value("Quote\"d") {
		t.Fatalf("encoding/json reads %q, %v", plain, err)
	}
	var back Map
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Sorted(), m.Sorted()) {
		t.Fatalf("round trip: %q, want %q", back.Sorted(), m.Sorted())
	}
}

func TestJSONByValueAndNil(t *testing.T) {
	var m Map
	m.Put("a", "1")
	type holder struct {
		ByValue Map
		ByPtr   *Map
		NilPtr  *Map
	}
	b, err := json.Marshal(holder{ByValue: m, ByPtr: &m})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"ByValue":{"a":"1"},"ByPtr":{"a":"1"},"NilPtr":null}`; string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	var e Map
	if b, _ := json.Marshal(&e); string(b) != "{}" {
		t.Fatalf("empty map = %s", b)
	}
}

func TestUnmarshalJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    []KV // insertion order
		wantErr string
	}{
		{in: `{}`, want: nil},
		{in: ` {"b":"2","A":" 1 ","a":"3"} `, want: []KV{{"b", "2"}, {"a", "3"}}},
		{in: `{"Nullish":null}`, want: []KV{{"Nullish", ""}}},
		{in: `{"EffectiveTime":"2024-03-01T14:34:56+0200"}`, want: []KV{{"EffectiveTime", "2024-03-01T12:34:56.000Z"}}},
		{in: `{"n":1}`, wantErr: `key "n": want a string value, got float64`},
		{in: `{"o":{}}`, wantErr: `key "o": want a string value`},
		{in: `["a"]`, wantErr: "want a JSON object"},
		{in: `{"a":"1"} {}`, wantErr: "data after the JSON object"},
		{in: `{"a":`, wantErr: "decode attributes"},
		{in: ``, wantErr: "decode attributes"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var m Map
			m.Put("stale", "replaced by Unmarshal")
			err := m.UnmarshalJSON([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pairs(&m); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	// JSON null leaves the map alone, as encoding/json expects of Unmarshalers.
	var m Map
	m.Put("keep", "me")
	if err := m.UnmarshalJSON([]byte("null")); err != nil || m.Value("keep") != "me" {
		t.Fatalf("null: %v, %q", err, pairs(&m))
	}
}

func TestHotPathAllocations(t *testing.T) {
	var m Map
	for i := range 20 {
		m.Put(fmt.Sprintf("Header-%d", i), "value")
	}
	m.Put("ReceivedTime", "2024-03-01T12:34:56.789Z")
	if n := testing.AllocsPerRun(100, func() { _ = m.Value("header-19") }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.Put("Header-3", "other") }); n != 0 {
		t.Errorf("Put of an existing key allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = NormaliseDate("2024-03-01T12:34:56.789Z") }); n != 0 {
		t.Errorf("NormaliseDate of a canonical date allocates %v times", n)
	}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = AppendMeta(buf[:0], &m) }); n > 1 {
		t.Errorf("AppendMeta allocates %v times, want at most 1 (the sorted copy)", n)
	}
}

func BenchmarkPutGet(b *testing.B) {
	headers := []KV{
		{"Feed", "MY_FEED"}, {"Type", "Raw Events"}, {"Compression", "GZIP"},
		{"System", "EXAMPLE_SYSTEM"}, {"Environment", "PROD"},
		{"EffectiveTime", "2024-03-01T12:34:56.789Z"}, {"AccountId", "123"},
		{"Component", "Component XYZ"}, {"Format", "XML"}, {"Encoding", "UTF-8"},
		{"Classification", "OFFICIAL"}, {"Host", "weir.example.com"},
		{"User-Agent", "curl/8.5.0"}, {"Accept", "*/*"}, {"Content-Length", "12345"},
		{"Content-Type", "application/octet-stream"}, {"X-Forwarded-For", "10.0.0.1"},
		{"Authorization", "Bearer abc"}, {"GUID", "5f1d8a2c-0000-4000-8000-000000000000"},
		{"RemoteFile", "/var/log/app.log"},
	}
	lookups := []string{"feed", "TYPE", "compression", "guid", "ReceiptId", "effectivetime"}
	b.ReportAllocs()
	for b.Loop() {
		var m Map
		for _, h := range headers {
			m.Put(h.Key, h.Value)
		}
		for _, k := range lookups {
			_, _ = m.Get(k)
		}
	}
}
