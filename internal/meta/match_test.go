package meta

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/streamquery"
)

// TestMatchAgreesWithSQL: an attribute expression (ParseAttributes)
// evaluated in memory by Match selects exactly the streams its SQL selects,
// on each engine: Match is how data receipt rules judge a post, Where how a
// stream query finds the streams, and the two must never disagree.
func TestMatchAgreesWithSQL(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			t.Parallel()
			testMatchAgreesWithSQL(t, ec.fresh(t))
		})
	}
}

func testMatchAgreesWithSQL(t *testing.T, loc location) {
	r := openRepo(t, loc)
	ctx := t.Context()
	// Only ASCII letters fold in names (attr.EqualName), on both engines:
	// Ä, the long s and the Kelvin sign are letters of their own.
	posts := [][]string{
		nil,
		{"Feed", "FEED-A", "System", "alpha", "Count", "5", "When", "2024-01-01T00:00:00.000Z"},
		{"SYSTEM", "beta", "count", "-3", "when", "2023-06-01T00:00:00Z"}, // not the canonical layout
		{"system", "", "count", "", "note", "x*y"},
		{"count", "1234567890123456789", "note", "x?y", "when", "2024-13-45T99:00:00.000Z"}, // 19 digits; the shape of a date
		{"count", "-123456789012345678", "note", "50%_off", "Feed", "FEED-B"},               // 19 characters
		{"count", "007", "note", `back\slash`, "Feed", "feed-a"},
		{"count", "abc", "note", "[x]", "When", "2024-06-01T12:00:00.000Z", "Feed", "FEED-?1"},
		{"NOTE", "größe ü*ß", "Count", "-0", "feed", "FEED-%"},
		{"note", "x*", "count", "40", "ünï", "ÄÖ", "Feed", "FEED_A"},
		{"count", "٣", "note", "*", "when", "1704067200000", "Feed", "x"},
		{"count", "+5", "note", "a b", "Type", "Raw Events"},
		{"count", "123456789012345678", "when", "2023-12-31T23:59:59.999Z", "note", "X*Y"},
		{"count", "-", "note", "é", "Feed", "FEED-A-2", "ünï", ""},
		{"COUNT", "4", "NOTE", "xy", "FEED", "FEED-"},
		{"Ärger", "umlaut", "ſystem", "long-s", "\u212aind", "kelvin", "STRAßE", "street"},
		{"ärger", "lower", "kind", "ascii", "Straße", "road"},
	}
	var create []*Stream
	for _, kv := range posts {
		a := new(attr.Map)
		for i := 0; i < len(kv); i += 2 {
			a.Put(kv[i], kv[i+1])
		}
		create = append(create, &Stream{Feed: "F", Type: "Raw Events", Node: "n", Attributes: a})
	}
	apply(t, r, &Batch{Create: create})
	// Match sees the attributes as stored, which is what the SQL sees.
	all, err := r.FindStreams(ctx, StreamQuery{Limit: 1000})
	if err != nil || len(all.Streams) != len(posts) {
		t.Fatalf("streams: %d %v", len(all.Streams), err)
	}

	exprs := []string{
		// Presence.
		tm("system", "IS_NULL", ""), tm("System", "IS_NOT_NULL", ""), tm("count", "IS_NOT_NULL", ""),
		tm("nope", "IS_NULL", ""), tm("nope", "IS_NOT_NULL", ""), tm("ünï", "IS_NOT_NULL", ""), tm("attribute:NOTE", "IS_NULL", ""),
		// Names with letters beyond ASCII.
		tm("ärger", "IS_NOT_NULL", ""), tm("ÄRGER", "IS_NOT_NULL", ""), tm("Ärger", "EQUALS", "umlaut"),
		tm("System", "EQUALS", "long-s"), tm("ſYSTEM", "EQUALS", "long-s"), tm("kind", "EQUALS", "kelvin"),
		tm("KIND", "IS_NOT_NULL", ""), tm("\u212aIND", "EQUALS", "kelvin"), tm("straße", "IS_NOT_NULL", ""),
		tm("STRASSE", "IS_NULL", ""),
		// Text, exact.
		tm("system", "EQUALS", "alpha"), tm("SYSTEM", "EQUALS", "ALPHA"), tm("system", "EQUALS", ""),
		tm("system", "NOT_EQUALS", "alpha"), tm("system", "NOT_EQUALS", ""), tm("note", "EQUALS", "x?y"),
		tm("note", "EQUALS", "50%_off"), tm("note", "EQUALS", "[x]"), tm("note", "EQUALS", `back\slash`),
		tm("Feed", "EQUALS", "FEED-%"), tm("ünï", "EQUALS", "ÄÖ"), tm("ünï", "NOT_EQUALS", "ÄÖ"), tm("count", "EQUALS", "5"),
		// Wildcards.
		tm("note", "EQUALS", "x*y"), tm("note", "EQUALS", "x*"), tm("note", "EQUALS", "*y"), tm("note", "EQUALS", "*"),
		tm("note", "EQUALS", "**"), tm("note", "EQUALS", "*\\*"), tm("note", "EQUALS", "50%*"), tm("note", "EQUALS", "*%*"),
		tm("note", "EQUALS", "*_*"), tm("note", "EQUALS", "*?*"), tm("note", "EQUALS", "x?*"), tm("note", "EQUALS", "[*"),
		tm("note", "EQUALS", "*]"), tm("note", "EQUALS", "größe*"), tm("note", "EQUALS", "*ü*ß"), tm("note", "EQUALS", "X*Y"),
		tm("note", "EQUALS", "x*x*y"), tm("note", "EQUALS", "*a*"), tm("note", "EQUALS", "*\\s*"),
		tm("Feed", "EQUALS", "FEED-*"), tm("feed", "EQUALS", "*-A"), tm("FEED", "EQUALS", "FEED-?*"),
		tm("Feed", "EQUALS", "FEED_*"), tm("Feed", "EQUALS", "feed-*"), tm("Feed", "EQUALS", "*A*"), tm("system", "EQUALS", "*"),
		tm("Feed", "NOT_EQUALS", "FEED-*"), tm("note", "NOT_EQUALS", "*"), tm("note", "NOT_EQUALS", "x*"),
		tm("attribute:note", "NOT_EQUALS", "*?*"),
		// Substrings, case-sensitive, '*' literal.
		tm("note", "CONTAINS", "*"), tm("note", "CONTAINS", "%"), tm("note", "CONTAINS", "_"), tm("note", "CONTAINS", `\`),
		tm("note", "CONTAINS", "ü"), tm("note", "CONTAINS", ""), tm("system", "CONTAINS", "ph"), tm("note", "CONTAINS", "X"),
		tm("Feed", "STARTS_WITH", "FEED-"), tm("note", "STARTS_WITH", "größe"), tm("note", "STARTS_WITH", ""),
		tm("note", "STARTS_WITH", "["), tm("note", "STARTS_WITH", "x*"), tm("Feed", "STARTS_WITH", "feed"),
		tm("note", "ENDS_WITH", "y"), tm("note", "ENDS_WITH", "ß"), tm("note", "ENDS_WITH", "much-longer-than-any-value"),
		tm("Feed", "ENDS_WITH", "A"), tm("note", "ENDS_WITH", ""), tm("note", "ENDS_WITH", "*"),
		// Lists.
		tm("system", "IN", "alpha,beta"), tm("note", "IN", "x*y, [x], *"), tm("count", "IN", "5,007"),
		tm("count", "IN", "1,2,3,4,5,6,7,8,9,10,40,abc"), tm("Feed", "IN", "FEED-*"),
		// Numbers: only values of at most 18 characters, optional minus.
		tm("count", "GREATER_THAN", "4"), tm("count", "LESS_THAN", "0"), tm("count", "BETWEEN", "-5,5"),
		tm("count", "LESS_THAN_OR_EQUAL_TO", "40"), tm("count", "GREATER_THAN_OR_EQUAL_TO", "40"), tm("count", "LESS_THAN", "4"),
		tm("count", "GREATER_THAN_OR_EQUAL_TO", "0"), tm("count", "LESS_THAN_OR_EQUAL_TO", "-0"),
		tm("count", "GREATER_THAN", "-99999999999999999"), tm("count", "LESS_THAN", "123456789012345679"),
		tm("count", "GREATER_THAN", "123456789012345677"), tm("count", "BETWEEN", "-3, 7"),
		// Text order when a value is not a number (19 digits, a sign, letters).
		tm("count", "GREATER_THAN", "1234567890123456788"), tm("count", "LESS_THAN", "-99999999999999999999"),
		tm("count", "GREATER_THAN", "a"), tm("count", "LESS_THAN", "1"), tm("count", "BETWEEN", "-,5"),
		tm("system", "LESS_THAN", "b"), tm("note", "GREATER_THAN_OR_EQUAL_TO", "x"), tm("note", "BETWEEN", "[,z"),
		tm("Feed", "GREATER_THAN", "FEED-A"), tm("note", "GREATER_THAN", "z"), tm("note", "BETWEEN", "z,a"),
		// Dates: only the canonical layout, compared as text.
		tm("when", "LESS_THAN", "2024-01-01T00:00:00Z"), tm("When", "GREATER_THAN_OR_EQUAL_TO", "2024-01-01T00:00:00.000Z"),
		tm("WHEN", "BETWEEN", "2023-01-01T00:00:00Z,2024-12-31T00:00:00Z"), tm("when", "GREATER_THAN", "2000-01-01T00:00:00Z"),
		tm("when", "LESS_THAN_OR_EQUAL_TO", "2023-12-31T23:59:59.999Z"), tm("when", "GREATER_THAN", "2024-01-01T01:00:00+01:00"),
		tm("when", "LESS_THAN", "1800000000000"), // epoch milliseconds are a number
		// Operators.
		opn("NOT", tm("system", "EQUALS", "alpha")), opn("NOT", tm("note", "EQUALS", "x*")),
		opn("OR", tm("Feed", "EQUALS", "FEED-*"), tm("count", "GREATER_THAN", "4")),
		opn("AND", tm("note", "IS_NOT_NULL", ""), opn("NOT", tm("note", "CONTAINS", "*"))),
		opn("NOT", tm("Feed", "EQUALS", "*A*"), tm("count", "IS_NOT_NULL", "")),
		opn("OR", opn("AND", tm("Feed", "EQUALS", "FEED*"), tm("count", "LESS_THAN", "10")),
			opn("NOT", opn("OR", tm("system", "IS_NOT_NULL", ""), tm("when", "IS_NULL", "")))),
		opn("AND", tm("count", "IS_NOT_NULL", ""),
			`{"type":"term","enabled":false,"field":"count","condition":"EQUALS","value":"5"}`),
		`{"type":"operator","op":"NOT","enabled":false,"children":[` + tm("count", "IS_NOT_NULL", "") + `]}`,
		``,
	}
	mixed := 0
	for _, js := range exprs {
		e, err := streamquery.ParseAttributesJSON([]byte(js))
		if err != nil {
			t.Fatalf("parse %s: %v", js, err)
		}
		p, err := r.FindStreams(ctx, StreamQuery{Expr: e, Limit: 1000})
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		sql := ids(p.Streams)
		var match []int64
		for _, s := range all.Streams {
			if e.Match(s.Attributes.Get) {
				match = append(match, s.ID)
			}
		}
		if !slices.Equal(sql, match) {
			t.Errorf("%s: SQL selects %v, Match %v", js, indexesOf(all.Streams, sql), indexesOf(all.Streams, match))
		}
		if len(match) > 0 && len(match) < len(posts) {
			mixed++
		}
	}
	// Agreement on nothing (or everything) would prove little.
	if mixed < len(exprs)*3/4 {
		t.Errorf("only %d of %d expressions select some streams but not all", mixed, len(exprs))
	}
}

// indexesOf maps stream ids to their positions in all (the posts), for
// messages.
func indexesOf(all []Stream, ids []int64) string {
	var sb strings.Builder
	for i, id := range ids {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(slices.IndexFunc(all, func(s Stream) bool { return s.ID == id })))
	}
	return "[" + sb.String() + "]"
}
