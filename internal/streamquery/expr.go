// Package streamquery is the filter language for finding streams: the
// reference system's expression JSON (operators and terms over stream fields
// and attributes) validated into a typed tree, and compiled to a
// parameterised SQL condition on the streams table for SQLite or PostgreSQL.
//
// Validation happens once, in Parse, and says exactly what is wrong and
// where; a validated Expr always compiles. Values never become SQL text:
// every value is a bound parameter.
package streamquery

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/attr"
)

// ExpressionItem is one expression item as JSON: an operator combining
// child items, or a term comparing one field with a value, in the reference
// system's shape ({"type":"operator",...} / {"type":"term",...}).
type ExpressionItem struct {
	Type      string           `json:"type" enum:"operator,term" doc:"operator: combines children; term: one comparison"`
	Op        string           `json:"op,omitempty" enum:"AND,OR,NOT" doc:"Operators only: how the children combine (default AND). NOT negates the AND of its children."`
	Enabled   *bool            `json:"enabled,omitempty" doc:"false: the item is ignored, as if absent (default true)"`
	Children  []ExpressionItem `json:"children,omitempty" doc:"Operators only. An operator without enabled children places no condition."`
	Field     string           `json:"field,omitempty" doc:"Terms only: Id, Feed, Type, Status, Create Time, Effective Time, Status Time, Receipt Id, Parts, Raw Size, File Size, or attribute:<name> (attribute names match in any case). Receipt Id also matches the ids earlier hops (proxies) gave the stream's parts (their ReceiptIdPath), except in IS_NULL and IS_NOT_NULL"`
	Condition string           `json:"condition,omitempty" enum:"EQUALS,NOT_EQUALS,CONTAINS,STARTS_WITH,ENDS_WITH,GREATER_THAN,GREATER_THAN_OR_EQUAL_TO,LESS_THAN,LESS_THAN_OR_EQUAL_TO,BETWEEN,IN,IS_NULL,IS_NOT_NULL" doc:"Terms only"`
	Value     string           `json:"value,omitempty" doc:"Terms only. Dates as yyyy-MM-ddTHH:mm:ss.SSSZ (UTC) or epoch milliseconds; BETWEEN takes 'low,high' (inclusive); IN a comma-separated list; IS_NULL and IS_NOT_NULL none."`
}

// Condition is how a term compares its field with its value.
type Condition string

// The conditions. Text comparisons are case-sensitive and exact; only
// attribute names are matched in any case.
const (
	Equals               Condition = "EQUALS"
	NotEquals            Condition = "NOT_EQUALS"
	Contains             Condition = "CONTAINS"
	StartsWith           Condition = "STARTS_WITH"
	EndsWith             Condition = "ENDS_WITH"
	GreaterThan          Condition = "GREATER_THAN"
	GreaterThanOrEqualTo Condition = "GREATER_THAN_OR_EQUAL_TO"
	LessThan             Condition = "LESS_THAN"
	LessThanOrEqualTo    Condition = "LESS_THAN_OR_EQUAL_TO"
	Between              Condition = "BETWEEN"
	In                   Condition = "IN"
	IsNull               Condition = "IS_NULL"
	IsNotNull            Condition = "IS_NOT_NULL"
)

// Limits bound the work one expression can ask of the database and of
// this package: a client cannot send a deeply nested or enormous tree.
const (
	MaxDepth      = 16   // operator nesting
	MaxItems      = 500  // operators and terms together
	MaxListValues = 1000 // values of one IN term
	MaxValueBytes = 4096 // bytes of one term value (a whole IN list)
	MaxNameBytes  = 256  // bytes of an attribute name
)

// AttributePrefix starts a field that names an attribute.
const AttributePrefix = "attribute:"

// Error is an expression that is not valid. Path locates the item in the
// JSON, relative to the expression (e.g. "children[2].condition").
type Error struct {
	Path  string
	Msg   string
	Value any // the offending value, if any
}

