// Package attr holds the attribute (meta) map that travels with every post:
// HTTP headers, query parameters and receipt information, the text format the
// map is stored in beside the data (".meta" entries), the date format used
// for time-valued attributes and the rules that add one hop's receipt details.
package attr

import (
	"cmp"
	"iter"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Keys weir itself reads or maintains. Keys are matched case-insensitively,
// these spellings are the ones written when weir adds a key.
const (
	KeyEffectiveTime       = "EffectiveTime"
	KeyReceivedTime        = "ReceivedTime"
	KeyReceivedTimeHistory = "ReceivedTimeHistory"
	KeyReceiptID           = "ReceiptId"
	KeyReceiptIDPath       = "ReceiptIdPath"
	KeyReceivedPath        = "ReceivedPath"
)

// KV is one attribute.
type KV struct{ Key, Value string }

// indexThreshold is the size above which a Map keeps a hash index beside its
// slice. Normal maps (10-40 keys) stay below it and pay nothing, but a request
// with many thousands of headers or query pairs would otherwise make building
// the map quadratic, which a sender could use to burn CPU.
const indexThreshold = 64

// initialCap is the capacity of a map's first allocation.
const initialCap = 16

// Map is an ordered attribute map with case-insensitive keys that keeps the
// case of the most recent Put for display. The zero value is ready to use.
// Not safe for concurrent use. Get, Value, Len, All, Sorted, Clone and
// AppendMeta accept a nil *Map as empty.
type Map struct {
	kvs []KV
	// idx maps FoldName(key) to its position in kvs; nil until the map grows
	// past indexThreshold.
	idx map[string]int
}

// find returns the position of key, or -1.
func (m *Map) find(key string) int {
	if m == nil {
		return -1
	}
	if m.idx != nil {
		if i, ok := m.idx[FoldName(key)]; ok {
			return i
		}
		return -1
	}
	for i := range m.kvs {
		if EqualName(m.kvs[i].Key, key) {
			return i
		}
	}
	return -1
}

// Get returns the value of key (matched case-insensitively) and whether it is present.
func (m *Map) Get(key string) (string, bool) {
	if i := m.find(strings.TrimSpace(key)); i >= 0 {
		return m.kvs[i].Value, true
	}
	return "", false
}

// Value returns the value of key, or "" when absent.
func (m *Map) Value(key string) string {
	v, _ := m.Get(key)
	return v
}

// Put sets key to value. Both are trimmed; an empty key is ignored. An
// existing key (any case) is replaced in place, keeping its position but
// taking the new key's case. EffectiveTime and ReceivedTime values are
// normalised with NormaliseDate; unlike the reference system the key match
// is case-insensitive, because HTTP/2 delivers header names in lower case and
// the attribute means the same whatever its case.
func (m *Map) Put(key, value string) {
	key = strings.TrimSpace(key)
	if key == "" {
		return
	}
	value = strings.TrimSpace(value)
	if EqualName(key, KeyEffectiveTime) || EqualName(key, KeyReceivedTime) {
		value = NormaliseDate(value)
	}
	if i := m.find(key); i >= 0 {
		m.kvs[i] = KV{key, value}
		return
	}
	if m.kvs == nil {
		// Requests carry 10-40 attributes: start big enough that building a
		// map takes one or two allocations rather than a doubling series.
		m.kvs = make([]KV, 0, initialCap)
	}
	m.kvs = append(m.kvs, KV{key, value})
	switch {
	case m.idx != nil:
		m.idx[FoldName(key)] = len(m.kvs) - 1
	case len(m.kvs) > indexThreshold:
		m.buildIndex()
	}
}

func (m *Map) buildIndex() {
	m.idx = make(map[string]int, len(m.kvs)*2)
	for i, kv := range m.kvs {
		m.idx[FoldName(kv.Key)] = i
	}
}

// Delete removes key (matched case-insensitively) if present, keeping the
// order of the other keys.
func (m *Map) Delete(key string) {
	i := m.find(strings.TrimSpace(key))
	if i < 0 {
		return
	}
	m.kvs = slices.Delete(m.kvs, i, i+1)
	if m.idx != nil {
		// Positions after i moved; deletes are rare, so rebuilding is simpler
		// than patching.
		m.idx = nil
		if len(m.kvs) > indexThreshold {
			m.buildIndex()
		}
	}
}

// Len returns the number of attributes.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.kvs)
}

