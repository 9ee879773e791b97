package attr

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AppendMeta appends m in the meta text format to dst: UTF-8, one key:value
// per line ending in \n, keys sorted case-insensitively, nothing around ':'.
// An empty value is written as "key:" (weir has no null values).
//
// The format has no escaping, so AppendMeta makes sure what it writes reads
// back as the same attributes instead of injecting others: in keys, ':' and
// line breaks become '_'; in values, line breaks become ' '; NUL bytes (which
// ParseMeta refuses) become the same replacements, and invalid UTF-8 becomes
// U+FFFD. Maps built by ParseMeta never need any of this.
func AppendMeta(dst []byte, m *Map) []byte {
	sorted := m.Sorted()
	n := 0
	for _, kv := range sorted {
		n += len(kv.Key) + len(kv.Value) + 2
	}
	dst = slices.Grow(dst, n) // exact unless a character is replaced
	for _, kv := range sorted {
		dst = appendMetaText(dst, kv.Key, true)
		dst = append(dst, ':')
		dst = appendMetaText(dst, kv.Value, false)
		dst = append(dst, '\n')
	}
	return dst
}

func appendMetaText(dst []byte, s string, key bool) []byte {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || c == '\n' || c == '\r' || c == 0 || (key && c == ':') {
			clean = false
			break
		}
	}
	if clean || (utf8.ValidString(s) && !strings.ContainsAny(s, metaUnsafe(key))) {
		return append(dst, s...)
	}
	repl := byte(' ')
	if key {
		repl = '_'
	}
	for _, r := range s { // invalid bytes arrive as utf8.RuneError and are written as U+FFFD
		switch {
		case r == '\n' || r == '\r' || r == 0 || (key && r == ':'):
			dst = append(dst, repl)
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

func metaUnsafe(key bool) string {
	if key {
		return "\n\r\x00:"
	}
	return "\n\r\x00"
}

// ParseMeta reads the meta text format. Lines end in \n, \r\n or a lone \r
// (as the reference system's reader splits them); each line is trimmed and
// blank lines are skipped; the line is split at the first ':' and key and
// value are trimmed; a line without ':' is a key with an empty value. Later
// lines win over earlier ones with the same key. A byte order mark at the
// start of a line is ignored, since editors on Windows add one. Bytes that
// are not UTF-8 (text written in a legacy code page, as Windows tools still
// write it) are read as U+FFFD, one for each byte, as the reference system's
// UTF-8 reader reads them and as weir stores such bytes in a header value.
//
// Errors name the line, so a sender can fix the entry: a NUL byte (binary
// data where text was expected), or a line with an empty key.
func ParseMeta(b []byte) (*Map, error) {
	m := &Map{}
	// One string for the whole input: every key and value below is a
	// substring of it, so parsing allocates once rather than per line.
	text := string(b)
	for lineNo := 1; text != ""; lineNo++ {
		line := text
		text = ""
		if i := strings.IndexAny(line, "\r\n"); i >= 0 {
			next := i + 1
			if line[i] == '\r' && next < len(line) && line[next] == '\n' {
				next++ // \r\n is one line break
			}
			line, text = line[:i], line[next:]
		}
		if strings.IndexByte(line, 0) >= 0 {
			return nil, fmt.Errorf("meta line %d: contains a NUL byte; meta must be text", lineNo)
		}
		if !utf8.ValidString(line) {
			line = replaceInvalid(line)
		}
		line = strings.TrimLeftFunc(line, func(r rune) bool { return r == '\uFEFF' || unicode.IsSpace(r) })
		line = strings.TrimRightFunc(line, unicode.IsSpace)
		if line == "" {
			continue
		}
		key, value, _ := strings.Cut(line, ":")
		if strings.TrimSpace(key) == "" {
			return nil, fmt.Errorf("meta line %d: no key before ':'; want key:value", lineNo)
		}
		m.Put(key, value)
	}
	return m, nil
}

// replaceInvalid returns s with each byte that is not part of a valid UTF-8
// sequence replaced by U+FFFD.
func replaceInvalid(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s { // an invalid byte arrives as utf8.RuneError
		b.WriteRune(r)
	}
	return b.String()
}
