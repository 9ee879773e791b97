package attr

import (
	"reflect"
	"strings"
	"testing"
)

func TestAppendMetaExample(t *testing.T) {
	// Test 20 of the reference: map {TEST:VALUE} plus StreamSize.
	var m Map
	m.Put("TEST", "VALUE")
	m.Put("StreamSize", "11")
	if got, want := string(AppendMeta(nil, &m)), "StreamSize:11\nTEST:VALUE\n"; got != want {
		t.Fatalf("AppendMeta = %q, want %q", got, want)
	}
	// AppendMeta appends.
	if got := string(AppendMeta([]byte("x"), &m)); got != "xStreamSize:11\nTEST:VALUE\n" {
		t.Fatalf("AppendMeta with prefix = %q", got)
	}
	if got := AppendMeta(nil, nil); len(got) != 0 {
		t.Fatalf("AppendMeta(nil map) = %q", got)
	}
}

func TestAppendMetaSortsAndKeepsEmptyValues(t *testing.T) {
	var m Map
	m.Put("type", "Raw Events")
	m.Put("Feed", "MY_FEED")
	m.Put("_x", "")
	m.Put("EffectiveTime", "1709296496789")
	want := "_x:\nEffectiveTime:2024-03-01T12:34:56.789Z\nFeed:MY_FEED\ntype:Raw Events\n"
	if got := string(AppendMeta(nil, &m)); got != want {
		t.Fatalf("AppendMeta = %q, want %q", got, want)
	}
}

// TestAppendMetaCannotInject: values reach the map from JSON or query strings
// and may hold what the unescaped format cannot; what is written must read
// back as the same keys, never as extra attributes.
func TestAppendMetaCannotInject(t *testing.T) {
	m := &Map{kvs: []KV{ // set directly: Put would trim the edges
		{"Evil", "x\nFeed:OTHER\rType:T\x00"},
		{"Feed:Sneaky", "v"},
		{"Bad\xffKey", "bad\xfevalue"},
		{"Ok", "é"},
	}}
	out := AppendMeta(nil, m)
	want := "Bad\uFFFDKey:bad\uFFFDvalue\nEvil:x Feed:OTHER Type:T \nFeed_Sneaky:v\nOk:é\n"
	if string(out) != want {
		t.Fatalf("AppendMeta = %q\nwant         %q", out, want)
	}
	back, err := ParseMeta(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Len() != 4 || back.Value("Feed") != "" {
		t.Fatalf("read back %q", pairs(back))
	}
}

func TestParseMeta(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []KV // insertion order
	}{
		{"empty", "", nil},
		{"blank lines", " \n\n\t\r\n", nil},
		{"example", "StreamSize:11\nTEST:VALUE\n", []KV{{"StreamSize", "11"}, {"TEST", "VALUE"}}},
		{"no final newline", "a:1\nb:2", []KV{{"a", "1"}, {"b", "2"}}},
		{"trims lines, keys and values", "  Feed : MY_FEED  \n\tType:\tRaw Events\t", []KV{{"Feed", "MY_FEED"}, {"Type", "Raw Events"}}},
		{"CRLF", "a:1\r\nb:2\r\n", []KV{{"a", "1"}, {"b", "2"}}},
		{"lone CR is a line break", "a:1\rb:2", []KV{{"a", "1"}, {"b", "2"}}},
		{"CR CR LF", "a:1\r\r\nb:2", []KV{{"a", "1"}, {"b", "2"}}},
		{"split at first colon", "url:http://host:80/x", []KV{{"url", "http://host:80/x"}}},
		{"no colon: empty value", "Flag\nother: \n", []KV{{"Flag", ""}, {"other", ""}}},
		{"duplicate key: last wins, first position, last case", "foo:999\nbar:1\nFOO:123", []KV{{"FOO", "123"}, {"bar", "1"}}},
		{"byte order mark ignored", "\uFEFFFeed:A\n\uFEFF  Type:B", []KV{{"Feed", "A"}, {"Type", "B"}}},
		{"date normalised", "EffectiveTime:2024-03-01T14:34:56+02:00", []KV{{"EffectiveTime", "2024-03-01T12:34:56.000Z"}}},
		{"unicode", "Größe:Ünïcödé ✓", []KV{{"Größe", "Ünïcödé ✓"}}},
		// A legacy code page (here windows-1252): each byte that is not
		// UTF-8 reads as U+FFFD, as the reference system reads it.
		{"not UTF-8", "Description:Donn\xe9es \xff\xfe\nCaf\xe9:1", []KV{{"Description", "Donn\uFFFDes \uFFFD\uFFFD"}, {"Caf\uFFFD", "1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMeta([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := pairs(m); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseMeta(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseMetaErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"a:1\nb:\x00\n", "meta line 2: contains a NUL byte"},
		{"a:1\n:orphan value\n", "meta line 2: no key before ':'"},
		{"  \t : x", "meta line 1: no key before ':'"},
		{"\uFEFF:x", "meta line 1: no key before ':'"},
	}
	for _, tc := range tests {
		m, err := ParseMeta([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseMeta(%q) = %v, %v; want error containing %q", tc.in, m, err, tc.want)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	in := "b:2\nA:1\nEffectiveTime:1709296496789\nempty:\nurl:http://x:1/\n"
	m, err := ParseMeta([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out := AppendMeta(nil, m)
	if want := "A:1\nb:2\nEffectiveTime:2024-03-01T12:34:56.789Z\nempty:\nurl:http://x:1/\n"; string(out) != want {
		t.Fatalf("AppendMeta = %q, want %q", out, want)
	}
	again, err := ParseMeta(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Sorted(), m.Sorted()) {
		t.Fatalf("round trip %q != %q", again.Sorted(), m.Sorted())
	}
}

func BenchmarkParseMeta(b *testing.B) {
	var m Map
	for _, kv := range [][2]string{
		{"Feed", "MY_FEED"}, {"Type", "Raw Events"}, {"System", "SYS"}, {"Environment", "PROD"},
		{"GUID", "5f1d8a2c-0000-4000-8000-000000000000"}, {"ReceivedTime", "2024-03-01T12:34:56.789Z"},
		{"ReceiptId", "1709296496789_0001_P_proxy-1"}, {"ReceivedPath", "proxy-host"},
		{"RemoteAddress", "10.0.0.1"}, {"StreamSize", "12345"}, {"user-agent", "curl/8.5.0"},
	} {
		m.Put(kv[0], kv[1])
	}
	text := AppendMeta(nil, &m)
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := ParseMeta(text); err != nil {
			b.Fatal(err)
		}
	}
}
