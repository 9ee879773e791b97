package attr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MarshalJSON encodes the map as a JSON object of strings, keys in Sorted
// order so equal maps encode to equal bytes. It has a value receiver so that
// a Map held by value inside another struct still encodes as an object.
func (m Map) MarshalJSON() ([]byte, error) {
	sorted := m.Sorted()
	n := 2
	for _, kv := range sorted {
		n += len(kv.Key) + len(kv.Value) + 6
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, kv := range sorted {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, kv.Key)
		b = append(b, ':')
		b = appendJSONString(b, kv.Value)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON replaces the contents of m with a JSON object whose values
// are strings; null values are read as "" (the reference system's attribute
// maps may carry nulls). Keys keep the order of the object, and go through
// Put, so they are trimmed and dates normalised. JSON null leaves m unchanged,
// as encoding/json expects.
func (m *Map) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decode attributes: %w", err)
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("decode attributes: want a JSON object, got %v", tok)
	}
	m.kvs, m.idx = m.kvs[:0], nil
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("decode attributes: %w", err)
		}
		key, _ := tok.(string) // object keys are always strings
		tok, err = dec.Token()
		if err != nil {
			return fmt.Errorf("decode attributes: key %q: %w", key, err)
		}
		switch v := tok.(type) {
		case string:
			m.Put(key, v)
		case nil:
			m.Put(key, "")
		default:
			return fmt.Errorf("decode attributes: key %q: want a string value, got %T", key, tok)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fmt.Errorf("decode attributes: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode attributes: data after the JSON object")
	}
	return nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. encoding/json would allocate
// per string; this does not. Invalid UTF-8 becomes U+FFFD as encoding/json
// does, and U+2028/U+2029 are escaped so the output is safe inside JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