func (e *Error) Error() string {
	if e.Path == "" {
		return "expression: " + e.Msg
	}
	return "expression." + e.Path + ": " + e.Msg
}

// kind is the type of a field's values, which decides its conditions.
type kind int

const (
	kindInt kind = iota
	kindDate
	kindText
	kindStatus
	kindAttr
)

// field is a queryable column of the streams table.
type field struct {
	name   string // canonical spelling
	column string
	kind   kind
	// emptyIsNull: the column's zero value ('' or 0) means "no value", so
	// IS_NULL and IS_NOT_NULL apply and no other condition matches it.
	emptyIsNull bool
	// alwaysSet: every stream has a value (weir sets it at receipt), and
	// the zero value is one like any other (0 is 1970-01-01). IS_NULL
	// (matching nothing) and IS_NOT_NULL (everything) are still accepted,
	// for queries written for the reference system, where it may be empty.
	alwaysSet bool
	// wildcard: EQUALS and NOT_EQUALS treat '*' in the value as "any
	// characters", as the reference system does for feed names (and
	// ParseAttributes for every attribute).
	wildcard bool
	// hops: the field also matches the receipt ids earlier hops gave the
	// stream's parts (table stream_receipts), except in IS_NULL and
	// IS_NOT_NULL, which ask about the stream's own.
	hops bool
}

// fieldNames lists the fixed fields, for error messages.
const fieldNames = "Id, Feed, Type, Status, Create Time, Effective Time, Status Time, Receipt Id, Parts, Raw Size, File Size"

// lookupField resolves a fixed field name in any case. It is a switch
// rather than a table so that the package holds no mutable state.
func lookupField(name string) (field, bool) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "id":
		return field{name: "Id", column: "id", kind: kindInt}, true
	case "feed":
		return field{name: "Feed", column: "feed", kind: kindText, wildcard: true}, true
	case "type":
		return field{name: "Type", column: "type", kind: kindText, emptyIsNull: true}, true
	case "status":
		return field{name: "Status", column: "status", kind: kindStatus}, true
	case "create time":
		return field{name: "Create Time", column: "create_ms", kind: kindDate}, true
	case "effective time":
		return field{name: "Effective Time", column: "effective_ms", kind: kindDate, alwaysSet: true}, true
	case "status time":
		return field{name: "Status Time", column: "status_ms", kind: kindDate}, true
	case "receipt id":
		return field{name: "Receipt Id", column: "receipt_id", kind: kindText, emptyIsNull: true, hops: true}, true
	case "parts":
		return field{name: "Parts", column: "parts", kind: kindInt}, true
	case "raw size":
		return field{name: "Raw Size", column: "raw_size", kind: kindInt}, true
	case "file size":
		return field{name: "File Size", column: "file_size", kind: kindInt}, true
	}
	return field{}, false
}

// conditionsFor lists the conditions a field accepts, in a stable order for
// error messages.
func conditionsFor(f field) []Condition {
	ordering := []Condition{GreaterThan, GreaterThanOrEqualTo, LessThan, LessThanOrEqualTo, Between}
	var cs []Condition
	switch f.kind {
	case kindInt, kindDate:
		cs = append([]Condition{Equals, NotEquals}, ordering...)
		cs = append(cs, In)
	case kindText:
		cs = []Condition{Equals, NotEquals, Contains, StartsWith, EndsWith, In}
	case kindStatus:
		cs = []Condition{Equals, NotEquals, In}
	case kindAttr:
		cs = []Condition{Equals, NotEquals, Contains, StartsWith, EndsWith}
		cs = append(cs, ordering...)
		cs = append(cs, In, IsNull, IsNotNull)
	}
	if f.emptyIsNull || f.alwaysSet {
		cs = append(cs, IsNull, IsNotNull)
	}
	return cs
}

