package meta

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/streamquery"
)

// queryFixture is a small set of streams covering every field's values,
// created on a fresh repository.
type queryFixture struct {
	r     *Repo
	ids   []int64 // by fixture index
	start time.Time
}

func newQueryFixture(t *testing.T, loc location) *queryFixture {
	t.Helper()
	r := openRepo(t, loc)
	fx := &queryFixture{r: r, start: time.Now().Add(-time.Second)}
	rows := []struct {
		feed, typ   string
		create, eff int64
		rcpt        string
		parts       int
		raw, file   int64
		attrs       []string
		status      Status
		hops        []string // earlier hops' receipt ids
	}{
		{"FEED-A", "Raw Events", 1000, 5000, "r0", 1, 100, 50, []string{"System", "alpha", "Count", "5", "When", "2024-01-01T00:00:00.000Z"}, Unlocked, nil},
		{"FEED-B", "Raw Reference", 2000, 4000, "r1", 2, 200, 80, []string{"SYSTEM", "beta", "count", "-3"}, Unlocked, []string{"p1a", "p1b"}},
		{"FEED-A", "Events", 3000, 0, "", 3, 300, 120, []string{"system", "alphabet", "Count", "40", "When", "2023-06-01T00:00:00.000Z"}, Deleted, []string{"p2"}},
		{"FEED-C", "Raw Events", 4000, 1000, "r3", 1, 0, 0, []string{"Note", "x*y"}, Unlocked, nil},
		{"FEED-A", "", 5000, 3000, "r4", 0, 0, 0, nil, Locked, nil},
		{"FEED-B", "Raw Events", 6000, 2000, "r5", 1, 600, 0, []string{"Count", "abc"}, Unlocked, []string{"p1a"}},
		{"FEED-a", "Raw Events", 7000, 6000, "r6", 1, 700, 70, nil, Unlocked, nil},
	}
	var create, unlock []*Stream
	for _, row := range rows {
		a := new(attr.Map)
		for i := 0; i < len(row.attrs); i += 2 {
			a.Put(row.attrs[i], row.attrs[i+1])
		}
		s := &Stream{Feed: row.feed, Type: row.typ, CreateMs: row.create, EffectiveMs: row.eff, Node: "n",
			ReceiptID: row.rcpt, Parts: row.parts, RawSize: row.raw, FileSize: row.file, Attributes: a,
			HopReceiptIDs: row.hops}
		create = append(create, s)
		if row.status != Locked {
			unlock = append(unlock, s)
		}
	}
	apply(t, r, &Batch{Create: create})
	apply(t, r, &Batch{Unlock: unlock})
	for i, s := range create {
		fx.ids = append(fx.ids, s.ID)
		if rows[i].status == Deleted {
			if err := r.SetStreamStatus(t.Context(), s.ID, Deleted); err != nil {
				t.Fatal(err)
			}
		}
	}
	return fx
}

func (fx *queryFixture) id(i int) string { return fmt.Sprint(fx.ids[i]) }

// indexes maps ids back to fixture indexes.
func (fx *queryFixture) indexes(ss []Stream) []int {
	out := []int{}
	for _, s := range ss {
		out = append(out, slices.Index(fx.ids, s.ID))
	}
	return out
}

func tm(field, cond, value string) string {
	return fmt.Sprintf(`{"type":"term","field":%q,"condition":%q,"value":%q}`, field, cond, value)
}

func opn(op string, kids ...string) string {
	return fmt.Sprintf(`{"type":"operator","op":%q,"children":[%s]}`, op, strings.Join(kids, ","))
}

func mustExpr(t *testing.T, js string) *streamquery.Expr {
	t.Helper()
	e, err := streamquery.ParseJSON([]byte(js))
	if err != nil {
		t.Fatalf("parse %s: %v", js, err)
	}
	return e
}

