package streamquery

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseAttributesValid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		json  string
		terms int
		glob  bool // of the single term, when terms is 1
	}{
		{"null", `null`, 0, false},
		{"empty", ``, 0, false},
		{"empty operator", op("OR"), 0, false},
		{"bare name", term_("System", "EQUALS", "x"), 1, false},
		{"prefixed name", term_("Attribute:System", "IS_NULL", ""), 1, false},
		{"fixed field name is an attribute", term_("Feed", "GREATER_THAN", "A"), 1, false},
		{"fixed field with attribute-only condition", term_("Create Time", "IS_NULL", ""), 1, false},
		{"name trimmed", term_("  UploadUserId ", "EQUALS", "u"), 1, false},
		{"wildcard equals", term_("Feed", "EQUALS", "FEED-*"), 1, true},
		{"wildcard not equals", term_("x", "NOT_EQUALS", "*"), 1, true},
		{"star in contains is literal", term_("x", "CONTAINS", "*"), 1, false},
		{"star in in is literal", term_("x", "IN", "a*,b"), 1, false},
		{"number", term_("n", "BETWEEN", "-5, 10"), 1, false},
		{"date", term_("When", "LESS_THAN", "2024-01-01T00:00:00Z"), 1, false},
		{"disabled term dropped", op("AND", term_("a", "EQUALS", "1"),
			`{"type":"term","enabled":false,"field":"b","condition":"EQUALS","value":"2"}`), 1, false},
		{"not of two", op("NOT", term_("a", "EQUALS", "1"), term_("b", "EQUALS", "2")), 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := ParseAttributesJSON([]byte(tc.json))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if e.Terms() != tc.terms {
				t.Fatalf("terms %d, want %d", e.Terms(), tc.terms)
			}
			if tm, ok := e.root.(term); ok {
				if tm.f.kind != kindAttr || tm.glob != tc.glob {
					t.Fatalf("kind %v glob %v, want an attribute term with glob %v", tm.f.kind, tm.glob, tc.glob)
				}
			}
		})
	}
	// The same JSON through Parse keeps its stream-field meaning and no
	// attribute wildcard.
	e, err := ParseJSON([]byte(term_("attribute:x", "EQUALS", "a*")))
	if err != nil || e.root.(term).glob {
		t.Fatalf("Parse made an attribute wildcard: %v", err)
	}
	if e, err := ParseJSON([]byte(term_("Feed", "EQUALS", "a"))); err != nil || e.root.(term).f.kind != kindText {
		t.Fatalf("Parse of Feed: %v", err)
	}
	if e, err := ParseAttributes(nil); err != nil || e.Terms() != 0 {
		t.Fatalf("nil: %v", err)
	}
}

func TestParseAttributesErrors(t *testing.T) {
	deep := term_("a", "EQUALS", "1")
	for range MaxDepth + 1 {
		deep = op("AND", deep)
	}
	many := make([]string, MaxItems)
	for i := range many {
		many[i] = term_("a", "EQUALS", strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name, json, path, msg string
	}{
		{"bad json", `{"type":`, "", "not a valid expression"},
		{"no type", `{"field":"a"}`, "type", "missing"},
		{"bad op", `{"type":"operator","op":"XOR"}`, "op", "AND, OR or NOT"},
		{"no field", `{"type":"term","condition":"EQUALS","value":"1"}`, "field", "the name of an attribute"},
		{"blank field", term_("  ", "EQUALS", "x"), "field", "the attribute name is empty"},
		{"empty after prefix", term_("attribute: ", "EQUALS", "x"), "field", "after attribute: is empty"},
		{"long name", term_(strings.Repeat("n", MaxNameBytes+1), "EQUALS", "x"), "field", "longer than"},
		{"no condition", `{"type":"term","field":"a","value":"1"}`, "condition", "needs a condition"},
		{"unknown condition", term_("a", "LIKE", "1"), "condition", `unknown condition "LIKE"`},
		{"null with value", term_("Feed", "IS_NULL", "y"), "value", "takes no value"},
		{"between one", term_("a", "BETWEEN", "5"), "value", "two values"},
		{"between reversed numbers", term_("a", "BETWEEN", "9,1"), "value", "low value is above"},
		{"empty in", term_("a", "IN", " , "), "value", "at least one"},
		{"long in", term_("a", "IN", strings.Repeat("1,", MaxListValues+1)), "value", "at most"},
		{"long value", term_("a", "EQUALS", strings.Repeat("x", MaxValueBytes+1)), "value", "longer than"},
		{"nested path", op("AND", term_("a", "EQUALS", "1"), op("OR", term_("b", "EQUALS", "A"), term_("c", "BETWEEN", "x"))),
			"children[1].children[1].value", "two values"},
		{"disabled still validated", `{"type":"operator","enabled":false,"children":[` + term_("", "EQUALS", "1") + `]}`,
			"children[0].field", "missing"},
		{"too deep", deep, strings.Repeat(".children[0]", MaxDepth)[1:], "nested more than"},
		{"too many", op("OR", many...), "children[499]", "more than 500 items"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAttributesJSON([]byte(tc.json))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if e.Path != tc.path || !strings.Contains(e.Msg, tc.msg) {
				t.Fatalf("error at %q: %q; want at %q containing %q", e.Path, e.Msg, tc.path, tc.msg)
			}
		})
	}
	// Not expressible in JSON, which decodes bad UTF-8 as U+FFFD.
	_, err := ParseAttributes(&ExpressionItem{Type: "term", Field: "a\xff", Condition: "EQUALS", Value: "x"})
	if e := (*Error)(nil); !errors.As(err, &e) || e.Path != "field" || !strings.Contains(e.Msg, "UTF-8") {
		t.Fatalf("bad UTF-8 name: %v", err)
	}
}