func validCondition(c Condition) bool {
	switch c {
	case Equals, NotEquals, Contains, StartsWith, EndsWith, GreaterThan, GreaterThanOrEqualTo,
		LessThan, LessThanOrEqualTo, Between, In, IsNull, IsNotNull:
		return true
	}
	return false
}

// Expr is a validated expression. The zero value and nil match every stream.
type Expr struct {
	root  cond // nil: no condition
	terms int
}

// Terms is the number of enabled terms: 0 means the expression matches
// every stream.
func (e *Expr) Terms() int {
	if e == nil {
		return 0
	}
	return e.terms
}

// cond is a node of the validated tree.
type cond interface{ isCond() }

type junction struct {
	or   bool
	kids []cond
}

type negation struct{ kid cond }

// valueKind is how a term's values are typed once validated.
type valueKind int

const (
	valNone valueKind = iota
	valInt            // ints (ids, sizes, epoch ms of dates; attribute numbers)
	valText           // strs
	valDate           // attribute compared as canonical date text (strs hold DateLayout)
)

type term struct {
	f    field
	attr string // attribute name as given (kindAttr)
	c    Condition
	vk   valueKind
	ints []int64
	strs []string
	// glob: the single text value is a wildcard pattern (Feed EQUALS x*).
	glob bool
	// For Match, built once at parse time rather than on every post: an
	// attribute glob's value split at each '*' (two or more parts), and an
	// attribute IN list of more than inSetMin values as a set.
	parts []string
	set   map[string]struct{}
}

func (junction) isCond() {}
func (negation) isCond() {}
func (term) isCond()     {}

// ParseJSON decodes and validates an expression. Empty input or JSON null
// is the expression that matches everything.
func ParseJSON(b []byte) (*Expr, error) {
	return parseJSON(b, false)
}

// Parse validates an expression tree. nil matches everything. Errors are
// *Error.
func Parse(n *ExpressionItem) (*Expr, error) {
	return parse(n, false)
}

// ParseAttributesJSON is ParseAttributes of JSON (empty or null: matches
// everything).
func ParseAttributesJSON(b []byte) (*Expr, error) {
	return parseJSON(b, true)
}

// ParseAttributes validates an expression in which every field names an
// attribute of a post ("attribute:" before the name is allowed and
// ignored), for Match. EQUALS and NOT_EQUALS treat '*' in the value as
// "any characters" (as Feed does in stream queries). Errors are *Error, as
// Parse's.
//
// The names of the fixed stream fields mean nothing special here: "Feed" is
// the attribute Feed. The result also compiles with Where, to the same
// selection as Match makes (given a get that folds names as the engine's
// lower() does: SQLite's folds ASCII letters only).
func ParseAttributes(n *ExpressionItem) (*Expr, error) {
	return parse(n, true)
}

func parseJSON(b []byte, attrs bool) (*Expr, error) {
	if s := strings.TrimSpace(string(b)); s == "" || s == "null" {
		return &Expr{}, nil
	}
	var n ExpressionItem
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, &Error{Msg: "not a valid expression: " + err.Error()}
	}
	return parse(&n, attrs)
}

func parse(n *ExpressionItem, attrs bool) (*Expr, error) {
	if n == nil {
		return &Expr{}, nil
	}
	p := parser{attrs: attrs}
	c, err := p.node(n, "", 0)
	if err != nil {
		return nil, err
	}
	return &Expr{root: c, terms: countTerms(c)}, nil
}

func countTerms(c cond) int {
	switch c := c.(type) {
	case junction:
		n := 0
		for _, k := range c.kids {
			n += countTerms(k)
		}
		return n
	case negation:
		return countTerms(c.kid)
	case term:
		return 1
	}
	return 0
}

type parser struct {
	items int
	// attrs: every field names an attribute (ParseAttributes).
	attrs bool
}

func join(path, elem string) string {
	if path == "" {
		return elem
	}
	return path + "." + elem
}

