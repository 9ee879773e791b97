package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/unicode"
)

func TestHexDumpMatchesHexdumpC(t *testing.T) {
	b := []byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\x00\x01\xff\n<root/>")
	for _, n := range []int{0, 1, 8, 15, 16, 17, len(b)} {
		var want strings.Builder
		d := hex.Dumper(&want) // hexdump -C's layout, offsets from 0
		d.Write(b[:n])
		d.Close()
		if got := hexDump(b[:n], 0); got != want.String() {
			t.Errorf("%d bytes:\n got %q\nwant %q", n, got, want.String())
		}
	}
	if got := hexDump([]byte("<?xm"), 0x1230); !strings.HasPrefix(got, "00001230  3c 3f 78 6d ") || !strings.HasSuffix(got, "|<?xm|\n") {
		t.Errorf("offset base: %q", got)
	}
}

func TestLookupCharset(t *testing.T) {
	for name, want := range map[string]string{"": "UTF-8", "utf-8": "UTF-8", "UTF8": "UTF-8", "ISO-8859-1": "ISO-8859-1",
		"latin1": "latin1", "UTF-16LE": "UTF-16LE", "utf_32le": "UTF-32LE", "windows-1252": "windows-1252", "Shift_JIS": "Shift_JIS"} {
		cs, err := lookupCharset(name)
		if err != nil || cs.name != want {
			t.Errorf("%q: %q %v", name, cs.name, err)
		}
	}
	if cs, _ := lookupCharset("ISO-8859-1"); cs.width != 1 {
		t.Errorf("ISO-8859-1 is not fixed width")
	}
	if _, err := lookupCharset("EBCDIC-NONSENSE"); err == nil {
		t.Error("unknown charset accepted")
	}
}

// TestReadTextRange compares every range read against slicing the decoded
// text, across chunk boundaries and for every charset path.
func TestReadTextRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcé€𝄞\n日本")
	runes := make([]rune, 200_000)
	for i := range runes {
		runes[i] = alphabet[rng.IntN(len(alphabet))]
	}
	text := string(runes)
	latin := []rune(strings.Map(func(r rune) rune {
		if r > 0xff {
			return 'x'
		}
		return r
	}, text))
	utf16le, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().String(text)
	latinBytes, _ := charmap.ISO8859_1.NewEncoder().String(string(latin))
	for _, tc := range []struct {
		charset string
		data    []byte
		bom     int
		runes   []rune
	}{
		{"UTF-8", []byte(text), 0, runes},
		{"UTF-8", append([]byte{0xEF, 0xBB, 0xBF}, text...), 3, runes},
		{"UTF-16LE", []byte(utf16le), 0, runes},
		{"ISO-8859-1", []byte(latinBytes), 0, latin},
	} {
		cs, err := lookupCharset(tc.charset)
		if err != nil {
			t.Fatal(err)
		}
		ra := bytes.NewReader(tc.data)
		for _, r := range [][2]int64{{0, 10}, {0, 200_000}, {5, 1}, {65535, 3}, {70_000, 65536 * 2}, {199_990, 100}, {200_000, 5}, {300_000, 5}} {
			got, err := readTextRange(context.Background(), ra, int64(tc.bom), int64(len(tc.data)), cs, r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := min(r[0], int64(len(tc.runes))), min(r[0]+r[1], int64(len(tc.runes)))
			if want := string(tc.runes[lo:hi]); got.text != want || got.chars != hi-lo {
				t.Fatalf("%s %v: got %d chars (%q...), want %d", tc.charset, r, got.chars, trunc(got.text), hi-lo)
			}
			if got.exact && got.total != int64(len(tc.runes)) {
				t.Fatalf("%s %v: exact total %d, want %d", tc.charset, r, got.total, len(tc.runes))
			}
			if r[0]+r[1] >= int64(len(tc.runes)) && !got.exact {
				t.Fatalf("%s %v: read to the end but the total is not exact", tc.charset, r)
			}
		}
	}
}