func TestFindStreams(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			t.Run("Filters", func(t *testing.T) { t.Parallel(); testFindFilters(t, ec.fresh(t)) })
			t.Run("SortAndPage", func(t *testing.T) { t.Parallel(); testFindSortAndPage(t, ec.fresh(t)) })
			t.Run("BulkStatus", func(t *testing.T) { t.Parallel(); testBulkStatus(t, ec.fresh(t)) })
		})
	}
}

func testFindFilters(t *testing.T, loc location) {
	fx := newQueryFixture(t, loc)
	ctx := t.Context()
	all := []int{0, 1, 2, 3, 4, 5, 6}
	start := attr.FormatTime(fx.start)
	cases := []struct {
		expr string
		want []int
	}{
		{``, all},
		{opn("AND"), all},
		// Id
		{tm("Id", "EQUALS", fx.id(3)), []int{3}},
		{tm("Id", "NOT_EQUALS", fx.id(3)), []int{0, 1, 2, 4, 5, 6}},
		{tm("Id", "GREATER_THAN", fx.id(4)), []int{5, 6}},
		{tm("Id", "GREATER_THAN_OR_EQUAL_TO", fx.id(4)), []int{4, 5, 6}},
		{tm("Id", "LESS_THAN", fx.id(1)), []int{0}},
		{tm("Id", "LESS_THAN_OR_EQUAL_TO", fx.id(1)), []int{0, 1}},
		{tm("Id", "BETWEEN", fx.id(1)+","+fx.id(3)), []int{1, 2, 3}},
		{tm("Id", "IN", fx.id(0)+", "+fx.id(6)), []int{0, 6}},
		// Feed: exact, '*' wildcards (every other character literal), case-sensitive.
		{tm("Feed", "EQUALS", "FEED-A"), []int{0, 2, 4}},
		{tm("Feed", "EQUALS", "feed-a"), []int{}},
		{tm("Feed", "EQUALS", "FEED-*"), all},
		{tm("Feed", "EQUALS", "*-B"), []int{1, 5}},
		{tm("Feed", "EQUALS", "FEED_*"), []int{}},
		{tm("Feed", "EQUALS", "FEED-?"), []int{}},
		{tm("Feed", "EQUALS", "FEED%"), []int{}},
		{tm("Feed", "NOT_EQUALS", "FEED-A"), []int{1, 3, 5, 6}},
		{tm("Feed", "NOT_EQUALS", "FEED-*"), []int{}},
		{tm("Feed", "CONTAINS", "-B"), []int{1, 5}},
		{tm("Feed", "CONTAINS", "%"), []int{}},
		{tm("Feed", "STARTS_WITH", "FEED-a"), []int{6}},
		{tm("Feed", "ENDS_WITH", "C"), []int{3}},
		{tm("Feed", "ENDS_WITH", "LONGER-THAN-ANY-FEED-C"), []int{}},
		{tm("Feed", "IN", "FEED-A, FEED-C"), []int{0, 2, 3, 4}},
		// Type ('' is none)
		{tm("Type", "EQUALS", "Raw Events"), []int{0, 3, 5, 6}},
		{tm("Type", "NOT_EQUALS", "Raw Events"), []int{1, 2}},
		{tm("Type", "IS_NULL", ""), []int{4}},
		{tm("Type", "IS_NOT_NULL", ""), []int{0, 1, 2, 3, 5, 6}},
		{tm("Type", "CONTAINS", "Ref"), []int{1}},
		{tm("Type", "STARTS_WITH", "Raw"), []int{0, 1, 3, 5, 6}},
		{tm("Type", "ENDS_WITH", "Events"), []int{0, 2, 3, 5, 6}},
		{tm("Type", "IN", "Events,Raw Reference"), []int{1, 2}},
		// Status, display or stored values
		{tm("Status", "EQUALS", "Unlocked"), []int{0, 1, 3, 5, 6}},
		{tm("Status", "IN", "deleted,LOCKED"), []int{2, 4}},
		{tm("Status", "NOT_EQUALS", "UNLOCKED"), []int{2, 4}},
		// Times
		{tm("Create Time", "EQUALS", "1970-01-01T00:00:03.000Z"), []int{2}},
		{tm("Create Time", "NOT_EQUALS", "1000"), []int{1, 2, 3, 4, 5, 6}},
		{tm("Create Time", "GREATER_THAN", "4000"), []int{4, 5, 6}},
		{tm("Create Time", "GREATER_THAN_OR_EQUAL_TO", "1970-01-01T00:00:04.000Z"), []int{3, 4, 5, 6}},
		{tm("Create Time", "LESS_THAN", "1970-01-01T00:00:02Z"), []int{0}},
		{tm("Create Time", "LESS_THAN_OR_EQUAL_TO", "2000"), []int{0, 1}},
		{tm("Create Time", "BETWEEN", "1970-01-01T00:00:02.000Z,1970-01-01T00:00:04Z"), []int{1, 2, 3}},
		{tm("Create Time", "IN", "1000,7000"), []int{0, 6}},
		// Every stream has an effective time; 0 is 1970-01-01, not none
		// (stream 2's, as a sender may set for reference data valid
		// since ever).
		{tm("Effective Time", "IS_NULL", ""), []int{}},
		{tm("Effective Time", "IS_NOT_NULL", ""), all},
		{tm("Effective Time", "LESS_THAN", "3000"), []int{2, 3, 5}},
		{tm("Effective Time", "GREATER_THAN_OR_EQUAL_TO", "5000"), []int{0, 6}},
		{tm("Effective Time", "BETWEEN", "1000,4000"), []int{1, 3, 4, 5}},
		{tm("Effective Time", "EQUALS", "0"), []int{2}},
		{tm("Effective Time", "EQUALS", "1970-01-01T00:00:00.000Z"), []int{2}},
		{tm("Effective Time", "NOT_EQUALS", "5000"), []int{1, 2, 3, 4, 5, 6}},
		{tm("Status Time", "GREATER_THAN_OR_EQUAL_TO", start), []int{0, 1, 2, 3, 5, 6}},
		{tm("Status Time", "LESS_THAN", start), []int{4}},
		// Receipt Id ('' is none)
		{tm("Receipt Id", "EQUALS", "r1"), []int{1}},
		{tm("Receipt Id", "NOT_EQUALS", "r1"), []int{0, 3, 4, 5, 6}},
		{tm("Receipt Id", "IS_NULL", ""), []int{2}},
		{tm("Receipt Id", "IS_NOT_NULL", ""), []int{0, 1, 3, 4, 5, 6}},
		{tm("Receipt Id", "STARTS_WITH", "r"), []int{0, 1, 3, 4, 5, 6}},
		{tm("Receipt Id", "CONTAINS", "6"), []int{6}},
		{tm("Receipt Id", "ENDS_WITH", "3"), []int{3}},
		{tm("Receipt Id", "IN", "r0,r5"), []int{0, 5}},
		// ... and the ids earlier hops gave a stream's parts.
		{tm("Receipt Id", "EQUALS", "p1a"), []int{1, 5}},
		{tm("Receipt Id", "EQUALS", "p2"), []int{2}},
		{tm("Receipt Id", "NOT_EQUALS", "p1a"), []int{0, 3, 4, 6}},
		{tm("Receipt Id", "STARTS_WITH", "p1"), []int{1, 5}},
		{tm("Receipt Id", "IN", "p2,r0"), []int{0, 2}},
		{tm("Receipt Id", "CONTAINS", "1b"), []int{1}},
		{tm("Receipt Id", "ENDS_WITH", "a"), []int{1, 5}},
		{opn("NOT", tm("Receipt Id", "EQUALS", "p1b")), []int{0, 2, 3, 4, 5, 6}},
		// Sizes
		{tm("Parts", "EQUALS", "1"), []int{0, 3, 5, 6}},
		{tm("Parts", "NOT_EQUALS", "1"), []int{1, 2, 4}},
		{tm("Parts", "GREATER_THAN", "2"), []int{2}},
		{tm("Parts", "GREATER_THAN_OR_EQUAL_TO", "2"), []int{1, 2}},
		{tm("Parts", "LESS_THAN", "1"), []int{4}},
		{tm("Parts", "LESS_THAN_OR_EQUAL_TO", "0"), []int{4}},
		{tm("Parts", "BETWEEN", "2,3"), []int{1, 2}},
		{tm("Parts", "IN", "2,3"), []int{1, 2}},
		{tm("Raw Size", "BETWEEN", "100,300"), []int{0, 1, 2}},
		{tm("Raw Size", "LESS_THAN", "100"), []int{3, 4}},
		{tm("Raw Size", "GREATER_THAN", "500"), []int{5, 6}},
		{tm("File Size", "GREATER_THAN", "0"), []int{0, 1, 2, 6}},
		{tm("File Size", "EQUALS", "0"), []int{3, 4, 5}},
		// Attributes: names in any case; values compared as given.
		{tm("attribute:system", "EQUALS", "alpha"), []int{0}},
		{tm("attribute:system", "EQUALS", "ALPHA"), []int{}},
		{tm("attribute:SYSTEM", "STARTS_WITH", "alpha"), []int{0, 2}},
		{tm("Attribute:System", "CONTAINS", "et"), []int{1, 2}},
		{tm("attribute:sYsTeM", "ENDS_WITH", "a"), []int{0, 1}},
		{tm("attribute:system", "ENDS_WITH", "much-longer-than-the-value"), []int{}},
		{tm("attribute:system", "IS_NULL", ""), []int{3, 4, 5, 6}},
		{tm("attribute:system", "IS_NOT_NULL", ""), []int{0, 1, 2}},
		{tm("attribute:system", "NOT_EQUALS", "alpha"), []int{1, 2}},
		{tm("attribute:system", "IN", "alpha,beta"), []int{0, 1}},
		// ... numbers when the term's value is a number,
		{tm("attribute:COUNT", "GREATER_THAN", "4"), []int{0, 2}},
		{tm("attribute:count", "LESS_THAN", "0"), []int{1}},
		{tm("attribute:count", "BETWEEN", "-5,5"), []int{0, 1}},
		{tm("attribute:count", "LESS_THAN_OR_EQUAL_TO", "40"), []int{0, 1, 2}},
		{tm("attribute:count", "GREATER_THAN_OR_EQUAL_TO", "40"), []int{2}},
		{tm("attribute:count", "LESS_THAN", "4"), []int{1}}, // 40 > 4 as numbers, "abc" is not one
		// ... text (byte order) when it is text,
		{tm("attribute:count", "GREATER_THAN", "a"), []int{5}},
		{tm("attribute:system", "LESS_THAN", "b"), []int{0, 2}},
		// ... and dates when it is a date.
		{tm("attribute:when", "LESS_THAN", "2023-12-31T00:00:00Z"), []int{2}},
		{tm("attribute:When", "GREATER_THAN_OR_EQUAL_TO", "2024-01-01T00:00:00.000Z"), []int{0}},
		{tm("attribute:WHEN", "BETWEEN", "2023-01-01T00:00:00Z,2024-12-31T00:00:00Z"), []int{0, 2}},
		{tm("attribute:note", "EQUALS", "x*y"), []int{3}},
		{tm("attribute:note", "EQUALS", "x*"), []int{}},
		{tm("attribute:note", "CONTAINS", "*"), []int{3}},
		{tm("attribute:nope", "IS_NULL", ""), all},
		{tm("attribute:x'; DROP TABLE streams; --", "EQUALS", "'; DROP TABLE streams; --"), []int{}},
		// Operators
		{opn("NOT", tm("Feed", "EQUALS", "FEED-A")), []int{1, 3, 5, 6}},
		{opn("NOT", tm("attribute:system", "EQUALS", "alpha")), []int{1, 2, 3, 4, 5, 6}},
		{opn("OR", tm("Feed", "EQUALS", "FEED-C"), tm("Parts", "GREATER_THAN_OR_EQUAL_TO", "2")), []int{1, 2, 3}},
		{opn("AND", tm("Status", "EQUALS", "Unlocked"), opn("NOT", tm("Type", "EQUALS", "Raw Events"))), []int{1}},
		{opn("NOT", tm("Feed", "EQUALS", "FEED-A"), tm("Status", "EQUALS", "Deleted")), []int{0, 1, 3, 4, 5, 6}},
		{opn("AND", tm("Feed", "EQUALS", "FEED-B"),
			`{"type":"term","enabled":false,"field":"Status","condition":"EQUALS","value":"Deleted"}`), []int{1, 5}},
		{opn("OR", opn("AND", tm("Feed", "EQUALS", "FEED-A"), tm("attribute:count", "GREATER_THAN", "10")),
			opn("AND", tm("Feed", "EQUALS", "FEED-B"), tm("attribute:count", "IS_NOT_NULL", ""))), []int{1, 2, 5}},
	}
	for _, c := range cases {
		p, err := fx.r.FindStreams(ctx, StreamQuery{Expr: mustExpr(t, c.expr)})
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := fx.indexes(p.Streams); !slices.Equal(got, c.want) {
			t.Errorf("%s: streams %v, want %v", c.expr, got, c.want)
		}
		if !p.Exact || p.Total != int64(len(c.want)) {
			t.Errorf("%s: total %d exact %v", c.expr, p.Total, p.Exact)
		}
		n, err := fx.r.CountStatusChange(ctx, mustExpr(t, c.expr), nil, Deleted)
		if err != nil {
			t.Errorf("%s: count: %v", c.expr, err)
		}
		want := int64(len(c.want))
		if slices.Contains(c.want, 4) {
			want--
		}
		if n.Matched != want {
			t.Errorf("%s: count matched %d, want %d (the LOCKED stream never counts)", c.expr, n.Matched, want)
		}
	}
	if _, err := fx.r.GetStream(ctx, fx.ids[0]); err != nil {
		t.Fatalf("the streams table is gone: %v", err)
	}

	// Narrowing, as StreamFilter.FeedIn.
	for _, c := range []struct {
		expr   string
		feedIn []string
		want   []int
	}{
		{``, []string{"FEED-A", "FEED-C"}, []int{0, 2, 3, 4}},
		{``, []string{}, []int{}},
		{``, nil, all},
		{tm("Feed", "EQUALS", "FEED-B"), []string{"FEED-A"}, []int{}},
		{opn("OR", tm("Feed", "EQUALS", "FEED-B"), tm("Parts", "EQUALS", "3")), []string{"FEED-A"}, []int{2}},
	} {
		p, err := fx.r.FindStreams(ctx, StreamQuery{Expr: mustExpr(t, c.expr), FeedIn: c.feedIn})
		if err != nil {
			t.Fatal(err)
		}
		if got := fx.indexes(p.Streams); !slices.Equal(got, c.want) {
			t.Errorf("%s in %v: %v, want %v", c.expr, c.feedIn, got, c.want)
		}
	}
}

