package streamquery

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/attr"
)

// inSetMin is the length above which an attribute IN list is also kept as
// a set for Match: below it, comparing the strings in turn is as quick as
// hashing the value.
const inSetMin = 8

// Match reports whether a post's attributes satisfy the expression. get
// looks an attribute up by name in any case. A nil or empty expression
// matches everything. Semantics are exactly those of Where's SQL for
// attribute terms.
//
// Match is for expressions from ParseAttributes. A term on a fixed stream
// field (which only Parse makes) has no attributes to look at and matches
// nothing. Match does not allocate: it runs on every post.
func (e *Expr) Match(get func(name string) (string, bool)) bool {
	if e == nil || e.root == nil {
		return true
	}
	return match(e.root, get)
}

func match(c cond, get func(string) (string, bool)) bool {
	switch c := c.(type) {
	case junction:
		// The first kid that decides the junction (true for OR, false for
		// AND) decides it; the SQL gives the same answer, in any order.
		for _, k := range c.kids {
			if match(k, get) == c.or {
				return c.or
			}
		}
		return !c.or
	case negation:
		return !match(c.kid, get)
	case term:
		return c.match(get)
	}
	return false
}

// match is attrTerm's SQL in Go: the term holds when the attribute is
// present and the comparison holds on its value (IS_NULL: when it is
// absent). Text compares byte-wise, as the SQL's does (COLLATE "C" on
// PostgreSQL).
func (t *term) match(get func(string) (string, bool)) bool {
	if t.f.kind != kindAttr {
		return false
	}
	v, ok := get(t.attr)
	switch {
	case !ok:
		return t.c == IsNull
	case t.c == IsNull:
		return false
	case t.c == IsNotNull:
		return true
	}
	switch t.vk {
	case valInt:
		// attrNumber: any other shape is NULL, which no comparison matches.
		if !attrIntText(v) {
			return false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return err == nil && ordered(t.c, n, t.ints)
	case valDate:
		return canonicalDate(v) && ordered(t.c, v, t.strs)
	}
	switch t.c {
	case Equals:
		if t.glob {
			return globMatch(t.parts, v)
		}
		return v == t.strs[0]
	case NotEquals:
		if t.glob {
			return !globMatch(t.parts, v)
		}
		return v != t.strs[0]
	case Contains:
		return strings.Contains(v, t.strs[0])
	case StartsWith:
		return strings.HasPrefix(v, t.strs[0])
	case EndsWith:
		return strings.HasSuffix(v, t.strs[0])
	case In:
		if t.set != nil {
			_, ok := t.set[v]
			return ok
		}
		return slices.Contains(t.strs, v)
	}
	return ordered(t.c, v, t.strs)
}

// ordered is an ordering condition of v against the term's values
// (BETWEEN inclusive at both ends, as SQL's).
func ordered[T cmp.Ordered](c Condition, v T, vals []T) bool {
	switch c {
	case GreaterThan:
		return v > vals[0]
	case GreaterThanOrEqualTo:
		return v >= vals[0]
	case LessThan:
		return v < vals[0]
	case LessThanOrEqualTo:
		return v <= vals[0]
	case Between:
		return v >= vals[0] && v <= vals[1]
	}
	return false
}

// canonicalDate is attrIsDate: s has exactly the shape of attr.DateLayout,
// a digit wherever the layout has one and the layout's other characters
// as they are. Like the SQL, it checks the shape, not the calendar.
func canonicalDate(s string) bool {
	const layout = attr.DateLayout
	if len(s) != len(layout) {
		return false
	}
	for i := 0; i < len(layout); i++ {
		if isDigit(layout[i]) {
			if !isDigit(s[i]) {
				return false
			}
		} else if s[i] != layout[i] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// globMatch reports whether v matches a wildcard value split at its '*'s
// (parts has two or more elements): '*' is any run of characters, empty
// included, and everything else is literal, as in globPattern and
// likePattern. Taking each middle part at its first occurrence is enough:
// a later one would only leave less room for the parts after it. Byte-wise
// matching is character-wise for valid UTF-8, as the engines' is.
func globMatch(parts []string, v string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}