// TestReadTextRangeEstimate: the estimated total is of the whole part,
// from the characters decoded over the bytes behind them, whatever range
// was asked for; and paging while offset < total reads every character.
func TestReadTextRangeEstimate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func(n int, alphabet string) string {
		a := []rune(alphabet)
		r := make([]rune, n)
		for i := range r {
			r[i] = a[rng.IntN(len(a))]
		}
		return string(r)
	}
	ascii := pick(2526, "abc <>/\n")
	mixed := pick(400_000, "abcé€𝄞\n日本")
	// Skewed: the first bytes are ASCII, the rest three bytes a character,
	// so an estimate from the start is low; paging must still get to the end.
	skewed := pick(100_000, "abc\n") + pick(200_000, "日本語")
	utf16, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().String(mixed)
	for _, tc := range []struct {
		name, charset string
		data          []byte
		chars         int64
	}{
		{"ascii", "UTF-8", []byte(ascii), int64(len(ascii))},
		{"utf-8", "UTF-8", []byte(mixed), int64(utf8.RuneCountInString(mixed))},
		{"skewed", "UTF-8", []byte(skewed), int64(utf8.RuneCountInString(skewed))},
		{"utf-16", "UTF-16LE", []byte(utf16), int64(utf8.RuneCountInString(mixed))},
	} {
		cs, err := lookupCharset(tc.charset)
		if err != nil {
			t.Fatal(err)
		}
		ra := bytes.NewReader(tc.data)
		size := int64(len(tc.data))
		if tc.name != "skewed" {
			for _, r := range [][2]int64{{0, 10}, {2000, 10}, {0, 0}, {100_000, 1}} {
				got, err := readTextRange(context.Background(), ra, 0, size, cs, r[0], r[1])
				if err != nil {
					t.Fatal(err)
				}
				if got.exact {
					if r[0] < tc.chars && got.total != tc.chars {
						t.Errorf("%s %v: exact total %d, want %d", tc.name, r, got.total, tc.chars)
					}
					continue
				}
				// Uniform data: within 2% of the true count.
				if diff := float64(got.total-tc.chars) / float64(tc.chars); diff > 0.02 || diff < -0.02 {
					t.Errorf("%s %v: total %d, want about %d", tc.name, r, got.total, tc.chars)
				}
			}
		}
		var all strings.Builder
		offset, pages := int64(0), 0
		for total := int64(1); offset < total; pages++ {
			got, err := readTextRange(context.Background(), ra, 0, size, cs, offset, 7_000)
			if err != nil {
				t.Fatal(err)
			}
			all.WriteString(got.text)
			offset, total = offset+got.chars, got.total
			if pages > 1000 {
				t.Fatalf("%s: no end after %d pages", tc.name, pages)
			}
		}
		if want := tc.data; tc.charset == "UTF-16LE" {
			if all.String() != mixed {
				t.Errorf("%s: paging read %d characters, want %d", tc.name, utf8.RuneCountInString(all.String()), tc.chars)
			}
		} else if all.String() != string(want) {
			t.Errorf("%s: paging read %d characters, want %d", tc.name, utf8.RuneCountInString(all.String()), tc.chars)
		}
	}
}

