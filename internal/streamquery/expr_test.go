package streamquery

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func term_(field, cond, value string) string {
	return fmt.Sprintf(`{"type":"term","field":%q,"condition":%q,"value":%q}`, field, cond, value)
}

func op(o string, kids ...string) string {
	return fmt.Sprintf(`{"type":"operator","op":%q,"children":[%s]}`, o, strings.Join(kids, ","))
}

func TestParseValid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		json  string
		terms int
	}{
		{"null", `null`, 0},
		{"empty", ``, 0},
		{"empty and", op("AND"), 0},
		{"reference example", `{"type":"operator","op":"AND","enabled":true,"children":[
			{"type":"term","field":"Type","condition":"EQUALS","value":"Raw Events"},
			{"type":"term","field":"Create Time","condition":"BETWEEN","value":"2025-08-13T00:00:00.000Z,2026-05-13T00:00:00.000Z"},
			{"type":"operator","op":"NOT","children":[{"type":"term","field":"Status","condition":"EQUALS","value":"Deleted"}]}]}`, 3},
		{"field any case", term_("create TIME", "GREATER_THAN", "1700000000000"), 1},
		{"attribute", term_("attribute:System", "EQUALS", "x"), 1},
		{"attribute prefix any case", term_("Attribute:System", "IS_NULL", ""), 1},
		{"attribute number", term_("attribute:n", "BETWEEN", "-5, 10"), 1},
		{"attribute date", term_("attribute:EffectiveTime", "LESS_THAN", "2024-01-01T00:00:00Z"), 1},
		{"attribute text order", term_("attribute:x", "GREATER_THAN", "m"), 1},
		{"feed wildcard", term_("Feed", "EQUALS", "FEED-*"), 1},
		{"in list", term_("Id", "IN", "1, 2,3,"), 1},
		{"status display value", term_("Status", "IN", "Unlocked,deleted"), 1},
		{"epoch date", term_("Status Time", "LESS_THAN_OR_EQUAL_TO", "0"), 1},
		{"effective time null", term_("Effective Time", "IS_NULL", ""), 1},
		{"disabled term dropped", `{"type":"operator","children":[` + term_("Id", "EQUALS", "1") +
			`,{"type":"term","enabled":false,"field":"Id","condition":"EQUALS","value":"2"}]}`, 1},
		{"disabled operator dropped", `{"type":"operator","enabled":false,"children":[` + term_("Id", "EQUALS", "1") + `]}`, 0},
		{"not of two", op("NOT", term_("Id", "EQUALS", "1"), term_("Feed", "EQUALS", "A")), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := ParseJSON([]byte(tc.json))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if e.Terms() != tc.terms {
				t.Fatalf("terms %d, want %d", e.Terms(), tc.terms)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	deep := term_("Id", "EQUALS", "1")
	for range MaxDepth + 1 {
		deep = op("AND", deep)
	}
	many := make([]string, MaxItems)
	for i := range many {
		many[i] = term_("Id", "EQUALS", strconv.Itoa(i))
	}
	longIn := strings.Repeat("1,", MaxListValues+1)
	for _, tc := range []struct {
		name, json, path, msg string
	}{
		{"bad json", `{"type":`, "", "not a valid expression"},
		{"no type", `{"field":"Id"}`, "type", "missing"},
		{"bad type", `{"type":"thing"}`, "type", `"operator" or "term"`},
		{"bad op", `{"type":"operator","op":"XOR"}`, "op", "AND, OR or NOT"},
		{"operator with field", `{"type":"operator","field":"Id"}`, "", "did you mean type term"},
		{"term with children", `{"type":"term","children":[{"type":"term"}]}`, "", "did you mean type operator"},
		{"no field", `{"type":"term","condition":"EQUALS","value":"1"}`, "field", "needs a field"},
		{"unknown field", term_("Colour", "EQUALS", "red"), "field", `unknown field "Colour"`},
		{"empty attribute", term_("attribute:", "EQUALS", "x"), "field", "attribute name"},
		{"no condition", `{"type":"term","field":"Id","value":"1"}`, "condition", "needs a condition"},
		{"unknown condition", term_("Id", "LIKE", "1"), "condition", `unknown condition "LIKE"`},
		{"condition not for field", term_("Feed", "GREATER_THAN", "A"), "condition", "GREATER_THAN is not a condition of field Feed"},
		{"contains on id", term_("Id", "CONTAINS", "1"), "condition", "not a condition of field Id"},
		{"null on create time", term_("Create Time", "IS_NULL", ""), "condition", "not a condition of field Create Time"},
		{"bad int", term_("Raw Size", "EQUALS", "big"), "value", `"big" is not one`},
		{"bad date", term_("Create Time", "GREATER_THAN", "yesterday"), "value", "takes dates like"},
		{"bad status", term_("Status", "EQUALS", "Gone"), "value", "Unlocked, Locked, Deleted"},
		{"between one", term_("Id", "BETWEEN", "5"), "value", "two values"},
		{"between three", term_("Id", "BETWEEN", "1,2,3"), "value", "two values"},
		{"between reversed", term_("Id", "BETWEEN", "9,1"), "value", "low value is above"},
		{"between bad date", term_("Effective Time", "BETWEEN", "2024-01-01T00:00:00Z,then"), "value", "takes dates"},
		// Dates are stored to the millisecond: a finer one cut down would
		// make >= and < answer wrongly, so it is refused.
		{"date finer than a millisecond", term_("Create Time", "GREATER_THAN_OR_EQUAL_TO", "1970-01-01T00:00:02.0005Z"), "value", "compared to the millisecond"},
		{"attribute date finer than a millisecond", term_("attribute:When", "LESS_THAN", "2024-01-01T00:00:02.000001Z"), "value", "compared to the millisecond"},
		{"empty in", term_("Feed", "IN", " , "), "value", "at least one"},
		{"long in", term_("Id", "IN", longIn), "value", "at most"},
		{"long value", term_("Feed", "EQUALS", strings.Repeat("x", MaxValueBytes+1)), "value", "longer than"},
		{"null with value", term_("attribute:x", "IS_NULL", "y"), "value", "takes no value"},
		{"blank feed", term_("Feed", "EQUALS", ""), "value", "EQUALS takes a value"},
		{"blank receipt id", term_("Receipt Id", "CONTAINS", ""), "value", "CONTAINS takes a value; to find streams without Receipt Id use IS_NULL"},
		{"nested path", op("AND", term_("Id", "EQUALS", "1"), op("OR", term_("Feed", "EQUALS", "A"), term_("Type", "BETWEEN", "x"))),
			"children[1].children[1].condition", "BETWEEN is not a condition of field Type"},
		{"disabled still validated", `{"type":"operator","enabled":false,"children":[` + term_("Nope", "EQUALS", "1") + `]}`,
			"children[0].field", "unknown field"},
		{"too deep", deep, "", "nested more than"},
		{"too many", op("OR", many...), "", "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJSON([]byte(tc.json))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if tc.path != "" && e.Path != tc.path || !strings.Contains(e.Msg, tc.msg) {
				t.Fatalf("error at %q: %q; want at %q containing %q", e.Path, e.Msg, tc.path, tc.msg)
			}
		})
	}
}

