package streamquery

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Dialect is the SQL engine a condition is compiled for.
type Dialect int

const (
	SQLite Dialect = iota + 1
	Postgres
)

// paramType is how a bound value is typed on PostgreSQL, which must know
// each parameter's type where the context does not say (length($1)).
type paramType int

const (
	pText paramType = iota
	pBigint
	pInt
	pJSON
)

// builder accumulates SQL text and its bound values; placeholders are
// numbered $n after the args the caller already has.
type builder struct {
	d    Dialect
	sb   strings.Builder
	args []any
}

func (b *builder) w(s ...string) {
	for _, x := range s {
		b.sb.WriteString(x)
	}
}

// param binds v and returns its placeholder.
func (b *builder) param(v any, t paramType) string {
	b.args = append(b.args, v)
	ph := "$" + strconv.Itoa(len(b.args))
	if b.d != Postgres {
		return ph
	}
	switch t {
	case pBigint:
		return ph + "::bigint"
	case pInt:
		return ph + "::int"
	case pJSON:
		return ph + "::json"
	}
	return ph + "::text"
}

// Where compiles the expression to a condition on the streams table for
// dialect d, appending its values to args (placeholders continue from
// len(args)+1). A nil or empty expression is "1 = 1".
func (e *Expr) Where(d Dialect, args []any) (string, []any) {
	if e == nil || e.root == nil {
		return "1 = 1", args
	}
	b := &builder{d: d, args: args}
	b.cond(e.root)
	return b.sb.String(), b.args
}

func (b *builder) cond(c cond) {
	switch c := c.(type) {
	case junction:
		op := " AND "
		if c.or {
			op = " OR "
		}
		b.w("(")
		for i, k := range c.kids {
			if i > 0 {
				b.w(op)
			}
			b.cond(k)
		}
		b.w(")")
	case negation:
		b.w("NOT (")
		b.cond(c.kid)
		b.w(")")
	case term:
		if c.f.kind == kindAttr {
			b.attrTerm(c)
			return
		}
		if c.f.hops && c.c != IsNull && c.c != IsNotNull {
			b.hopsTerm(c)
			return
		}
		b.w("(")
		if c.f.emptyIsNull && c.c != IsNull && c.c != IsNotNull {
			// The zero value stands for "none", which, like SQL's NULL,
			// no comparison matches (NOT_EQUALS included).
			b.w(c.f.column, " <> ", c.f.zero(), " AND ")
		}
		b.compare(c, c.f.column, c.vk, false)
		b.w(")")
	}
}

// hopsTerm writes a Receipt Id term that matches the stream's own receipt
// id or any that an earlier hop gave one of its parts. NOT_EQUALS is the
// negation of EQUALS over both (and, like every condition on the field,
// false for a stream without a receipt id of its own), so a stream that
// holds the id in any part is not "not equal" to it.
//
// Both sources are one IN over a UNION ALL rather than an OR: PostgreSQL
// cannot use an index for "receipt_id = x OR id IN (...)" and walks every
// stream, where this form is two index lookups (SQLite manages either).
func (b *builder) hopsTerm(t term) {
	col := t.f.column
	if t.c == NotEquals {
		eq := t
		eq.c = Equals
		b.w("(", col, " <> ", t.f.zero(), " AND NOT ")
		b.hopsTerm(eq)
		b.w(")")
		return
	}
	b.w("streams.id IN (SELECT own.id FROM streams AS own WHERE own.", col, " <> ", t.f.zero(), " AND ")
	b.compare(t, "own."+col, t.vk, false)
	b.w(" UNION ALL SELECT stream_receipts.stream_id FROM stream_receipts WHERE ")
	b.compare(t, "stream_receipts.receipt_id", t.vk, false)
	b.w(")")
}

// InJSON is "expr IN (the elements of the JSON array bound at ph)": one
// parameter for a list of any length, so long lists (narrowing to many
// feeds, IN terms) never approach the engines' parameter limits.
func (d Dialect) InJSON(expr, ph string, integer bool) string {
	if d == Postgres {
		elem := "json_array_elements_text(" + ph + ")"
		if integer {
			elem = "(" + elem + ")::bigint"
		}
		return expr + " IN (SELECT " + elem + ")"
	}
	return expr + " IN (SELECT value FROM json_each(" + ph + "))"
}

// JSONList encodes a list for InJSON.
func JSONList[T string | int64](v []T) string {
	b, _ := json.Marshal(v) // strings and ints always encode
	return string(b)
}

// collate makes text ordering byte-wise on PostgreSQL, as it is on SQLite,
// instead of depending on the database's locale.
func (b *builder) collate(expr string) string {
	if b.d == Postgres {
		return expr + ` COLLATE "C"`
	}
	return expr
}

