package streamquery

import (
	"fmt"
	"strings"
)

// SortFields are the fields results can be sorted by (the reference
// system's set, less its parent fields).
const SortFields = "Id, Create Time, Effective Time, Feed, Type"

// MaxSortKeys bounds a sort list.
const MaxSortKeys = 5

// SortKey is one validated sort field and direction.
type SortKey struct {
	Field  string // canonical name
	Desc   bool
	column string
	text   bool
}

// ParseSort validates one sort field (any case). Errors are *Error with an
// empty path: the caller knows where the sort list is.
func ParseSort(name string, desc bool) (SortKey, error) {
	f, ok := lookupField(name)
	if ok {
		switch f.name {
		case "Id", "Create Time", "Effective Time", "Feed", "Type":
			return SortKey{Field: f.name, Desc: desc, column: f.column, text: f.kind == kindText}, nil
		}
	}
	return SortKey{}, &Error{Msg: fmt.Sprintf("cannot sort by %q: sort fields are %s", name, SortFields), Value: name}
}

// OrderBy is the ORDER BY list (without the keywords) for keys; ties are
// broken by id, in the direction of the last key, so that paging is stable.
// No keys sorts by id ascending.
func OrderBy(d Dialect, keys []SortKey) string {
	var parts []string
	tieDesc := false
	for _, k := range keys {
		col := k.column
		if k.text && d == Postgres {
			// Byte order, as on SQLite, whatever the database's locale.
			col += ` COLLATE "C"`
		}
		dir := " ASC"
		if k.Desc {
			dir = " DESC"
		}
		parts = append(parts, col+dir)
		tieDesc = k.Desc
		if k.column == "id" {
			// id is unique: anything after it could never decide.
			return strings.Join(parts, ", ")
		}
	}
	tie := "id ASC"
	if tieDesc {
		tie = "id DESC"
	}
	return strings.Join(append(parts, tie), ", ")
}