func TestParseSort(t *testing.T) {
	for _, name := range []string{"Id", "create time", "Effective Time", "FEED", "Type"} {
		if _, err := ParseSort(name, true); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"Status", "attribute:x", "", "Raw Size"} {
		if _, err := ParseSort(name, false); err == nil || !strings.Contains(err.Error(), "sort fields are") {
			t.Errorf("%q: %v", name, err)
		}
	}
	k := func(n string, d bool) SortKey { s, _ := ParseSort(n, d); return s }
	for _, tc := range []struct {
		d    Dialect
		keys []SortKey
		want string
	}{
		{SQLite, nil, "id ASC"},
		{SQLite, []SortKey{k("Create Time", true)}, "create_ms DESC, id DESC"},
		{Postgres, []SortKey{k("Feed", false), k("Effective Time", true)}, `feed COLLATE "C" ASC, effective_ms DESC, id DESC`},
		{SQLite, []SortKey{k("Id", true), k("Feed", false)}, "id DESC"},
	} {
		if got := OrderBy(tc.d, tc.keys); got != tc.want {
			t.Errorf("OrderBy %v: %q, want %q", tc.keys, got, tc.want)
		}
	}
}

// placeholders checks that the SQL uses exactly $1..$n for n args (an arg
// bound but never used, or a placeholder without an arg, is a bug).
func placeholders(t testing.TB, sql string, nargs int) {
	t.Helper()
	used := map[int]bool{}
	for _, m := range regexp.MustCompile(`\$(\d+)`).FindAllStringSubmatch(sql, -1) {
		n, _ := strconv.Atoi(m[1])
		used[n] = true
	}
	for i := 1; i <= nargs; i++ {
		if !used[i] {
			t.Fatalf("arg $%d unused in %s", i, sql)
		}
	}
	if len(used) != nargs {
		t.Fatalf("%d placeholders for %d args in %s", len(used), nargs, sql)
	}
}