func trunc(s string) string {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

func TestNonTextReason(t *testing.T) {
	utf8cs, _ := lookupCharset("UTF-8")
	latin, _ := lookupCharset("ISO-8859-1")
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	io.WriteString(w, "hello")
	w.Close()
	utf16, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().String("<?xml version='1.0'?><a>text</a>")
	for _, tc := range []struct {
		name    string
		data    []byte
		atEOF   bool
		cs      charset
		flagged string
		want    []string // substrings; none: text
	}{
		{"text", []byte("plain text\r\n\tand more"), true, utf8cs, "", nil},
		{"utf-8 multibyte cut by the sample", []byte("abc€")[:5], false, utf8cs, "", nil},
		{"gzip", gz.Bytes(), true, utf8cs, "", []string{"cannot be displayed as text", "gzip magic (1f 8b)", "without a Compression header"}},
		{"gzip flagged", gz.Bytes(), true, utf8cs, "GZIP", []string{"gzip magic", "UndeclaredCompression: GZIP"}},
		{"zip", []byte("PK\x03\x04rest"), true, latin, "", []string{"zip magic (50 4b 03 04)", "Compression: ZIP"}},
		{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd, 1}, true, utf8cs, "", []string{"zstd magic"}},
		{"nul", []byte("abc\x00def"), true, latin, "", []string{"NUL characters", "character 3"}},
		{"utf-16 read as utf-8", []byte(utf16), true, utf8cs, "", []string{"NUL", "UTF-16LE text without a byte-order mark", "read as UTF-8"}},
		{"invalid utf-8", []byte("caf\xe9 au lait"), true, utf8cs, "", []string{"not valid UTF-8", "first at byte 3"}},
		{"utf-8 cut at the end of the part", []byte("abc\xe2\x82"), true, utf8cs, "", []string{"not valid UTF-8"}},
		{"latin-1 is always valid", []byte("caf\xe9 au lait"), true, latin, "", nil},
		{"replacement char is text", []byte("bad \xef\xbf\xbd char"), true, utf8cs, "", nil},
		{"controls", bytes.Repeat([]byte{1, 2, 3, 'a'}, 100), true, latin, "", []string{"control characters"}},
	} {
		got := nonTextReason(tc.data, tc.atEOF, 0, tc.cs, tc.flagged)
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: %q", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
}

func TestDetectBOM(t *testing.T) {
	for in, want := range map[string]string{"\xEF\xBB\xBFx": "UTF-8", "\xFF\xFEx\x00": "UTF-16LE", "\xFE\xFF\x00x": "UTF-16BE",
		"\xFF\xFE\x00\x00": "UTF-32LE", "\x00\x00\xFE\xFF": "UTF-32BE", "abc": ""} {
		cs, n, ok := detectBOM([]byte(in))
		if cs.name != want || ok != (want != "") || ok && n == 0 {
			t.Errorf("%q: %q %d %v", in, cs.name, n, ok)
		}
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		h               string
		size, start, n  int64
		ok, satisfiable bool
	}{
		{"bytes=0-9", 100, 0, 10, true, true},
		{"bytes=90-", 100, 90, 10, true, true},
		{"bytes=90-200", 100, 90, 10, true, true},
		{"bytes=-5", 100, 95, 5, true, true},
		{"bytes=-500", 100, 0, 100, true, true},
		{"bytes=100-", 100, 0, 0, false, false},
		{"bytes=-0", 100, 0, 0, false, false},
		{"bytes=0-", 0, 0, 0, false, false},
		{"bytes=5-1", 100, 0, 0, false, true},
		{"bytes=0-1,5-6", 100, 0, 0, false, true},
		{"items=0-1", 100, 0, 0, false, true},
		{"bytes=x-1", 100, 0, 0, false, true},
		{"bytes=+1-2", 100, 0, 0, false, true},
	} {
		s, n, ok, sat := parseRange(tc.h, tc.size)
		if ok != tc.ok || sat != tc.satisfiable || ok && (s != tc.start || n != tc.n) {
			t.Errorf("%q of %d: %d+%d ok %v satisfiable %v", tc.h, tc.size, s, n, ok, sat)
		}
	}
}

func TestConcat(t *testing.T) {
	parts := []string{"hello ", "", "brave ", "new world"}
	var secs []*io.SectionReader
	for _, p := range parts {
		secs = append(secs, io.NewSectionReader(strings.NewReader(p), 0, int64(len(p))))
	}
	c := newConcat(secs)
	all := strings.Join(parts, "")
	for off := range len(all) + 1 {
		for n := 0; off+n <= len(all)+2; n++ {
			b := make([]byte, n)
			got, err := c.ReadAt(b, int64(off))
			want := min(n, len(all)-off)
			if got != want || string(b[:got]) != all[off:off+want] || (got < n) != (err == io.EOF) {
				t.Fatalf("ReadAt(%d, %d) = %d %q %v", n, off, got, b[:got], err)
			}
		}
	}
	if !utf8.ValidString(all) {
		t.Fatal("unreachable")
	}
}