func (p *parser) node(n *ExpressionItem, path string, depth int) (cond, error) {
	p.items++
	if p.items > MaxItems {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("the expression has more than %d items", MaxItems)}
	}
	switch n.Type {
	case "operator":
		return p.operator(n, path, depth)
	case "term":
		if len(n.Children) > 0 || n.Op != "" {
			return nil, &Error{Path: path, Msg: "a term has no op or children (did you mean type operator?)"}
		}
		t, err := parseTerm(n, path, p.attrs)
		if err != nil {
			return nil, err
		}
		if n.Enabled != nil && !*n.Enabled {
			// Validated all the same: a client should learn of a mistake
			// before it enables the item.
			return nil, nil
		}
		return t, nil
	case "":
		return nil, &Error{Path: join(path, "type"), Msg: `missing: say "operator" or "term"`}
	}
	return nil, &Error{Path: join(path, "type"), Msg: `must be "operator" or "term"`, Value: n.Type}
}

func (p *parser) operator(n *ExpressionItem, path string, depth int) (cond, error) {
	if depth >= MaxDepth {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("operators are nested more than %d deep", MaxDepth)}
	}
	if n.Field != "" || n.Condition != "" || n.Value != "" {
		return nil, &Error{Path: path, Msg: "an operator has no field, condition or value (did you mean type term?)"}
	}
	op := n.Op
	switch op {
	case "", "AND", "OR", "NOT":
	default:
		return nil, &Error{Path: join(path, "op"), Msg: "must be AND, OR or NOT", Value: op}
	}
	var kids []cond
	for i := range n.Children {
		c, err := p.node(&n.Children[i], join(path, "children["+strconv.Itoa(i)+"]"), depth+1)
		if err != nil {
			return nil, err
		}
		if c != nil {
			kids = append(kids, c)
		}
	}
	// A disabled operator is validated like the rest but then dropped.
	if n.Enabled != nil && !*n.Enabled || len(kids) == 0 {
		// As in the reference system, an operator with nothing in it places
		// no condition, whatever its op.
		return nil, nil
	}
	switch op {
	case "NOT":
		if len(kids) == 1 {
			return negation{kid: kids[0]}, nil
		}
		return negation{kid: junction{kids: kids}}, nil
	case "OR":
		if len(kids) == 1 {
			return kids[0], nil
		}
		return junction{or: true, kids: kids}, nil
	}
	if len(kids) == 1 {
		return kids[0], nil
	}
	return junction{kids: kids}, nil
}