// literalRE matches the fixed literals the compiler writes itself; any
// other quote in the SQL would mean a value was written into it.
var literalRE = regexp.MustCompile(`'(\^-\?\[0-9\]\+\$|\*\[\^0-9\]\*|-\[0-9\]\*|(\[0-9\]){4}-(\[0-9\]){2}-(\[0-9\]){2}T(\[0-9\]){2}:(\[0-9\]){2}:(\[0-9\]){2}\.(\[0-9\]){3}Z|\^\[0-9\]\{4\}-\[0-9\]\{2\}-\[0-9\]\{2\}T\[0-9\]\{2\}:\[0-9\]\{2\}:\[0-9\]\{2\}\\\.\[0-9\]\{3\}Z\$|)'`)

func noValuesInSQL(t testing.TB, sql string) {
	t.Helper()
	rest := strings.ReplaceAll(literalRE.ReplaceAllString(sql, ""), `COLLATE "C"`, "")
	if strings.ContainsAny(rest, `'";`) {
		t.Fatalf("SQL holds a quote or semicolon outside the fixed literals: %s", sql)
	}
}

func TestWhere(t *testing.T) {
	for _, tc := range []struct {
		json       string
		sqlite, pg string
		args       []any
	}{
		{term_("Id", "GREATER_THAN", "5"), "(id > $1)", "(id > $1::bigint)", []any{int64(5)}},
		{term_("Create Time", "BETWEEN", "2024-01-01T00:00:00.000Z,1704067200001"),
			"(create_ms BETWEEN $1 AND $2)", "(create_ms BETWEEN $1::bigint AND $2::bigint)", []any{int64(1704067200000), int64(1704067200001)}},
		{term_("Feed", "EQUALS", "A_*"), "(feed GLOB $1)", "(feed LIKE $1::text)", nil},
		{term_("Feed", "IN", "A,B"), "(feed IN (SELECT value FROM json_each($1)))",
			"(feed IN (SELECT json_array_elements_text($1::json)))", []any{`["A","B"]`}},
		{term_("Id", "IN", "3,4"), "(id IN (SELECT value FROM json_each($1)))",
			"(id IN (SELECT (json_array_elements_text($1::json))::bigint))", []any{`[3,4]`}},
		{term_("Status", "NOT_EQUALS", "deleted"), "(status <> $1)", "(status <> $1::text)", []any{"DELETED"}},
		{op("OR", term_("Type", "IS_NULL", ""), op("NOT", term_("Parts", "LESS_THAN", "2"))),
			"((type = '') OR NOT ((parts < $1)))", "((type = '') OR NOT ((parts < $1::bigint)))", []any{int64(2)}},
		{term_("attribute:System", "IS_NULL", ""),
			"NOT EXISTS (SELECT 1 FROM json_each(streams.attributes) AS a WHERE lower(a.key) = lower($1))",
			"NOT EXISTS (SELECT 1 FROM json_each_text(streams.attributes::json) AS a WHERE lower(a.key COLLATE \"C\") = lower($1::text COLLATE \"C\"))",
			[]any{"System"}},
	} {
		e, err := ParseJSON([]byte(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		for _, d := range []struct {
			d    Dialect
			want string
		}{{SQLite, tc.sqlite}, {Postgres, tc.pg}} {
			got, args := e.Where(d.d, nil)
			if got != d.want {
				t.Errorf("%s:\n got %s\nwant %s", tc.json, got, d.want)
			}
			if tc.args != nil && fmt.Sprint(args) != fmt.Sprint(tc.args) {
				t.Errorf("%s: args %v, want %v", tc.json, args, tc.args)
			}
			placeholders(t, got, len(args))
			noValuesInSQL(t, got)
		}
	}
	// Placeholders continue after the caller's args.
	e, _ := ParseJSON([]byte(term_("Id", "EQUALS", "7")))
	if got, args := e.Where(SQLite, []any{"x", "y"}); got != "(id = $3)" || len(args) != 3 {
		t.Fatalf("continued: %s %v", got, args)
	}
	if got, args := (*Expr)(nil).Where(Postgres, nil); got != "1 = 1" || len(args) != 0 {
		t.Fatalf("nil: %s %v", got, args)
	}
}

func TestPatterns(t *testing.T) {
	if got := globPattern("a?b[c]*"); got != "a[?]b[[]c]*" {
		t.Errorf("glob %q", got)
	}
	if got := likePattern(`a%b_c\d*`); got != `a\%b\_c\\d%` {
		t.Errorf("like %q", got)
	}
}