// All yields the attributes in insertion order. Changing the map during the
// iteration does not affect the pairs yielded.
func (m *Map) All() iter.Seq2[string, string] {
	var kvs []KV
	if m != nil {
		kvs = m.kvs
	}
	return func(yield func(string, string) bool) {
		for _, kv := range kvs {
			if !yield(kv.Key, kv.Value) {
				return
			}
		}
	}
}

// Sorted returns a copy of the attributes sorted case-insensitively by key,
// as the reference system orders them. Ties are broken by the exact key, so
// that the order is always the same: a Map folds ASCII letters only, so it
// holds keys apart that differ in the case of other letters (Ä and ä),
// which compareFold, folding every letter, finds equal.
func (m *Map) Sorted() []KV {
	if m.Len() == 0 {
		return nil
	}
	out := slices.Clone(m.kvs)
	slices.SortFunc(out, func(a, b KV) int {
		if c := compareFold(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// Clone returns an independent copy.
func (m *Map) Clone() *Map {
	if m == nil {
		return &Map{}
	}
	// Room for a few more: a copy is usually made to add to it (a stream's
	// StreamSize, a part's own keys), and growing a full slice copies it
	// again.
	c := &Map{kvs: append(make([]KV, 0, len(m.kvs)+4), m.kvs...)}
	if m.idx != nil {
		c.idx = make(map[string]int, len(m.idx))
		for k, v := range m.idx {
			c.idx[k] = v
		}
	}
	return c
}

// Overlay puts every attribute of other into m, so other's values win.
func (m *Map) Overlay(other *Map) {
	if other == nil {
		return
	}
	for _, kv := range other.kvs {
		m.Put(kv.Key, kv.Value)
	}
}

// compareFold orders keys the way the reference system writes meta files
// (Java's compareToIgnoreCase: each character upper- then lower-cased), so
// weir's files list keys in the same order. It does not allocate.
func compareFold(a, b string) int {
	for a != "" && b != "" {
		var ra, rb rune
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			ra, rb = rune(a[0]), rune(b[0])
			a, b = a[1:], b[1:]
			if 'A' <= ra && ra <= 'Z' {
				ra += 'a' - 'A'
			}
			if 'A' <= rb && rb <= 'Z' {
				rb += 'a' - 'A'
			}
		} else {
			var na, nb int
			ra, na = utf8.DecodeRuneInString(a)
			rb, nb = utf8.DecodeRuneInString(b)
			a, b = a[na:], b[nb:]
			ra = unicode.ToLower(unicode.ToUpper(ra))
			rb = unicode.ToLower(unicode.ToUpper(rb))
		}
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
	}
	return cmp.Compare(len(a), len(b))
}

// FoldName returns name with its ASCII letters in lower case: the form in
// which attribute names are compared, so that FoldName(a) == FoldName(b)
// exactly when EqualName(a, b). Only ASCII letters fold, as in the SQL the
// stream queries run on both engines (SQLite's lower(), PostgreSQL's under
// COLLATE "C"), so a name matches the same way in a Map, in the receipt
// rules and in a query; header names, the usual source, are ASCII anyway.
// A name already in lower case is returned as it is, without allocating.
func FoldName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			b := []byte(name)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return name
}

// EqualName reports whether two attribute names are the same name: equal
// but for the case of ASCII letters (see FoldName). It does not allocate.
func EqualName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}