// parseTerm validates a term. With attrs (ParseAttributes), every field is
// an attribute name, with or without AttributePrefix, and an EQUALS or
// NOT_EQUALS value with '*' in it is a wildcard pattern.
func parseTerm(n *ExpressionItem, path string, attrs bool) (term, error) {
	var t term
	name := n.Field
	prefixed := len(name) >= len(AttributePrefix) && strings.EqualFold(name[:len(AttributePrefix)], AttributePrefix)
	switch {
	case name == "" && attrs:
		return t, &Error{Path: join(path, "field"), Msg: "missing: a term needs a field (the name of an attribute)"}
	case name == "":
		return t, &Error{Path: join(path, "field"), Msg: "missing: a term needs a field (" + fieldNames + ", or " + AttributePrefix + "<name>)"}
	case prefixed || attrs:
		a := name
		if prefixed {
			a = name[len(AttributePrefix):]
		}
		a = strings.TrimSpace(a)
		switch {
		case a == "" && prefixed:
			return t, &Error{Path: join(path, "field"), Msg: "the attribute name after " + AttributePrefix + " is empty", Value: name}
		case a == "":
			return t, &Error{Path: join(path, "field"), Msg: "the attribute name is empty", Value: name}
		case len(a) > MaxNameBytes:
			return t, &Error{Path: join(path, "field"), Msg: fmt.Sprintf("the attribute name is longer than %d bytes", MaxNameBytes)}
		case !utf8.ValidString(a):
			return t, &Error{Path: join(path, "field"), Msg: "the attribute name is not valid UTF-8"}
		}
		t.f = field{name: AttributePrefix + a, kind: kindAttr, wildcard: attrs}
		t.attr = a
	default:
		f, ok := lookupField(name)
		if !ok {
			return t, &Error{Path: join(path, "field"), Value: name,
				Msg: fmt.Sprintf("unknown field %q: fields are %s, or %s<name> for an attribute", name, fieldNames, AttributePrefix)}
		}
		t.f = f
	}

	t.c = Condition(n.Condition)
	if t.c == "" {
		return t, &Error{Path: join(path, "condition"), Msg: "missing: a term needs a condition"}
	}
	if !validCondition(t.c) {
		return t, &Error{Path: join(path, "condition"), Value: n.Condition, Msg: fmt.Sprintf("unknown condition %q", n.Condition)}
	}
	allowed := conditionsFor(t.f)
	ok := false
	for _, c := range allowed {
		ok = ok || c == t.c
	}
	if !ok {
		names := make([]string, len(allowed))
		for i, c := range allowed {
			names[i] = string(c)
		}
		return t, &Error{Path: join(path, "condition"), Value: n.Condition,
			Msg: fmt.Sprintf("%s is not a condition of field %s; it takes %s", t.c, t.f.name, strings.Join(names, ", "))}
	}
	if err := t.values(n.Value); err != nil {
		err.Path = join(path, "value")
		if err.Value == nil {
			err.Value = n.Value
		}
		return t, err
	}
	return t, nil
}

// values parses and types the term's value for its field and condition.
func (t *term) values(v string) *Error {
	if len(v) > MaxValueBytes {
		return &Error{Msg: fmt.Sprintf("the value is longer than %d bytes", MaxValueBytes), Value: v[:64] + "..."}
	}
	if !utf8.ValidString(v) {
		return &Error{Msg: "the value is not valid UTF-8"}
	}
	var raw []string
	switch t.c {
	case IsNull, IsNotNull:
		if v != "" {
			return &Error{Msg: string(t.c) + " takes no value"}
		}
		return nil
	case Between:
		raw = strings.Split(v, ",")
		if len(raw) != 2 {
			return &Error{Msg: "BETWEEN takes two values separated by a comma, low,high (both inclusive)"}
		}
		raw[0], raw[1] = strings.TrimSpace(raw[0]), strings.TrimSpace(raw[1])
	case In:
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				raw = append(raw, s)
			}
		}
		if len(raw) == 0 {
			return &Error{Msg: "IN takes a comma-separated list of at least one value"}
		}
		if len(raw) > MaxListValues {
			return &Error{Msg: fmt.Sprintf("IN takes at most %d values", MaxListValues)}
		}
	default:
		if v == "" && t.f.kind != kindAttr {
			// A stream's own fields never hold an empty value, so the term
			// would match nothing (or, with CONTAINS, everything): a term
			// left blank by mistake. An attribute may be present and
			// empty, and such a term asks for that.
			msg := fmt.Sprintf("%s takes a value", t.c)
			if slices.Contains(conditionsFor(t.f), IsNull) {
				msg += fmt.Sprintf("; to find streams without %s use IS_NULL", t.f.name)
			}
			return &Error{Msg: msg}
		}
		raw = []string{v}
	}

	switch t.f.kind {
	case kindInt:
		t.vk = valInt
		for _, s := range raw {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return &Error{Msg: fmt.Sprintf("%s takes whole numbers; %q is not one", t.f.name, s)}
			}
			t.ints = append(t.ints, n)
		}
	case kindDate:
		t.vk = valInt
		for _, s := range raw {
			tm, err := attr.ParseTime(strings.TrimSpace(s))
			if err != nil {
				return &Error{Msg: fmt.Sprintf("%s takes dates like 2024-03-01T12:34:56.789Z: %v", t.f.name, err)}
			}
			if err := wholeMillis(t.f.name, s, tm); err != nil {
				return err
			}
			t.ints = append(t.ints, tm.UnixMilli())
		}
	case kindStatus:
		t.vk = valText
		for _, s := range raw {
			st, ok := parseStatus(s)
			if !ok {
				return &Error{Msg: fmt.Sprintf("Status is one of Unlocked, Locked, Deleted; %q is not", s)}
			}
			t.strs = append(t.strs, st)
		}
	case kindText:
		t.vk = valText
		t.strs = raw
		t.glob = t.f.wildcard && (t.c == Equals || t.c == NotEquals) && strings.Contains(v, "*")
	case kindAttr:
		if err := t.attrValues(raw); err != nil {
			return err
		}
		t.glob = t.f.wildcard && (t.c == Equals || t.c == NotEquals) && strings.Contains(v, "*")
		if t.glob {
			t.parts = strings.Split(v, "*")
		}
		if t.c == In && len(raw) > inSetMin {
			t.set = make(map[string]struct{}, len(raw))
			for _, s := range raw {
				t.set[s] = struct{}{}
			}
		}
	}
	if t.c == Between && t.vk == valInt && t.ints[0] > t.ints[1] {
		return &Error{Msg: "BETWEEN's low value is above its high value"}
	}
	return nil
}