// compare writes the comparison of expr (a column, or an attribute's value)
// with the term's values. For attribute values compared as numbers, num is
// true and expr is already the guarded numeric expression.
func (b *builder) compare(t term, expr string, vk valueKind, num bool) {
	pt := pText
	if vk == valInt {
		pt = pBigint
	}
	val := func(i int) string {
		if vk == valInt {
			return b.param(t.ints[i], pt)
		}
		return b.param(t.strs[i], pt)
	}
	ordered := expr
	if vk != valInt && !num {
		ordered = b.collate(expr)
	}
	switch t.c {
	case Equals, NotEquals:
		if t.glob {
			not := ""
			if t.c == NotEquals {
				not = "NOT "
			}
			if b.d == Postgres {
				b.w(expr, " ", not, "LIKE ", b.param(likePattern(t.strs[0]), pText))
			} else {
				b.w(expr, " ", not, "GLOB ", b.param(globPattern(t.strs[0]), pText))
			}
			return
		}
		op := " = "
		if t.c == NotEquals {
			op = " <> "
		}
		b.w(expr, op, val(0))
	case GreaterThan:
		b.w(ordered, " > ", val(0))
	case GreaterThanOrEqualTo:
		b.w(ordered, " >= ", val(0))
	case LessThan:
		b.w(ordered, " < ", val(0))
	case LessThanOrEqualTo:
		b.w(ordered, " <= ", val(0))
	case Between:
		lo := val(0)
		b.w(ordered, " BETWEEN ", lo, " AND ", val(1))
	case In:
		if vk == valInt {
			b.w(b.d.InJSON(expr, b.param(JSONList(t.ints), pJSON), true))
		} else {
			b.w(b.d.InJSON(expr, b.param(JSONList(t.strs), pJSON), false))
		}
	case Contains:
		if b.d == Postgres {
			b.w("strpos(", expr, ", ", val(0), ") > 0")
		} else {
			b.w("instr(", expr, ", ", val(0), ") > 0")
		}
	case StartsWith:
		// substr and length count characters on both engines, as
		// RuneCountInString does for the (valid UTF-8) value.
		n := int64(utf8.RuneCountInString(t.strs[0]))
		b.w("substr(", expr, ", 1, ", b.param(n, pInt), ") = ", val(0))
	case EndsWith:
		// The length guard keeps the start position at 1 or more: the
		// engines disagree about what substr does with one below 1.
		n := int64(utf8.RuneCountInString(t.strs[0]))
		b.w("length(", expr, ") >= ", b.param(n, pInt), " AND substr(", expr, ", length(", expr, ") - ",
			b.param(n, pInt), " + 1) = ", val(0))
	case IsNull, IsNotNull:
		if t.f.alwaysSet {
			if t.c == IsNull {
				b.w("1 = 0")
			} else {
				b.w("1 = 1")
			}
			return
		}
		op := " = "
		if t.c == IsNotNull {
			op = " <> "
		}
		b.w(expr, op, t.f.zero())
	}
}

// attrTerm writes an attribute term: a (NOT) EXISTS over the stream's
// attributes JSON object, matching the name in any case. Match is the same
// condition in Go: keep the two in step.
func (b *builder) attrTerm(t term) {
	prefix := "EXISTS ("
	if t.c == IsNull {
		prefix = "NOT EXISTS ("
	}
	b.w(prefix)
	if b.d == Postgres {
		// json rather than jsonb: each row's text is only walked once, and
		// building a jsonb value first would cost more than it saves.
		b.w("SELECT 1 FROM json_each_text(streams.attributes::json) AS a")
	} else {
		b.w("SELECT 1 FROM json_each(streams.attributes) AS a")
	}
	// Names match with ASCII letters folded only, as attr.EqualName:
	// SQLite's lower() folds nothing else, PostgreSQL's does under
	// COLLATE "C" (under a locale it would fold Ä too, and still not the
	// long s, so the engines and Go would each match differently).
	if b.d == Postgres {
		b.w(` WHERE lower(a.key COLLATE "C") = lower(`, b.param(t.attr, pText), ` COLLATE "C")`)
	} else {
		b.w(" WHERE lower(a.key) = lower(", b.param(t.attr, pText), ")")
	}
	switch t.c {
	case IsNull, IsNotNull:
	default:
		b.w(" AND ")
		switch t.vk {
		case valInt:
			b.compare(t, b.attrNumber("a.value"), valInt, true)
		case valDate:
			b.w(b.attrIsDate("a.value"), " AND ")
			b.compare(t, "a.value", valDate, false)
		default:
			// Text, including a wildcard EQUALS or NOT_EQUALS (only from
			// ParseAttributes), which compare writes as GLOB or LIKE as it
			// does for Feed, so Where selects what Match does.
			b.compare(t, "a.value", valText, false)
		}
	}
	b.w(")")
}

// attrNumber is the attribute value as a number when it is a whole number
// of at most 18 characters (so it fits in 64 bits), else NULL, which no
// comparison matches. CASE guarantees PostgreSQL never casts other text.
func (b *builder) attrNumber(v string) string {
	if b.d == Postgres {
		return "(CASE WHEN " + v + " ~ '^-?[0-9]+$' AND length(" + v + ") <= 18 THEN " + v + "::bigint END)"
	}
	return "(CASE WHEN length(" + v + ") BETWEEN 1 AND 18 AND (" + v + " NOT GLOB '*[^0-9]*' OR (" + v +
		" GLOB '-[0-9]*' AND substr(" + v + ", 2) NOT GLOB '*[^0-9]*')) THEN CAST(" + v + " AS INTEGER) END)"
}

// attrIsDate is true when the attribute value is a date in weir's canonical
// layout, whose text order is time order.
func (b *builder) attrIsDate(v string) string {
	if b.d == Postgres {
		return v + ` ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'`
	}
	return v + " GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'"
}

// globPattern turns a value with '*' wildcards into an SQLite GLOB pattern
// (case-sensitive), every other character literal.
func globPattern(v string) string {
	var sb strings.Builder
	for _, r := range v {
		switch r {
		case '?':
			sb.WriteString("[?]")
		case '[':
			sb.WriteString("[[]")
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// likePattern turns a value with '*' wildcards into a PostgreSQL LIKE
// pattern (case-sensitive; backslash is LIKE's default escape).
func likePattern(v string) string {
	var sb strings.Builder
	for _, r := range v {
		switch r {
		case '*':
			sb.WriteByte('%')
		case '%', '_', '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// zero is the SQL literal of the field's "no value".
func (f field) zero() string {
	if f.kind == kindText {
		return "''"
	}
	return "0"
}