func testFindSortAndPage(t *testing.T, loc location) {
	fx := newQueryFixture(t, loc)
	ctx := t.Context()
	key := func(f string, desc bool) streamquery.SortKey {
		k, err := streamquery.ParseSort(f, desc)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	for _, c := range []struct {
		sort []streamquery.SortKey
		want []int
	}{
		{nil, []int{0, 1, 2, 3, 4, 5, 6}},
		{[]streamquery.SortKey{key("Id", true)}, []int{6, 5, 4, 3, 2, 1, 0}},
		{[]streamquery.SortKey{key("Create Time", true)}, []int{6, 5, 4, 3, 2, 1, 0}},
		{[]streamquery.SortKey{key("Effective Time", false)}, []int{2, 3, 5, 4, 1, 0, 6}},
		// Byte order on both engines: upper case before lower case.
		{[]streamquery.SortKey{key("Feed", false)}, []int{0, 2, 4, 1, 5, 3, 6}},
		{[]streamquery.SortKey{key("Feed", true), key("Create Time", false)}, []int{6, 3, 1, 5, 0, 2, 4}},
		// Ties broken by id in the direction of the last key.
		{[]streamquery.SortKey{key("Type", true)}, []int{1, 6, 5, 3, 0, 2, 4}},
		{[]streamquery.SortKey{key("Type", false)}, []int{4, 2, 0, 3, 5, 6, 1}},
	} {
		p, err := fx.r.FindStreams(ctx, StreamQuery{Sort: c.sort})
		if err != nil {
			t.Fatal(err)
		}
		if got := fx.indexes(p.Streams); !slices.Equal(got, c.want) {
			t.Errorf("sort %v: %v, want %v", c.sort, got, c.want)
		}
	}

	for _, c := range []struct {
		offset int64
		limit  int
		count  bool
		want   []int
		total  int64
		exact  bool
	}{
		{0, 3, false, []int{0, 1, 2}, 4, false}, // a lower bound: at least one more
		{0, 3, true, []int{0, 1, 2}, 7, true},
		{3, 3, false, []int{3, 4, 5}, 7, false},
		{4, 3, false, []int{4, 5, 6}, 7, true}, // reached the end: exact without a count
		{6, 3, false, []int{6}, 7, true},
		{0, 7, false, []int{0, 1, 2, 3, 4, 5, 6}, 7, true},
		{0, 0, false, []int{0, 1, 2, 3, 4, 5, 6}, 7, true}, // default limit
		{10, 3, false, []int{}, 7, true},                   // past the end: counted
		{7, 3, false, []int{}, 7, true},
	} {
		p, err := fx.r.FindStreams(ctx, StreamQuery{Offset: c.offset, Limit: c.limit, Count: c.count})
		if err != nil {
			t.Fatal(err)
		}
		if got := fx.indexes(p.Streams); !slices.Equal(got, c.want) || p.Total != c.total || p.Exact != c.exact {
			t.Errorf("offset %d limit %d count %v: %v total %d exact %v; want %v %d %v",
				c.offset, c.limit, c.count, got, p.Total, p.Exact, c.want, c.total, c.exact)
		}
	}
	// Paging through a filtered, sorted, narrowed selection visits every
	// match exactly once.
	q := StreamQuery{Expr: mustExpr(t, tm("Status", "NOT_EQUALS", "LOCKED")), FeedIn: []string{"FEED-A", "FEED-B", "FEED-a"},
		Sort: []streamquery.SortKey{key("Feed", false)}, Limit: 2}
	var seen []int
	for {
		p, err := fx.r.FindStreams(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, fx.indexes(p.Streams)...)
		if p.Exact {
			if p.Total != 5 {
				t.Fatalf("total %d", p.Total)
			}
			break
		}
		q.Offset += int64(q.Limit)
	}
	if !slices.Equal(seen, []int{0, 2, 1, 5, 6}) {
		t.Fatalf("paged %v", seen)
	}
	if _, err := fx.r.FindStreams(ctx, StreamQuery{Offset: -1}); err == nil {
		t.Fatal("negative offset accepted")
	}
}

func testBulkStatus(t *testing.T, loc location) {
	fx := newQueryFixture(t, loc)
	ctx := t.Context()
	r := fx.r
	status := func(i int) Status {
		s, err := r.GetStream(ctx, fx.ids[i])
		if err != nil {
			t.Fatal(err)
		}
		return s.Status
	}
	check := func(what string, got StatusChange, err error, matched, changed int64) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.Matched != matched || got.Changed != changed {
			t.Fatalf("%s: matched %d changed %d, want %d %d", what, got.Matched, got.Changed, matched, changed)
		}
	}
	feedA := mustExpr(t, tm("Feed", "EQUALS", "FEED-A"))
	c, err := r.CountStatusChange(ctx, feedA, nil, Deleted)
	check("dry run delete FEED-A", c, err, 2, 1) // 0 UNLOCKED, 2 DELETED; 4 LOCKED never
	if status(0) != Unlocked {
		t.Fatal("a dry run changed something")
	}
	c, err = r.CountStatusChange(ctx, mustExpr(t, tm("Type", "STARTS_WITH", "Raw")), []string{"FEED-B"}, Deleted)
	check("dry run narrowed", c, err, 2, 2)
	c, err = r.CountStatusChange(ctx, feedA, []string{}, Deleted)
	check("dry run narrowed to nothing", c, err, 0, 0)

	before := time.Now().UnixMilli()
	c, err = r.UpdateStatusWhere(ctx, feedA, nil, Deleted)
	check("delete FEED-A", c, err, 2, 1)
	if status(0) != Deleted || status(2) != Deleted || status(4) != Locked || status(1) != Unlocked {
		t.Fatalf("after delete: %s %s %s %s", status(0), status(2), status(4), status(1))
	}
	if s, _ := r.GetStream(ctx, fx.ids[0]); s.StatusMs < before {
		t.Fatalf("status time %d not stamped (before %d)", s.StatusMs, before)
	}
	c, err = r.UpdateStatusWhere(ctx, feedA, nil, Deleted)
	check("delete FEED-A again", c, err, 2, 0)
	c, err = r.UpdateStatusWhere(ctx, feedA, []string{"FEED-B"}, Unlocked)
	check("restore outside the caller's feeds", c, err, 0, 0)
	c, err = r.CountStatusChange(ctx, feedA, nil, Unlocked)
	check("dry run restore", c, err, 2, 2)
	c, err = r.UpdateStatusWhere(ctx, feedA, nil, Unlocked)
	check("restore FEED-A", c, err, 2, 2)
	if status(0) != Unlocked || status(2) != Unlocked {
		t.Fatal("not restored")
	}
	if _, err := r.UpdateStatusWhere(ctx, feedA, nil, Locked); err == nil {
		t.Fatal("bulk lock accepted")
	}
	if _, err := r.CountStatusChange(ctx, feedA, nil, Locked); err == nil {
		t.Fatal("bulk lock count accepted")
	}

	// More streams than one chunk: every one changes, in several
	// transactions, and nothing outside the selection does.
	n := 2*bulkChunk + 37
	var many []*Stream
	for i := range n {
		a := new(attr.Map)
		a.Put("Batch", fmt.Sprint(i%2))
		many = append(many, &Stream{Feed: "BULK", Type: "Raw Events", Node: "n", Attributes: a})
	}
	apply(t, r, &Batch{Create: many})
	apply(t, r, &Batch{Unlock: many})
	odd := mustExpr(t, opn("AND", tm("Feed", "EQUALS", "BULK"), tm("attribute:batch", "EQUALS", "1")))
	c, err = r.UpdateStatusWhere(ctx, odd, []string{"BULK", "FEED-A"}, Deleted)
	check("bulk delete of many", c, err, int64(n/2), int64(n/2))
	p, err := r.FindStreams(ctx, StreamQuery{Expr: mustExpr(t, tm("Status", "EQUALS", "DELETED")), FeedIn: []string{"BULK"}, Count: true})
	if err != nil || p.Total != int64(n/2) {
		t.Fatalf("deleted after bulk: %d %v", p.Total, err)
	}
	c, err = r.UpdateStatusWhere(ctx, mustExpr(t, tm("Feed", "EQUALS", "BULK")), nil, Unlocked)
	check("bulk restore of many", c, err, int64(n), int64(n/2))
	if status(1) != Unlocked || status(0) != Unlocked {
		t.Fatal("streams outside the selection changed")
	}
}

// TestFindStreamsContext: a cancelled query fails rather than hanging.
func TestFindStreamsContext(t *testing.T) {
	r := openRepo(t, engineCases[0].fresh(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.FindStreams(ctx, StreamQuery{}); err == nil {
		t.Fatal("cancelled find succeeded")
	}
}
