package attr

import (
	"slices"
	"strings"
	"time"
)

// Hop is one receipt of the data: by the main service or by a proxy.
type Hop struct {
	ReceiptID string    // this hop's receipt id
	Time      time.Time // this hop's receive time
	Host      string    // this host's name, appended to ReceivedPath
}

// AddReceiptInfo records hop h in m, oldest first in every list:
//   - a ReceiptId already in m is appended to ReceiptIdPath unless it is the
//     path's last element; then ReceiptId becomes h.ReceiptID, which is
//     appended to the path the same way;
//   - a ReceivedTime already in m is appended, normalised, to
//     ReceivedTimeHistory unless the history holds it (raw or normalised);
//     then h.Time is appended unless it is the last element, and becomes
//     ReceivedTime;
//   - h.Host is appended to ReceivedPath unless it is the last element.
//
// Because every append skips a repeat of the last element, applying the same
// hop twice changes nothing. Empty hop fields (ReceiptID "", zero Time,
// Host "") leave their attributes alone.
func AddReceiptInfo(m *Map, h Hop) {
	if h.ReceiptID != "" {
		path := m.Value(KeyReceiptIDPath)
		if prev := m.Value(KeyReceiptID); prev != "" {
			path = AppendListItem(path, prev)
		}
		m.Put(KeyReceiptIDPath, AppendListItem(path, h.ReceiptID))
		m.Put(KeyReceiptID, h.ReceiptID)
	}
	if !h.Time.IsZero() {
		history := m.Value(KeyReceivedTimeHistory)
		if prev := m.Value(KeyReceivedTime); prev != "" {
			// Put already normalised prev when it could; NormaliseDate is
			// cheap on a canonical value and keeps an unparseable one.
			norm := NormaliseDate(prev)
			if !listContains(history, prev) && !listContains(history, norm) {
				history = AppendListItem(history, norm)
			}
		}
		now := FormatTime(h.Time)
		m.Put(KeyReceivedTimeHistory, AppendListItem(history, now))
		m.Put(KeyReceivedTime, now)
	}
	if h.Host != "" {
		m.Put(KeyReceivedPath, AppendListItem(m.Value(KeyReceivedPath), h.Host))
	}
}

// MergeEntry returns the attributes of one zip entry group: a clone of base
// (the request's attributes, with hop h already applied) overlaid with entry
// (the group's .meta, which wins), with h re-applied so that this hop's
// ReceiptId and ReceivedTime win and every path and history reads old,new.
// With an empty or nil entry the result equals base.
//
// A list the entry does not carry comes from base and so already ends with
// this hop; that last element is dropped before h is re-applied, so an entry
// that names an earlier ReceiptId or ReceivedTime but no list of its own
// still reads earlier,this rather than this,earlier,this.
func MergeEntry(base, entry *Map, h Hop) *Map {
	out := base.Clone()
	out.Overlay(entry)
	trim := func(key, item string) {
		if item == "" {
			return
		}
		if _, ok := entry.Get(key); ok {
			return
		}
		if list, ok := out.Get(key); ok && lastListItem(list) == item {
			// Put rather than Delete keeps the key's position; AddReceiptInfo
			// refills it below since item is not empty.
			out.Put(key, list[:max(0, strings.LastIndexByte(list, ','))])
		}
	}
	trim(KeyReceiptIDPath, h.ReceiptID)
	if !h.Time.IsZero() {
		trim(KeyReceivedTimeHistory, FormatTime(h.Time))
	}
	trim(KeyReceivedPath, h.Host)
	AddReceiptInfo(out, h)
	return out
}

// MaxEarlierReceiptIDs bounds what EarlierReceiptIDs returns for one set of
// attributes: a deployment has a few hops, and a sender controls the path.
const MaxEarlierReceiptIDs = 16

// EarlierReceiptIDs returns the receipt ids that hops before this one gave
// the data m describes: the elements of its ReceiptIdPath other than its
// ReceiptId (this hop's), oldest first, each once. Elements that cannot be
// receipt ids (longer than 128 bytes, or holding spaces or controls) are
// left out, and at most MaxEarlierReceiptIDs are returned: the oldest,
// which include the one the original sender was given.
func EarlierReceiptIDs(m *Map) []string {
	path := m.Value(KeyReceiptIDPath)
	if path == "" {
		return nil
	}
	self := m.Value(KeyReceiptID)
	var out []string
	for e := range strings.SplitSeq(path, ",") {
		e = strings.TrimSpace(e)
		if e == "" || e == self || len(e) > 128 || strings.ContainsFunc(e, func(r rune) bool { return r <= ' ' || r == 0x7f }) ||
			slices.Contains(out, e) {
			continue
		}
		// A copy: e is a slice of the whole path, which would otherwise
		// stay in memory (a zip's every part has a path of its own) for as
		// long as the id is kept.
		out = append(out, strings.Clone(e))
		if len(out) == MaxEarlierReceiptIDs {
			break
		}
	}
	return out
}

// AppendListItem returns the comma-separated list with item appended, unless
// item is empty or already the list's last element (only the last element is
// compared, as the reference system does, so a path can revisit a host).
func AppendListItem(list, item string) string {
	switch {
	case item == "" || lastListItem(list) == item:
		return list
	case strings.TrimSpace(list) == "":
		return item
	default:
		return list + "," + item
	}
}

func lastListItem(list string) string {
	return strings.TrimSpace(list[strings.LastIndexByte(list, ',')+1:])
}

// listContains reports whether item is one of the list's elements (whole
// elements, not substrings, unlike the reference system).
func listContains(list, item string) bool {
	for e := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(e) == item {
			return true
		}
	}
	return false
}