// attrValues types an attribute term's values. Attribute values are text,
// so equality and text matching compare text; the ordering conditions
// compare numbers when the value is a whole number, dates when it is a
// date, and text (byte order) otherwise.
func (t *term) attrValues(raw []string) *Error {
	t.vk = valText
	t.strs = raw
	switch t.c {
	case GreaterThan, GreaterThanOrEqualTo, LessThan, LessThanOrEqualTo, Between:
	default:
		return nil
	}
	ints := make([]int64, 0, len(raw))
	for _, s := range raw {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || !attrIntText(s) {
			break
		}
		ints = append(ints, n)
	}
	if len(ints) == len(raw) {
		t.vk, t.ints, t.strs = valInt, ints, nil
		return nil
	}
	times := make([]time.Time, 0, len(raw))
	for _, s := range raw {
		tm, err := attr.ParseTime(s)
		if err != nil || allDigits(s) {
			break
		}
		times = append(times, tm)
	}
	if len(times) < len(raw) {
		// Not every value is a date: they are all compared as text, a
		// date finer than a millisecond too.
		return nil
	}
	dates := make([]string, len(raw))
	for i, tm := range times {
		if err := wholeMillis(t.f.name, raw[i], tm); err != nil {
			return err
		}
		dates[i] = attr.FormatTime(tm)
	}
	t.vk, t.strs = valDate, dates
	return nil
}

// wholeMillis refuses a date finer than a millisecond: dates are stored
// and compared to the millisecond, and cutting the rest off would make
// GREATER_THAN_OR_EQUAL_TO, LESS_THAN and EQUALS answer wrongly (a stream
// at .000 is not at or after .0005).
func wholeMillis(field, s string, tm time.Time) *Error {
	if tm.Nanosecond()%int(time.Millisecond) == 0 {
		return nil
	}
	return &Error{Msg: fmt.Sprintf("%s: dates are compared to the millisecond; %q is finer (give at most three digits after the seconds)", field, s)}
}

// attrIntText reports whether s has the shape the SQL side treats as a
// number in an attribute: an optional minus and at most 18 characters of
// digits in all, so it always fits in 64 bits.
func attrIntText(s string) bool {
	d := strings.TrimPrefix(s, "-")
	return len(s) <= 18 && allDigits(d)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseStatus accepts the reference system's display values (Unlocked) and
// weir's stored ones (UNLOCKED), in any case.
func parseStatus(s string) (string, bool) {
	switch u := strings.ToUpper(strings.TrimSpace(s)); u {
	case "UNLOCKED", "LOCKED", "DELETED":
		return u, true
	}
	return "", false
}