// post is a get function over name/value pairs, names in any case.
func post(kv ...string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := 0; i < len(kv); i += 2 {
			if strings.EqualFold(kv[i], name) {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

func TestMatch(t *testing.T) {
	none := post()
	for _, tc := range []struct {
		expr string
		post func(string) (string, bool)
		want bool
	}{
		// Nothing to match: everything matches.
		{``, none, true},
		{op("AND"), none, true},
		{`{"type":"operator","op":"NOT","children":[{"type":"term","enabled":false,"field":"a","condition":"IS_NULL"}]}`, none, true},

		// Names in any case, through get; a fixed field name is an attribute.
		{term_("system", "EQUALS", "alpha"), post("SYSTEM", "alpha"), true},
		{term_("attribute:SyStEm", "EQUALS", "alpha"), post("system", "alpha"), true},
		{term_("Feed", "EQUALS", "F"), post("feed", "F"), true},
		{term_("Feed", "EQUALS", "F"), none, false},

		// Absent: only IS_NULL holds, NOT_EQUALS included.
		{term_("a", "IS_NULL", ""), none, true},
		{term_("a", "IS_NULL", ""), post("a", ""), false},
		{term_("a", "IS_NOT_NULL", ""), post("a", ""), true},
		{term_("a", "IS_NOT_NULL", ""), none, false},
		{term_("a", "NOT_EQUALS", "x"), none, false},
		{term_("a", "CONTAINS", ""), none, false},
		{term_("a", "LESS_THAN", "5"), none, false},
		{term_("a", "IN", "x"), none, false},
		{op("NOT", term_("a", "EQUALS", "x")), none, true},

		// Text: exact and case-sensitive.
		{term_("a", "EQUALS", "Alpha"), post("a", "Alpha"), true},
		{term_("a", "EQUALS", "alpha"), post("a", "Alpha"), false},
		{term_("a", "EQUALS", ""), post("a", ""), true},
		{term_("a", "NOT_EQUALS", "alpha"), post("a", "Alpha"), true},
		{term_("a", "NOT_EQUALS", "Alpha"), post("a", "Alpha"), false},
		{term_("a", "CONTAINS", "ph"), post("a", "Alpha"), true},
		{term_("a", "CONTAINS", "PH"), post("a", "Alpha"), false},
		{term_("a", "CONTAINS", ""), post("a", ""), true},
		{term_("a", "STARTS_WITH", "Al"), post("a", "Alpha"), true},
		{term_("a", "STARTS_WITH", "al"), post("a", "Alpha"), false},
		{term_("a", "STARTS_WITH", "Alphabet"), post("a", "Alpha"), false},
		{term_("a", "ENDS_WITH", "ha"), post("a", "Alpha"), true},
		{term_("a", "ENDS_WITH", "Ha"), post("a", "Alpha"), false},
		{term_("a", "ENDS_WITH", "ßü"), post("a", "großßü"), true},
		{term_("a", "IN", "beta, Alpha"), post("a", "Alpha"), true},
		{term_("a", "IN", "beta,alpha"), post("a", "Alpha"), false},
		{term_("a", "IN", "v1,v2,v3,v4,v5,v6,v7,v8,v9,v10"), post("a", "v9"), true}, // as a set
		{term_("a", "IN", "v1,v2,v3,v4,v5,v6,v7,v8,v9,v10"), post("a", "v11"), false},
		// ... and ordered byte-wise when the term's value is not a number
		// or a date.
		{term_("a", "GREATER_THAN", "B"), post("a", "a"), true},
		{term_("a", "LESS_THAN", "b"), post("a", "B"), true},
		{term_("a", "GREATER_THAN", "z"), post("a", "é"), true},
		{term_("a", "GREATER_THAN_OR_EQUAL_TO", "abc"), post("a", "abc"), true},
		{term_("a", "LESS_THAN_OR_EQUAL_TO", "abc"), post("a", "abd"), false},
		{term_("a", "BETWEEN", "b,d"), post("a", "d"), true},
		{term_("a", "BETWEEN", "b,d"), post("a", "da"), false},
		{term_("a", "BETWEEN", "d,b"), post("a", "c"), false}, // reversed text: nothing
		// A date with a text value: both text, a date finer than a
		// millisecond too (refused only where it would be compared as a date).
		{term_("a", "BETWEEN", "2024-01-01T00:00:02.0005Z,zzz"), post("a", "2024-01-01T00:00:02.0005Zz"), true},
		{term_("a", "BETWEEN", "2024-01-01T00:00:02.0005Z,zzz"), post("a", "2024-01-01T00:00:02.0004Z"), false},
		{term_("a", "GREATER_THAN", "10x"), post("a", "9"), true},

		// Numbers when every value is one: the attribute too must be one.
		{term_("n", "GREATER_THAN", "4"), post("n", "40"), true},
		{term_("n", "LESS_THAN", "5"), post("n", "40"), false},
		{term_("n", "LESS_THAN", "0"), post("n", "-3"), true},
		{term_("n", "GREATER_THAN_OR_EQUAL_TO", "7"), post("n", "007"), true},
		{term_("n", "LESS_THAN_OR_EQUAL_TO", "-0"), post("n", "0"), true},
		{term_("n", "BETWEEN", "-5, 5"), post("n", "-5"), true},
		{term_("n", "BETWEEN", "-5, 5"), post("n", "5"), true},
		{term_("n", "BETWEEN", "-5, 5"), post("n", "6"), false},
		{term_("n", "GREATER_THAN", "0"), post("n", "abc"), false},
		{term_("n", "LESS_THAN", "0"), post("n", "abc"), false},
		{term_("n", "GREATER_THAN", "0"), post("n", ""), false},
		{term_("n", "GREATER_THAN", "0"), post("n", "+5"), false},
		{term_("n", "GREATER_THAN", "0"), post("n", " 5"), false},
		{term_("n", "GREATER_THAN", "0"), post("n", "5.0"), false},
		{term_("n", "GREATER_THAN", "-10"), post("n", "-"), false},
		{term_("n", "GREATER_THAN", "0"), post("n", "123456789012345678"), true},   // 18 characters
		{term_("n", "GREATER_THAN", "0"), post("n", "1234567890123456789"), false}, // 19: not a number
		{term_("n", "LESS_THAN", "0"), post("n", "-12345678901234567"), true},
		{term_("n", "LESS_THAN", "0"), post("n", "-123456789012345678"), false},
		{term_("n", "GREATER_THAN", "0"), post("n", "١٢"), false}, // other scripts' digits are not
		// A 19-digit term value is text.
		{term_("n", "GREATER_THAN", "1234567890123456789"), post("n", "2"), true},
		// Equality is text even for numbers.
		{term_("n", "EQUALS", "7"), post("n", "007"), false},
		{term_("n", "IN", "7,8"), post("n", "07"), false},

		// Dates when every value is one: the attribute must have the
		// canonical layout, and compares as its text.
		{term_("d", "LESS_THAN", "2024-01-01T00:00:00Z"), post("d", "2023-06-01T00:00:00.000Z"), true},
		{term_("d", "LESS_THAN", "2024-01-01T00:00:00Z"), post("d", "2023-06-01T00:00:00Z"), false},
		{term_("d", "LESS_THAN", "2024-01-01T00:00:00Z"), post("d", "2023-06-01T00:00:00.000z"), false},
		{term_("d", "LESS_THAN", "2024-01-01T00:00:00Z"), post("d", "2023-06-01 00:00:00.000Z"), false},
		{term_("d", "LESS_THAN", "2024-01-01T00:00:00Z"), post("d", "1999"), false},
		{term_("d", "GREATER_THAN", "2024-01-01T01:00:00+01:00"), post("d", "2024-01-01T00:00:00.001Z"), true},
		{term_("d", "GREATER_THAN_OR_EQUAL_TO", "2024-01-01T00:00:00.000Z"), post("d", "2024-01-01T00:00:00.000Z"), true},
		{term_("d", "LESS_THAN_OR_EQUAL_TO", "2024-01-01T00:00:00.000Z"), post("d", "2024-01-01T00:00:00.001Z"), false},
		{term_("d", "BETWEEN", "2023-01-01T00:00:00Z,2024-12-31T00:00:00Z"), post("d", "2024-12-31T00:00:00.000Z"), true},
		{term_("d", "BETWEEN", "2023-01-01T00:00:00Z,2024-12-31T00:00:00Z"), post("d", "2025-01-01T00:00:00.000Z"), false},
		{term_("d", "GREATER_THAN", "2024-01-01T00:00:00Z"), post("d", "9999-99-99T99:99:99.999Z"), true}, // shape, not calendar

		// Wildcards: '*' is any run, empty included; the rest is literal.
		{term_("f", "EQUALS", "*"), post("f", ""), true},
		{term_("f", "EQUALS", "*"), post("f", "anything"), true},
		{term_("f", "EQUALS", "*"), none, false},
		{term_("f", "EQUALS", "**"), post("f", "x"), true},
		{term_("f", "EQUALS", "FEED-*"), post("f", "FEED-"), true},
		{term_("f", "EQUALS", "FEED-*"), post("f", "FEED-A"), true},
		{term_("f", "EQUALS", "FEED-*"), post("f", "feed-A"), false},
		{term_("f", "EQUALS", "FEED-*"), post("f", "XFEED-A"), false},
		{term_("f", "EQUALS", "*-B"), post("f", "FEED-B"), true},
		{term_("f", "EQUALS", "*-B"), post("f", "FEED-BX"), false},
		{term_("f", "EQUALS", "A*B"), post("f", "AB"), true},
		{term_("f", "EQUALS", "A*B"), post("f", "AxxB"), true},
		{term_("f", "EQUALS", "A*B"), post("f", "A"), false},
		{term_("f", "EQUALS", "AB*BA"), post("f", "ABA"), false}, // prefix and suffix may not overlap
		{term_("f", "EQUALS", "AB*BA"), post("f", "ABBA"), true},
		{term_("f", "EQUALS", "*a*b*"), post("f", "xaxbx"), true},
		{term_("f", "EQUALS", "*a*b*"), post("f", "xbxax"), false},
		{term_("f", "EQUALS", "a*ab*b"), post("f", "aaabbb"), true},
		{term_("f", "EQUALS", "a*ab*b"), post("f", "aabb"), true},
		{term_("f", "EQUALS", "a*ab*b"), post("f", "abab"), false},
		{term_("f", "EQUALS", "ü*ß"), post("f", "üxyzß"), true},
		{term_("f", "EQUALS", "FEED-?*"), post("f", "FEED-?1"), true},
		{term_("f", "EQUALS", "FEED-?*"), post("f", "FEED-A1"), false},
		{term_("f", "EQUALS", "[ab]*"), post("f", "[ab]x"), true},
		{term_("f", "EQUALS", "[ab]*"), post("f", "ax"), false},
		{term_("f", "EQUALS", "%_\\*"), post("f", "%_\\x"), true},
		{term_("f", "EQUALS", "%_\\*"), post("f", "a_\\x"), false},
		{term_("f", "EQUALS", "x?y"), post("f", "x?y"), true}, // no '*': exact
		{term_("f", "EQUALS", "x?y"), post("f", "xay"), false},
		{term_("f", "NOT_EQUALS", "FEED-*"), post("f", "FEED-A"), false},
		{term_("f", "NOT_EQUALS", "FEED-*"), post("f", "OTHER"), true},
		{term_("f", "NOT_EQUALS", "FEED-*"), none, false},
		{term_("f", "CONTAINS", "*"), post("f", "a*b"), true},
		{term_("f", "CONTAINS", "*"), post("f", "ab"), false},
		{term_("f", "STARTS_WITH", "a*"), post("f", "abc"), false},
		{term_("f", "IN", "a*"), post("f", "abc"), false},

		// Operators.
		{op("NOT", term_("a", "EQUALS", "1")), post("a", "1"), false},
		{op("NOT", term_("a", "EQUALS", "1")), post("a", "2"), true},
		{op("NOT", term_("a", "EQUALS", "1"), term_("b", "EQUALS", "2")), post("a", "1", "b", "2"), false},
		{op("NOT", term_("a", "EQUALS", "1"), term_("b", "EQUALS", "2")), post("a", "1"), true},
		{op("AND", term_("a", "EQUALS", "1"), term_("b", "IS_NULL", "")), post("a", "1"), true},
		{op("AND", term_("a", "EQUALS", "1"), term_("b", "IS_NULL", "")), post("a", "1", "b", ""), false},
		{op("OR", term_("a", "EQUALS", "1"), term_("b", "EQUALS", "2")), post("b", "2"), true},
		{op("OR", term_("a", "EQUALS", "1"), term_("b", "EQUALS", "2")), post("a", "2", "b", "1"), false},
		{op("OR", op("AND", term_("feed", "EQUALS", "A*"), term_("n", "GREATER_THAN", "10")),
			op("NOT", op("OR", term_("type", "IS_NOT_NULL", ""), term_("n", "LESS_THAN", "0")))), post("feed", "AB", "n", "11"), true},
		{op("OR", op("AND", term_("feed", "EQUALS", "A*"), term_("n", "GREATER_THAN", "10")),
			op("NOT", op("OR", term_("type", "IS_NOT_NULL", ""), term_("n", "LESS_THAN", "0")))), post("feed", "AB", "n", "9"), true},
		{op("OR", op("AND", term_("feed", "EQUALS", "A*"), term_("n", "GREATER_THAN", "10")),
			op("NOT", op("OR", term_("type", "IS_NOT_NULL", ""), term_("n", "LESS_THAN", "0")))), post("feed", "AB", "n", "-1"), false},
		// Disabled items are absent.
		{op("AND", term_("a", "EQUALS", "1"), `{"type":"term","enabled":false,"field":"a","condition":"EQUALS","value":"2"}`),
			post("a", "1"), true},
		{`{"type":"operator","enabled":false,"children":[` + term_("a", "EQUALS", "2") + `]}`, post("a", "1"), true},
		{op("OR", term_("a", "EQUALS", "2"), `{"type":"operator","op":"NOT","enabled":false,"children":[`+term_("a", "EQUALS", "2")+`]}`),
			post("a", "1"), false},
	} {
		e, err := ParseAttributesJSON([]byte(tc.expr))
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if got := e.Match(tc.post); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.expr, got, tc.want)
		}
	}
	if !(*Expr)(nil).Match(none) {
		t.Error("nil expression does not match")
	}
}

// TestMatchParsed: Match on an expression from Parse evaluates its
// attribute terms as well, and a stream field term matches nothing.
func TestMatchParsed(t *testing.T) {
	e, err := ParseJSON([]byte(op("OR", term_("attribute:a", "EQUALS", "x*"), term_("Feed", "EQUALS", "F"))))
	if err != nil {
		t.Fatal(err)
	}
	if e.Match(post("a", "xy", "Feed", "F")) || !e.Match(post("a", "x*")) {
		t.Fatal("wrong")
	}
}

func TestMatchAllocs(t *testing.T) {
	e, err := ParseAttributesJSON([]byte(op("AND",
		term_("feed", "EQUALS", "FEED-*-X*"), term_("n", "BETWEEN", "1,100"), term_("d", "GREATER_THAN", "2024-01-01T00:00:00Z"),
		term_("s", "IN", "a,b,c,d,e,f,g,h,i,j"), op("NOT", term_("s", "CONTAINS", "zz"), term_("q", "IS_NOT_NULL", "")))))
	if err != nil {
		t.Fatal(err)
	}
	get := post("Feed", "FEED-1-Xy", "N", "42", "D", "2024-06-01T00:00:00.000Z", "S", "j")
	if !e.Match(get) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(100, func() { e.Match(get) }); n != 0 {
		t.Fatalf("Match allocates %v times per call", n)
	}
}

// TestWhereAttributeGlob: a wildcard from ParseAttributes compiles as the
// Feed one does, on the attribute's value.
func TestWhereAttributeGlob(t *testing.T) {
	for _, tc := range []struct {
		cond, sqlite, pg string
	}{
		{"EQUALS", "a.value GLOB $2", "a.value LIKE $2::text"},
		{"NOT_EQUALS", "a.value NOT GLOB $2", "a.value NOT LIKE $2::text"},
	} {
		e, err := ParseAttributesJSON([]byte(term_("Feed", tc.cond, "F?[%_*")))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []struct {
			d          Dialect
			want, arg1 string
		}{{SQLite, tc.sqlite, "F[?][[]%_*"}, {Postgres, tc.pg, `F?[\%\_%`}} {
			got, args := e.Where(d.d, nil)
			if !strings.HasSuffix(got, " AND "+d.want+")") || len(args) != 2 || args[0] != "Feed" || args[1] != d.arg1 {
				t.Errorf("%s %v: %s %q", tc.cond, d.d, got, args)
			}
			placeholders(t, got, len(args))
			noValuesInSQL(t, got)
		}
	}
}
