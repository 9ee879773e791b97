package meta

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// TestProxy runs the proxy forwarding-state tests once per engine.
func TestProxy(t *testing.T) {
	for _, ec := range engineCases {
		t.Run(ec.name, func(t *testing.T) {
			tests := []struct {
				name string
				fn   func(t *testing.T, loc location)
			}{
				{"UnaggregatedStreams", testProxyUnaggregatedStreams},
				{"ApplyAggregation", testProxyApplyAggregation},
				{"CloseClosedRollsBack", testProxyCloseClosedRollsBack},
				{"DueForwards", testProxyDueForwards},
				{"PullForwardsBack", testProxyPullForwardsBack},
				{"ForwardAttemptFailed", testProxyForwardAttemptFailed},
				{"ErrorLogBound", testProxyErrorLogBound},
				{"ErrorLogOversizedLine", testProxyErrorLogOversizedLine},
				{"ErrorLogOversizedMultibyteLine", testProxyErrorLogOversizedMultibyteLine},
				{"ErrorInvalidUTF8", testProxyErrorInvalidUTF8},
				{"ForwardSent", testProxyForwardSent},
				{"FinishedAggregates", testProxyFinishedAggregates},
				{"BigAggregateDeletedAndPurged", testProxyBigAggregate},
				{"ConcurrentLastSends", testProxyConcurrentLastSends},
				{"ListForwards", testProxyListForwards},
				{"ListForwardsRetryingAlone", testProxyListForwardsRetryingAlone},
				{"SummariseForwards", testProxySummariseForwards},
				{"ReplayForwards", testProxyReplayForwards},
				{"PendingBytes", testProxyPendingBytes},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, ec.fresh(t))
				})
			}
		})
	}
}

// pxStreams creates n complete (UNLOCKED) streams of feedName, each of
// fileSize bytes on disk.
func pxStreams(t *testing.T, r *Repo, feedName string, n int, fileSize int64) []*Stream {
	t.Helper()
	ss := make([]*Stream, n)
	for i := range ss {
		ss[i] = newStream(feedName, "n1", fmt.Sprintf("r%d", i))
		ss[i].FileSize = fileSize
		ss[i].RawSize = fileSize * 2
		ss[i].Parts = 1
	}
	apply(t, r, &Batch{Create: ss, Unlock: ss})
	return ss
}

// pxSetStatusMs overrides a stream's status time (Unlock sets it to now).
func pxSetStatusMs(t *testing.T, r *Repo, id, ms int64) {
	t.Helper()
	if _, err := r.db.ExecContext(t.Context(), `UPDATE streams SET status_ms = $1 WHERE id = $2`, ms, id); err != nil {
		t.Fatal(err)
	}
}

// pxCount runs a COUNT(*) query.
func pxCount(t *testing.T, r *Repo, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := r.db.QueryRowContext(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// pxClosed creates an aggregate of ss, closed at closeMs and queued for
// dests (none: closed, but waiting for no destination).
func pxClosed(t *testing.T, r *Repo, ss []*Stream, bytes, closeMs int64, dests ...string) *Aggregate {
	t.Helper()
	a := &Aggregate{Feed: ss[0].Feed, Type: ss[0].Type, Open: true, GUID: fmt.Sprintf("guid-%d-%d", ss[0].ID, closeMs),
		Items: len(ss), Bytes: bytes, CreateMs: closeMs - 10, CloseMs: closeMs}
	b := &AggregationBatch{New: []*Aggregate{a}, Close: []*Aggregate{a}, Destinations: dests}
	for _, s := range ss {
		b.Items = append(b.Items, AggregateItem{Aggregate: a, StreamID: s.ID})
	}
	if err := r.ApplyAggregation(t.Context(), b); err != nil {
		t.Fatalf("ApplyAggregation: %v", err)
	}
	if a.ID == 0 || a.Open {
		t.Fatalf("after ApplyAggregation: %+v", a)
	}
	return a
}

// pxForward returns the forward of aggregate id to dest.
func pxForward(t *testing.T, r *Repo, id int64, dest string) Forward {
	t.Helper()
	fs, err := r.ListForwards(t.Context(), ForwardFilter{Destination: dest})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no forward of aggregate %d to %q", id, dest)
	return Forward{}
}

// pxFail records a failed attempt leaving f in state with attempts.
func pxFail(t *testing.T, r *Repo, f Forward, state ForwardState, attempts int, nextMs int64) Forward {
	t.Helper()
	f.State, f.Attempts, f.NextMs = state, attempts, nextMs
	if f.FirstMs == 0 {
		f.FirstMs = nextMs - 1
	}
	f.LastMs, f.LastStatus, f.Error = nextMs-1, 999, fmt.Sprintf("failure %d", attempts)
	if err := r.ForwardAttemptFailed(t.Context(), f, f.Error); err != nil {
		t.Fatalf("ForwardAttemptFailed: %v", err)
	}
	return pxForward(t, r, f.ID, f.Destination)
}

// fwdKeys lists forwards as "aggregate/destination".
func fwdKeys(fs []Forward) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%d/%s", f.ID, f.Destination))
	}
	return out
}

func fwdKey(a *Aggregate, dest string) string { return fmt.Sprintf("%d/%s", a.ID, dest) }

func aggIDs(fs []Forward) []int64 {
	out := []int64{}
	for _, f := range fs {
		out = append(out, f.ID)
	}
	return out
}

func streamIDs(ss []*Stream) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func testProxyUnaggregatedStreams(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 4, 10)
	for i, s := range ss {
		pxSetStatusMs(t, r, s.ID, int64(i+1)*1000)
	}
	locked := newStream("FEED-A", "n1", "locked")
	apply(t, r, &Batch{Create: []*Stream{locked}})
	pxSetStatusMs(t, r, locked.ID, 1500)
	deleted := pxStreams(t, r, "FEED-A", 1, 10)[0]
	if err := r.SetStreamStatus(ctx, deleted.ID, Deleted); err != nil {
		t.Fatal(err)
	}
	pxSetStatusMs(t, r, deleted.ID, 2500)

	un := func(since int64, limit int) []int64 {
		t.Helper()
		got, err := r.UnaggregatedStreams(ctx, since, limit)
		if err != nil {
			t.Fatalf("UnaggregatedStreams(%d, %d): %v", since, limit, err)
		}
		for _, s := range got {
			if s.Status != Unlocked {
				t.Errorf("UnaggregatedStreams returned %d in status %s", s.ID, s.Status)
			}
		}
		return ids(got)
	}
	all := streamIDs(ss)
	for _, tc := range []struct {
		since int64
		limit int
		want  []int64
	}{
		{0, 100, all},
		{1000, 100, all},
		{1001, 100, all[1:]},
		{3000, 100, all[2:]},
		{4000, 100, all[3:]},
		{4001, 100, []int64{}},
		{0, 2, all[:2]},
		{2000, 1, all[1:2]},
	} {
		if got := un(tc.since, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("UnaggregatedStreams(since %d, limit %d) = %v, want %v", tc.since, tc.limit, got, tc.want)
		}
	}
	got, err := r.UnaggregatedStreams(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	// What aggregating takes, and no attributes.
	if len(got) != 1 || got[0].Feed != "FEED-A" || got[0].Type == "" || got[0].Status != Unlocked || got[0].Parts != 1 || got[0].RawSize != 20 || got[0].Attributes != nil {
		t.Errorf("first unaggregated stream = %+v", got)
	}

	// Once in an aggregate (open or closed), a stream waits no more.
	open := &Aggregate{Feed: "FEED-A", Type: "Raw Events", GUID: "g1", Open: true, CreateMs: 1}
	if err := r.ApplyAggregation(ctx, &AggregationBatch{New: []*Aggregate{open},
		Items: []AggregateItem{{open, ss[0].ID}, {open, ss[2].ID}}}); err != nil {
		t.Fatal(err)
	}
	if got, want := un(0, 100), []int64{ss[1].ID, ss[3].ID}; !slices.Equal(got, want) {
		t.Errorf("after aggregating 1 and 3: %v, want %v", got, want)
	}
	pxClosed(t, r, ss[3:4], 10, 5000, "d1")
	if got, want := un(0, 100), []int64{ss[1].ID}; !slices.Equal(got, want) {
		t.Errorf("after aggregating 4: %v, want %v", got, want)
	}
}

func testProxyApplyAggregation(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 4, 10)

	if got, err := r.OpenAggregates(ctx); err != nil || len(got) != 0 {
		t.Fatalf("OpenAggregates on an empty repository = %v, %v", got, err)
	}
	// The caller marks a new aggregate open (as the aggregator does).
	a := &Aggregate{Feed: "FEED-A", Type: "Raw Events", GUID: "guid-a", Open: true, Items: 1, Bytes: 10, CreateMs: 1000}
	if err := r.ApplyAggregation(ctx, &AggregationBatch{New: []*Aggregate{a},
		Items: []AggregateItem{{a, ss[0].ID}}, Destinations: []string{"d1"}}); err != nil {
		t.Fatal(err)
	}
	if a.ID == 0 || !a.Open {
		t.Fatalf("new aggregate after commit: %+v", a)
	}
	wantA := Aggregate{ID: a.ID, Feed: "FEED-A", Type: "Raw Events", GUID: "guid-a", Open: true, Items: 1, Bytes: 10, CreateMs: 1000}
	if got, err := r.OpenAggregates(ctx); err != nil || !reflect.DeepEqual(got, []Aggregate{wantA}) {
		t.Fatalf("OpenAggregates = %+v, %v; want %+v", got, err, wantA)
	}
	// An open aggregate is queued for nothing yet.
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_forwards`); n != 0 {
		t.Fatalf("%d forwards for an open aggregate", n)
	}

	// One batch: a new aggregate b takes a stream and is closed at once;
	// the existing a takes another stream and saves its counters.
	b := &Aggregate{Feed: "FEED-A", Type: "Raw Events", GUID: "guid-b", Open: true, CreateMs: 2000}
	a.Items, a.Bytes = 2, 30
	b.Items, b.Bytes, b.CloseMs = 1, 7, 5000
	if err := r.ApplyAggregation(ctx, &AggregationBatch{
		New:          []*Aggregate{b},
		Items:        []AggregateItem{{a, ss[1].ID}, {b, ss[2].ID}},
		Save:         []*Aggregate{a},
		Close:        []*Aggregate{b},
		Destinations: []string{"d1", "d2"},
	}); err != nil {
		t.Fatal(err)
	}
	if b.ID == 0 || b.ID == a.ID || b.Open {
		t.Fatalf("b after commit: %+v (a is %d)", b, a.ID)
	}
	if !a.Open {
		t.Fatal("saving a closed it")
	}
	wantA.Items, wantA.Bytes = 2, 30
	if got, err := r.OpenAggregates(ctx); err != nil || !reflect.DeepEqual(got, []Aggregate{wantA}) {
		t.Fatalf("OpenAggregates = %+v, %v; want %+v", got, err, wantA)
	}
	for _, tc := range []struct {
		agg  *Aggregate
		want []int64
	}{{a, []int64{ss[0].ID, ss[1].ID}}, {b, []int64{ss[2].ID}}} {
		got, err := r.AggregateStreams(ctx, tc.agg.ID)
		if err != nil || !slices.Equal(ids(got), tc.want) {
			t.Errorf("AggregateStreams(%d) = %v, %v; want %v", tc.agg.ID, ids(got), err, tc.want)
		}
		for _, s := range got {
			if s.Status != Unlocked || s.Feed != "FEED-A" || s.FileSize != 10 {
				t.Errorf("AggregateStreams(%d) stream %+v", tc.agg.ID, s)
			}
		}
	}
	if got, err := r.AggregateStreams(ctx, 999999); err != nil || len(got) != 0 {
		t.Errorf("AggregateStreams(missing) = %v, %v", got, err)
	}
	fs, err := r.ListForwards(ctx, ForwardFilter{})
	if err != nil {
		t.Fatal(err)
	}
	wantB := Aggregate{ID: b.ID, Feed: "FEED-A", Type: "Raw Events", GUID: "guid-b", Items: 1, Bytes: 7, CreateMs: 2000, CloseMs: 5000}
	want := []Forward{
		{Aggregate: wantB, Destination: "d1", State: ForwardQueued, NextMs: 5000},
		{Aggregate: wantB, Destination: "d2", State: ForwardQueued, NextMs: 5000},
	}
	if !reflect.DeepEqual(fs, want) {
		t.Fatalf("forwards after closing b\n got %+v\nwant %+v", fs, want)
	}

	// Closing an existing aggregate stores its final counters and queues it.
	a.Items, a.Bytes, a.CloseMs = 3, 45, 7000
	if err := r.ApplyAggregation(ctx, &AggregationBatch{Items: []AggregateItem{{a, ss[3].ID}},
		Close: []*Aggregate{a}, Destinations: []string{"d1"}}); err != nil {
		t.Fatal(err)
	}
	if a.Open {
		t.Fatal("a still open after Close")
	}
	if got, err := r.OpenAggregates(ctx); err != nil || len(got) != 0 {
		t.Fatalf("OpenAggregates after closing all = %+v, %v", got, err)
	}
	wantA.Open, wantA.Items, wantA.Bytes, wantA.CloseMs = false, 3, 45, 7000
	if got := pxForward(t, r, a.ID, "d1"); !reflect.DeepEqual(got, Forward{Aggregate: wantA, Destination: "d1", State: ForwardQueued, NextMs: 7000}) {
		t.Fatalf("forward of a = %+v", got)
	}
	if got, err := r.ListForwards(ctx, ForwardFilter{Destination: "d2"}); err != nil || !slices.Equal(aggIDs(got), []int64{b.ID}) {
		t.Fatalf("d2 forwards = %v, %v; a was queued only for d1", fwdKeys(got), err)
	}

	// An empty batch is harmless.
	if err := r.ApplyAggregation(ctx, &AggregationBatch{}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func testProxyCloseClosedRollsBack(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 3, 10)
	// Queued for d0 only, so that re-queueing it for d1 and d2 would not
	// collide: the batch must fail because it is closed already.
	closed := pxClosed(t, r, ss[:1], 10, 1000, "d0")
	open := &Aggregate{Feed: "FEED-A", GUID: "open", Open: true, Items: 1, Bytes: 10, CreateMs: 1500}
	if err := r.ApplyAggregation(ctx, &AggregationBatch{New: []*Aggregate{open}, Items: []AggregateItem{{open, ss[1].ID}}}); err != nil {
		t.Fatal(err)
	}

	snapshot := func() [4]int64 {
		return [4]int64{
			pxCount(t, r, `SELECT COUNT(*) FROM proxy_aggregates`),
			pxCount(t, r, `SELECT COUNT(*) FROM proxy_items`),
			pxCount(t, r, `SELECT COUNT(*) FROM proxy_forwards`),
			pxCount(t, r, `SELECT COALESCE(SUM(items * 1000 + bytes), 0) FROM proxy_aggregates`),
		}
	}
	before := snapshot()

	// Everything in the batch is valid except closing `closed` again.
	fresh := &Aggregate{Feed: "FEED-A", GUID: "fresh", Open: true, Items: 1, Bytes: 10, CreateMs: 2000, CloseMs: 3000}
	reclose := *closed
	reclose.CloseMs, reclose.Items, reclose.Bytes = 9000, 50, 500
	open.Items, open.Bytes = 9, 99
	err := r.ApplyAggregation(ctx, &AggregationBatch{
		New:          []*Aggregate{fresh},
		Items:        []AggregateItem{{fresh, ss[2].ID}},
		Save:         []*Aggregate{open},
		Close:        []*Aggregate{fresh, &reclose},
		Destinations: []string{"d1", "d2"},
	})
	if err == nil {
		t.Fatal("closing a closed aggregate succeeded")
	}
	if !strings.Contains(err.Error(), fmt.Sprint(closed.ID)) {
		t.Errorf("error %q does not name aggregate %d", err, closed.ID)
	}
	if after := snapshot(); after != before {
		t.Fatalf("failed batch changed the tables: (aggregates, items, forwards, counters) %v -> %v", before, after)
	}
	// The structs are left as they were.
	if fresh.ID != 0 || !fresh.Open {
		t.Errorf("fresh aggregate after a failed batch: %+v", fresh)
	}
	if got, err := r.UnaggregatedStreams(ctx, 0, 10); err != nil || !slices.Equal(ids(got), []int64{ss[2].ID}) {
		t.Errorf("the failed batch's item stayed: unaggregated = %v, %v", ids(got), err)
	}
	if got, err := r.OpenAggregates(ctx); err != nil || len(got) != 1 || got[0].ID != open.ID || got[0].Items != 1 || got[0].Bytes != 10 {
		t.Errorf("open aggregate after the failed batch: %+v, %v", got, err)
	}
	if got := pxForward(t, r, closed.ID, "d0"); got.CloseMs != 1000 || got.Items != 1 || got.Bytes != 10 {
		t.Errorf("closed aggregate changed: %+v", got)
	}
	if got, err := r.ListForwards(ctx, ForwardFilter{}); err != nil || !slices.Equal(fwdKeys(got), []string{fwdKey(closed, "d0")}) {
		t.Errorf("forwards after the failed batch: %v, %v", fwdKeys(got), err)
	}

	// The same batch without the bad close goes through.
	if err := r.ApplyAggregation(ctx, &AggregationBatch{New: []*Aggregate{fresh}, Items: []AggregateItem{{fresh, ss[2].ID}},
		Close: []*Aggregate{fresh}, Destinations: []string{"d1"}}); err != nil {
		t.Fatal(err)
	}
	if fresh.ID == 0 || fresh.Open {
		t.Fatalf("fresh after retry: %+v", fresh)
	}
}

// testProxyPullForwardsBack: after the clock stepped back to 1500, the
// aggregates queued by a later clock are due at 1500: one closed at 3000
// (never tried) and a retry whose last attempt was at 2499; a retry from
// before 1500 and a failed one are left as they are, as is another
// destination's queue.
func testProxyPullForwardsBack(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 5, 10)
	a1 := pxClosed(t, r, ss[0:1], 10, 3000, "d1", "d2")
	a2 := pxClosed(t, r, ss[1:2], 10, 1000, "d1")
	a3 := pxClosed(t, r, ss[2:3], 10, 1000, "d1")
	a4 := pxClosed(t, r, ss[3:4], 10, 1000, "d1")
	a5 := pxClosed(t, r, ss[4:5], 10, 1000, "d1")
	pxFail(t, r, pxForward(t, r, a2.ID, "d1"), ForwardQueued, 1, 2500) // last attempt 2499
	pxFail(t, r, pxForward(t, r, a3.ID, "d1"), ForwardQueued, 1, 1400) // last attempt 1399, due 1400
	pxFail(t, r, pxForward(t, r, a4.ID, "d1"), ForwardQueued, 2, 1600) // last attempt 1599, due 1600
	pxFail(t, r, pxForward(t, r, a5.ID, "d1"), ForwardFailed, 3, 2500)
	n, err := r.PullForwardsBack(ctx, "d1", 1500)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("PullForwardsBack pulled %d back, want 3 (a1, a2, a4)", n)
	}
	for _, tc := range []struct {
		a    *Aggregate
		dest string
		next int64
	}{{a1, "d1", 1500}, {a1, "d2", 3000}, {a2, "d1", 1500}, {a3, "d1", 1400}, {a4, "d1", 1500}, {a5, "d1", 2500}} {
		if f := pxForward(t, r, tc.a.ID, tc.dest); f.NextMs != tc.next {
			t.Errorf("aggregate %d for %s: next %d, want %d", tc.a.ID, tc.dest, f.NextMs, tc.next)
		}
	}
}

func testProxyDueForwards(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 6, 10)
	a1 := pxClosed(t, r, ss[0:1], 10, 3000, "d1", "d2")
	a2 := pxClosed(t, r, ss[1:2], 10, 1000, "d1", "d2")
	a3 := pxClosed(t, r, ss[2:3], 10, 2000, "d1", "d2")
	a4 := pxClosed(t, r, ss[3:4], 10, 2000, "d1", "d2")
	a5 := pxClosed(t, r, ss[4:5], 10, 500, "d1") // moved to FAILED below
	a6 := pxClosed(t, r, ss[5:6], 10, 500, "d2")
	pxFail(t, r, pxForward(t, r, a5.ID, "d1"), ForwardFailed, 3, 100)
	// a3 for d1 is due again later, after a failure.
	pxFail(t, r, pxForward(t, r, a3.ID, "d1"), ForwardQueued, 1, 2500)

	due := func(dest string, now int64, skip []int64, limit int) []int64 {
		t.Helper()
		fs, err := r.DueForwards(ctx, dest, now, skip, limit)
		if err != nil {
			t.Fatalf("DueForwards(%s, %d, %v, %d): %v", dest, now, skip, limit, err)
		}
		for _, f := range fs {
			if f.Destination != dest || f.State != ForwardQueued || f.NextMs > now {
				t.Errorf("DueForwards(%s, %d) returned %+v", dest, now, f)
			}
		}
		return aggIDs(fs)
	}
	for _, tc := range []struct {
		dest  string
		now   int64
		skip  []int64
		limit int
		want  []*Aggregate
	}{
		{"d1", 999, nil, 10, nil},
		{"d1", 1000, nil, 10, []*Aggregate{a2}},
		{"d1", 2000, nil, 10, []*Aggregate{a2, a4}},
		{"d1", 2500, nil, 10, []*Aggregate{a2, a4, a3}},
		{"d1", 9000, nil, 10, []*Aggregate{a2, a4, a3, a1}},
		{"d1", 9000, nil, 2, []*Aggregate{a2, a4}},
		{"d1", 9000, []int64{a4.ID}, 2, []*Aggregate{a2, a3}},
		{"d1", 9000, []int64{a2.ID, a3.ID, 999999}, 10, []*Aggregate{a4, a1}},
		{"d1", 9000, []int64{a1.ID, a2.ID, a3.ID, a4.ID}, 10, nil},
		{"d2", 2000, nil, 10, []*Aggregate{a6, a2, a3, a4}}, // next_ms ties are ordered by id
		{"d2", 9000, []int64{a3.ID}, 10, []*Aggregate{a6, a2, a4, a1}},
		{"d3", 9000, nil, 10, nil},
	} {
		want := []int64{}
		for _, a := range tc.want {
			want = append(want, a.ID)
		}
		if got := due(tc.dest, tc.now, tc.skip, tc.limit); !slices.Equal(got, want) {
			t.Errorf("DueForwards(%s, now %d, skip %v, limit %d) = %v, want %v", tc.dest, tc.now, tc.skip, tc.limit, got, want)
		}
	}
	fs, err := r.DueForwards(ctx, "d1", 1000, nil, 10)
	if err != nil || len(fs) != 1 {
		t.Fatalf("DueForwards = %+v, %v", fs, err)
	}
	want := Forward{Aggregate: Aggregate{ID: a2.ID, Feed: "FEED-A", Type: "Raw Events", GUID: a2.GUID, Items: 1, Bytes: 10,
		CreateMs: 990, CloseMs: 1000}, Destination: "d1", State: ForwardQueued, NextMs: 1000}
	if !reflect.DeepEqual(fs[0], want) {
		t.Errorf("due forward\n got %+v\nwant %+v", fs[0], want)
	}

	for _, tc := range []struct {
		dest string
		skip []int64 // being sent: not what the forwarder waits for
		ms   int64
		ok   bool
	}{
		{"d1", nil, 1000, true},
		{"d2", nil, 500, true},
		{"d3", nil, 0, false},
		{"d1", []int64{a2.ID}, 2000, true},
		{"d1", []int64{a2.ID, a4.ID}, 2500, true},
		{"d1", []int64{a1.ID, a2.ID, a3.ID, a4.ID}, 0, false},
		{"d2", []int64{a6.ID, a2.ID}, 2000, true},
	} {
		ms, ok, err := r.NextForwardMs(ctx, tc.dest, tc.skip)
		if err != nil || ms != tc.ms || ok != tc.ok {
			t.Errorf("NextForwardMs(%s, skip %v) = %d, %v, %v; want %d, %v (FAILED forwards are not queued)", tc.dest, tc.skip, ms, ok, err, tc.ms, tc.ok)
		}
	}
}

func testProxyForwardAttemptFailed(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 1, 10)
	a := pxClosed(t, r, ss, 10, 1000, "d1", "d2")

	f := pxForward(t, r, a.ID, "d1")
	f.State, f.Attempts, f.FirstMs, f.LastMs, f.NextMs, f.LastStatus, f.Error = ForwardQueued, 1, 1100, 1100, 11100, 110, "HTTP 503 - boom"
	if err := r.ForwardAttemptFailed(ctx, f, "attempt 1 - boom"); err != nil {
		t.Fatal(err)
	}
	want := f
	want.ErrorLog = "attempt 1 - boom\n"
	if got := pxForward(t, r, a.ID, "d1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the first failure\n got %+v\nwant %+v", got, want)
	}

	f.State, f.Attempts, f.LastMs, f.NextMs, f.LastStatus, f.Error = ForwardFailed, 2, 2200, 2200, 400, "refused"
	f.ErrorLog = "ignored: the log is appended to, never replaced"
	if err := r.ForwardAttemptFailed(ctx, f, "attempt 2 - refused"); err != nil {
		t.Fatal(err)
	}
	want = f
	want.ErrorLog = "attempt 1 - boom\nattempt 2 - refused\n"
	if got := pxForward(t, r, a.ID, "d1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the second failure\n got %+v\nwant %+v", got, want)
	}
	// The other destination's forward is untouched.
	if got := pxForward(t, r, a.ID, "d2"); got.State != ForwardQueued || got.Attempts != 0 || got.ErrorLog != "" || got.NextMs != 1000 {
		t.Fatalf("d2 forward changed: %+v", got)
	}

	for _, bad := range []Forward{
		{Aggregate: Aggregate{ID: 999999}, Destination: "d1", State: ForwardQueued},
		{Aggregate: Aggregate{ID: a.ID}, Destination: "nowhere", State: ForwardQueued},
	} {
		err := r.ForwardAttemptFailed(ctx, bad, "x")
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("ForwardAttemptFailed(%d, %s) = %v, want ErrNotFound", bad.ID, bad.Destination, err)
		}
	}
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_forwards`); n != 2 {
		t.Errorf("%d forwards after failed records, want 2", n)
	}
}

func testProxyErrorLogBound(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	a := pxClosed(t, r, pxStreams(t, r, "FEED-A", 1, 10), 10, 1000, "d1")
	f := pxForward(t, r, a.ID, "d1")
	line := func(i int) string {
		return fmt.Sprintf("2026-01-01T00:00:00.000Z - attempt %04d - HTTP 503 - %s", i, strings.Repeat("x", 37+i%23))
	}
	const n = 400 // about 40 KiB of lines
	for i := 1; i <= n; i++ {
		f.Attempts = i
		if err := r.ForwardAttemptFailed(ctx, f, line(i)); err != nil {
			t.Fatal(err)
		}
	}
	log := pxForward(t, r, a.ID, "d1").ErrorLog
	if len(log) > maxErrorLog {
		t.Fatalf("error log is %d bytes, bound is %d", len(log), maxErrorLog)
	}
	if len(log) < maxErrorLog-len(line(n))-1 {
		t.Errorf("error log is %d bytes: more was dropped than needed to stay within %d", len(log), maxErrorLog)
	}
	if !strings.HasSuffix(log, "\n") {
		t.Fatalf("error log does not end with a newline: ...%q", log[max(0, len(log)-40):])
	}
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	// Whole lines only, consecutive, ending with the newest.
	first := n - len(lines) + 1
	for i, l := range lines {
		if l != line(first+i) {
			t.Fatalf("error log line %d = %q, want %q (log starts %q)", i, l, line(first+i), log[:min(len(log), 80)])
		}
	}
	if first <= 1 {
		t.Fatalf("no line was dropped (%d lines kept)", len(lines))
	}
}

// testProxyErrorLogOversizedLine records one failure whose line alone is
// longer than the log's bound: the newest attempt must still leave a
// trace in the log, and not crowd out the older lines.
func testProxyErrorLogOversizedLine(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	a := pxClosed(t, r, pxStreams(t, r, "FEED-A", 1, 10), 10, 1000, "d1")
	f := pxForward(t, r, a.ID, "d1")
	f.Attempts = 1
	if err := r.ForwardAttemptFailed(ctx, f, "attempt 1 - short"); err != nil {
		t.Fatal(err)
	}
	f.Attempts = 2
	long := "attempt 2 - " + strings.Repeat("y", maxErrorLog+100) + " END"
	if err := r.ForwardAttemptFailed(ctx, f, long); err != nil {
		t.Fatal(err)
	}
	log := pxForward(t, r, a.ID, "d1").ErrorLog
	if len(log) > maxErrorLog {
		t.Fatalf("error log is %d bytes, bound is %d", len(log), maxErrorLog)
	}
	if !strings.HasSuffix(log, " END\n") || !strings.HasPrefix(log, "attempt 1 - short\nattempt 2 - ") {
		t.Errorf("a single log line longer than maxErrorLog (%d) must neither empty the error log nor vanish itself: "+
			"got %d bytes %q...%q", maxErrorLog, len(log), log[:min(len(log), 60)], log[max(0, len(log)-20):])
	}
}

// testProxyErrorLogOversizedMultibyteLine: shortening an oversized line
// must not cut a character in two (PostgreSQL refuses invalid UTF-8, and
// the failure would go unrecorded).
func testProxyErrorLogOversizedMultibyteLine(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	a := pxClosed(t, r, pxStreams(t, r, "FEED-A", 1, 10), 10, 1000, "d1")
	f := pxForward(t, r, a.ID, "d1")
	f.Attempts = 1
	if err := r.ForwardAttemptFailed(ctx, f, "attempt 1 - short"); err != nil {
		t.Fatal(err)
	}
	// Two-byte runes after an odd-length prefix, so that any cut at an
	// even byte offset lands inside one; and the same with a three-byte
	// rune, for any other offset.
	for i, long := range []string{
		"attempt 2 - x" + strings.Repeat("é", maxErrorLog),
		"attempt 3 - " + strings.Repeat("€", maxErrorLog),
		"attempt 4 - x" + strings.Repeat("€", maxErrorLog),
		"attempt 5 - xy" + strings.Repeat("€", maxErrorLog),
	} {
		f.Attempts = i + 2
		if err := r.ForwardAttemptFailed(ctx, f, long); err != nil {
			t.Fatalf("ForwardAttemptFailed with a long line of multi-byte characters (attempt %d): %v", i+2, err)
		}
		log := pxForward(t, r, a.ID, "d1").ErrorLog
		if !utf8.ValidString(log) {
			t.Fatalf("attempt %d: error log is not valid UTF-8: a long line was cut inside a character", i+2)
		}
		// Older lines are kept as long as they fit (here: the short one
		// at least up to the third long line).
		keep := "attempt "
		if i < 2 {
			keep = "attempt 1 - short\n"
		}
		if len(log) > maxErrorLog || !strings.HasPrefix(log, keep) || !strings.HasSuffix(log, long[len(long)-6:]+"\n") {
			t.Fatalf("attempt %d: error log of %d bytes starts %q, want %q", i+2, len(log), log[:min(len(log), 20)], keep)
		}
	}
}

// testProxyErrorInvalidUTF8: a downstream's error text is not always
// UTF-8 (an HTTP header may carry Latin-1 bytes). Recording the failure
// must still work on both engines: PostgreSQL refuses invalid UTF-8 in
// TEXT, and an unrecorded failure leaves the forward due at once, so it
// would be resent without delay and never reach the failure area.
func testProxyErrorInvalidUTF8(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	a := pxClosed(t, r, pxStreams(t, r, "FEED-A", 1, 10), 10, 1000, "d1")
	f := pxForward(t, r, a.ID, "d1")
	f.State, f.Attempts, f.FirstMs, f.LastMs, f.NextMs, f.LastStatus = ForwardQueued, 1, 1100, 1100, 11100, 999
	f.Error = "HTTP 500 - status 999 - caf\xe9 ferm\xe9"
	if err := r.ForwardAttemptFailed(ctx, f, "attempt 1 - "+f.Error); err != nil {
		t.Fatalf("ForwardAttemptFailed with an error text that is not UTF-8: %v "+
			"(the failure goes unrecorded and the forward stays due at once)", err)
	}
	got := pxForward(t, r, a.ID, "d1")
	if got.Attempts != 1 || got.NextMs != 11100 {
		t.Fatalf("failure not recorded: %+v", got)
	}
	for _, v := range []string{got.Error, got.ErrorLog} {
		if !utf8.ValidString(v) || !strings.Contains(v, "status 999 - caf") {
			t.Errorf("stored error text %q: want valid UTF-8 keeping the readable part", v)
		}
	}
}

func testProxyForwardSent(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 3, 10)
	a := pxClosed(t, r, ss[:2], 20, 1000, "d1", "d2")
	b := pxClosed(t, r, ss[2:], 10, 2000, "d1", "d2")

	done, err := r.ForwardSent(ctx, a.ID, "d1")
	if err != nil || len(done) != 0 {
		t.Fatalf("first ForwardSent = %v, %v; want nothing done yet", ids(done), err)
	}
	if got, err := r.ListForwards(ctx, ForwardFilter{}); err != nil ||
		!slices.Equal(fwdKeys(got), []string{fwdKey(a, "d2"), fwdKey(b, "d1"), fwdKey(b, "d2")}) {
		t.Fatalf("forwards after sending a to d1: %v, %v", fwdKeys(got), err)
	}
	if got, err := r.AggregateStreams(ctx, a.ID); err != nil || !slices.Equal(ids(got), streamIDs(ss[:2])) {
		t.Fatalf("a's streams after the first send: %v, %v", ids(got), err)
	}
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_aggregates WHERE id = $1`, a.ID); n != 1 {
		t.Fatal("a removed while d2 still waits for it")
	}

	done, err = r.ForwardSent(ctx, a.ID, "d2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(done), streamIDs(ss[:2])) {
		t.Fatalf("second ForwardSent returned %v, want %v", ids(done), streamIDs(ss[:2]))
	}
	// What removing their data takes, and no attributes.
	for i, s := range done {
		w := ss[i]
		if s.Status != Deleted || s.Feed != "FEED-A" || s.Type != w.Type || s.CreateMs != w.CreateMs || s.Pack != w.Pack || s.Attributes != nil {
			t.Errorf("returned stream %+v, want one like %+v", s, w)
		}
	}
	for _, s := range ss[:2] {
		if got, err := r.GetStream(ctx, s.ID); err != nil || got.Status != Deleted {
			t.Errorf("stream %d after its aggregate was sent everywhere: %+v, %v", s.ID, got, err)
		}
	}
	if got, err := r.GetStream(ctx, ss[2].ID); err != nil || got.Status != Unlocked {
		t.Errorf("stream of b: %+v, %v", got, err)
	}
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_aggregates WHERE id = $1`, a.ID); n != 0 {
		t.Error("aggregate a kept after its last send")
	}
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_items WHERE aggregate_id = $1`, a.ID); n != 0 {
		t.Errorf("%d items of a kept after its last send", n)
	}
	if got, err := r.ListForwards(ctx, ForwardFilter{}); err != nil ||
		!slices.Equal(fwdKeys(got), []string{fwdKey(b, "d1"), fwdKey(b, "d2")}) {
		t.Fatalf("forwards after sending a everywhere: %v, %v", fwdKeys(got), err)
	}
	// Recording the last send again (a crash before the caller's clean-up)
	// is harmless.
	if done, err := r.ForwardSent(ctx, a.ID, "d2"); err != nil || len(done) != 0 {
		t.Errorf("repeated ForwardSent = %v, %v", ids(done), err)
	}

	if got, err := r.DeletedStreams(ctx, 10); err != nil || !slices.Equal(ids(got), streamIDs(ss[:2])) {
		t.Fatalf("DeletedStreams = %v, %v", ids(got), err)
	}
	if got, err := r.DeletedStreams(ctx, 1); err != nil || !slices.Equal(ids(got), streamIDs(ss[:1])) {
		t.Fatalf("DeletedStreams(limit 1) = %v, %v", ids(got), err)
	}

	// PurgeStreams removes DELETED rows only: ss[2] is UNLOCKED and stays.
	if err := r.PurgeStreams(ctx, []int64{ss[0].ID, ss[1].ID, ss[2].ID, 999999}); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss[:2] {
		if _, err := r.GetStream(ctx, s.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("purged stream %d: %v", s.ID, err)
		}
	}
	if got, err := r.GetStream(ctx, ss[2].ID); err != nil || got.Status != Unlocked {
		t.Errorf("PurgeStreams removed or changed an UNLOCKED stream: %+v, %v", got, err)
	}
	if got, err := r.DeletedStreams(ctx, 10); err != nil || len(got) != 0 {
		t.Errorf("DeletedStreams after purge = %v, %v", ids(got), err)
	}
	if err := r.PurgeStreams(ctx, nil); err != nil {
		t.Errorf("PurgeStreams(nil): %v", err)
	}
}

// testProxyBigAggregate: an aggregate of more streams than one INSERT of
// items adds and one purge transaction removes is filed whole, marked
// DELETED as a whole when sent, and purged in chunks; a stream of another
// aggregate is untouched. On SQLite the purge
// looks its ids up by rowid, not by walking the DELETED status entries.
func testProxyBigAggregate(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	n := 2*purgeChunk + 7
	ss := pxStreams(t, r, "FEED-A", n+1, 10)
	a := pxClosed(t, r, ss[:n], int64(10*n), 1000, "d1")
	other := pxClosed(t, r, ss[n:], 10, 2000, "d1")
	done, err := r.ForwardSent(ctx, a.ID, "d1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(done), streamIDs(ss[:n])) {
		t.Fatalf("ForwardSent returned %d streams, want the aggregate's %d", len(done), n)
	}
	if got := pxCount(t, r, `SELECT COUNT(*) FROM streams WHERE status = $1`, string(Deleted)); got != int64(n) {
		t.Fatalf("%d streams DELETED, want %d", got, n)
	}
	if err := r.PurgeStreams(ctx, ids(done)); err != nil {
		t.Fatal(err)
	}
	if got := pxCount(t, r, `SELECT COUNT(*) FROM streams`); got != 1 {
		t.Errorf("%d streams left after the purge, want 1 (the other aggregate's)", got)
	}
	if got, err := r.AggregateStreams(ctx, other.ID); err != nil || len(got) != 1 || got[0].Status != Unlocked {
		t.Errorf("the other aggregate's stream: %+v, %v", got, err)
	}
	if r.Engine() == engineSQLite {
		args := []any{string(Deleted), int64(1), int64(2), int64(3)}
		plan := queryPlan(t, r, sqlitePurgeSQL(3), args...)
		if !strings.Contains(plan, "PRIMARY KEY") || strings.Contains(plan, "streams_status") {
			t.Errorf("the SQLite purge does not look ids up by rowid:\n%s", plan)
		}
	}
}

// testProxyConcurrentLastSends: two destinations record the same
// aggregate as sent at the same moment; exactly one of them finds it
// finished and removes it. (On PostgreSQL, at READ COMMITTED, each could
// see the other's forward still there and neither remove it, leaving the
// streams until the next start.)
func testProxyConcurrentLastSends(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	for round := range 20 {
		ss := pxStreams(t, r, "FEED-A", 2, 10)
		a := pxClosed(t, r, ss, 20, int64(1000+round), "d1", "d2")
		var (
			wg    sync.WaitGroup
			dones [2][]Stream
			errs  [2]error
		)
		start := make(chan struct{})
		for i, d := range []string{"d1", "d2"} {
			wg.Go(func() {
				<-start
				dones[i], errs[i] = r.ForwardSent(ctx, a.ID, d)
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v, %v", round, errs[0], errs[1])
		}
		if n := len(dones[0]) + len(dones[1]); n != 2 {
			t.Fatalf("round %d: the two last sends returned %d and %d streams, want 2 in all from one of them",
				round, len(dones[0]), len(dones[1]))
		}
		if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_aggregates WHERE id = $1`, a.ID); n != 0 {
			t.Fatalf("round %d: the aggregate is kept after both sends", round)
		}
	}
}

func testProxyFinishedAggregates(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 6, 10)
	finished := pxClosed(t, r, ss[0:2], 20, 1000) // closed, waiting for no destination
	open := &Aggregate{Feed: "FEED-A", GUID: "open", Open: true, Items: 1, Bytes: 10, CreateMs: 1500}
	if err := r.ApplyAggregation(ctx, &AggregationBatch{New: []*Aggregate{open}, Items: []AggregateItem{{open, ss[2].ID}}}); err != nil {
		t.Fatal(err)
	}
	failed := pxClosed(t, r, ss[3:4], 10, 2000, "d1")
	pxFail(t, r, pxForward(t, r, failed.ID, "d1"), ForwardFailed, 5, 2100)
	queued := pxClosed(t, r, ss[4:5], 10, 3000, "d1")
	// Sent to d1 already, still waiting for d2.
	half := pxClosed(t, r, ss[5:6], 10, 4000, "d1", "d2")
	if _, err := r.ForwardSent(ctx, half.ID, "d1"); err != nil {
		t.Fatal(err)
	}

	done, err := r.FinishedAggregates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(done), streamIDs(ss[0:2])) {
		t.Fatalf("FinishedAggregates returned %v, want %v", ids(done), streamIDs(ss[0:2]))
	}
	for _, s := range done {
		if s.Status != Deleted {
			t.Errorf("returned stream %+v", s)
		}
	}
	for i, s := range ss {
		got, err := r.GetStream(ctx, s.ID)
		want := Unlocked
		if i < 2 {
			want = Deleted
		}
		if err != nil || got.Status != want {
			t.Errorf("stream %d: %s, %v; want %s", i, got.Status, err, want)
		}
	}
	var left []int64
	rows, err := r.db.QueryContext(ctx, `SELECT id FROM proxy_aggregates ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	rows.Close()
	if want := []int64{open.ID, failed.ID, queued.ID, half.ID}; !slices.Equal(left, want) {
		t.Fatalf("aggregates left %v, want %v (open, failed, queued, half-sent)", left, want)
	}
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_items WHERE aggregate_id = $1`, finished.ID); n != 0 {
		t.Errorf("%d items of the finished aggregate kept", n)
	}
	if n := pxCount(t, r, `SELECT COUNT(*) FROM proxy_items`); n != 4 {
		t.Errorf("%d items left, want 4", n)
	}
	if done, err := r.FinishedAggregates(ctx); err != nil || len(done) != 0 {
		t.Errorf("second FinishedAggregates = %v, %v", ids(done), err)
	}
}

func testProxyListForwards(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 3, 10)
	a1 := pxClosed(t, r, ss[0:1], 10, 1000, "d2", "d1")
	a2 := pxClosed(t, r, ss[1:2], 10, 2000, "d1", "d2")
	a3 := pxClosed(t, r, ss[2:3], 10, 3000, "d1")
	pxFail(t, r, pxForward(t, r, a1.ID, "d1"), ForwardQueued, 1, 5000) // retrying
	pxFail(t, r, pxForward(t, r, a2.ID, "d1"), ForwardFailed, 3, 6000) // failure area

	for _, tc := range []struct {
		name string
		f    ForwardFilter
		want []string
	}{
		{"all", ForwardFilter{}, []string{fwdKey(a1, "d1"), fwdKey(a1, "d2"), fwdKey(a2, "d1"), fwdKey(a2, "d2"), fwdKey(a3, "d1")}},
		{"d2", ForwardFilter{Destination: "d2"}, []string{fwdKey(a1, "d2"), fwdKey(a2, "d2")}},
		{"unknown destination", ForwardFilter{Destination: "d9"}, []string{}},
		{"failed", ForwardFilter{State: ForwardFailed}, []string{fwdKey(a2, "d1")}},
		{"queued", ForwardFilter{State: ForwardQueued}, []string{fwdKey(a1, "d1"), fwdKey(a1, "d2"), fwdKey(a2, "d2"), fwdKey(a3, "d1")}},
		{"d1 queued", ForwardFilter{Destination: "d1", State: ForwardQueued}, []string{fwdKey(a1, "d1"), fwdKey(a3, "d1")}},
		{"retrying", ForwardFilter{State: ForwardQueued, Retrying: true}, []string{fwdKey(a1, "d1")}},
		{"d2 retrying", ForwardFilter{Destination: "d2", State: ForwardQueued, Retrying: true}, []string{}},
		{"limit", ForwardFilter{Limit: 2}, []string{fwdKey(a1, "d1"), fwdKey(a1, "d2")}},
		{"d1 limit", ForwardFilter{Destination: "d1", Limit: 1}, []string{fwdKey(a1, "d1")}},
	} {
		got, err := r.ListForwards(ctx, tc.f)
		if err != nil || !slices.Equal(fwdKeys(got), tc.want) {
			t.Errorf("%s: ListForwards(%+v) = %v, %v; want %v", tc.name, tc.f, fwdKeys(got), err, tc.want)
		}
		for _, f := range got {
			if (tc.f.State != "" && f.State != tc.f.State) || (tc.f.Retrying && f.Attempts == 0) {
				t.Errorf("%s: returned %+v", tc.name, f)
			}
		}
	}
	got := pxForward(t, r, a2.ID, "d1")
	want := Forward{Aggregate: Aggregate{ID: a2.ID, Feed: "FEED-A", Type: "Raw Events", GUID: a2.GUID, Items: 1, Bytes: 10, CreateMs: 1990, CloseMs: 2000},
		Destination: "d1", State: ForwardFailed, Attempts: 3, FirstMs: 5999, LastMs: 5999, NextMs: 6000, LastStatus: 999,
		Error: "failure 3", ErrorLog: "failure 3\n"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("failed forward\n got %+v\nwant %+v", got, want)
	}
}

// testProxyListForwardsRetryingAlone checks the documented meaning of
// ForwardFilter.Retrying ("only queued forwards that failed before") when
// no State is given.
func testProxyListForwardsRetryingAlone(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 2, 10)
	a1 := pxClosed(t, r, ss[0:1], 10, 1000, "d1")
	a2 := pxClosed(t, r, ss[1:2], 10, 2000, "d1")
	pxFail(t, r, pxForward(t, r, a1.ID, "d1"), ForwardQueued, 1, 5000)
	pxFail(t, r, pxForward(t, r, a2.ID, "d1"), ForwardFailed, 3, 6000)
	got, err := r.ListForwards(ctx, ForwardFilter{Retrying: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{fwdKey(a1, "d1")}; !slices.Equal(fwdKeys(got), want) {
		t.Errorf("ForwardFilter{Retrying: true} without a State must list only QUEUED forwards that failed before, not FAILED ones: "+
			"got %v, want %v", fwdKeys(got), want)
	}
}

func testProxySummariseForwards(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	if got, err := r.SummariseForwards(ctx); err != nil || len(got) != 0 {
		t.Fatalf("SummariseForwards on nothing = %+v, %v", got, err)
	}
	ss := pxStreams(t, r, "FEED-A", 5, 10)
	a1 := pxClosed(t, r, ss[0:1], 100, 1000, "d1", "d2")
	a2 := pxClosed(t, r, ss[1:2], 200, 2000, "d1", "d2")
	a3 := pxClosed(t, r, ss[2:3], 400, 3000, "d1", "d2")
	a4 := pxClosed(t, r, ss[3:4], 800, 4000, "d1")
	a5 := pxClosed(t, r, ss[4:5], 1600, 500, "d1")
	_ = a1
	pxFail(t, r, pxForward(t, r, a2.ID, "d1"), ForwardQueued, 2, 9000)
	pxFail(t, r, pxForward(t, r, a4.ID, "d1"), ForwardQueued, 1, 9000)
	pxFail(t, r, pxForward(t, r, a3.ID, "d1"), ForwardFailed, 5, 9000)
	pxFail(t, r, pxForward(t, r, a5.ID, "d1"), ForwardFailed, 2, 9000)

	got, err := r.SummariseForwards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []ForwardSummary{
		{Destination: "d1", State: ForwardFailed, Retrying: true, Count: 2, Bytes: 2000, OldestMs: 500},
		{Destination: "d1", State: ForwardQueued, Retrying: false, Count: 1, Bytes: 100, OldestMs: 1000},
		{Destination: "d1", State: ForwardQueued, Retrying: true, Count: 2, Bytes: 1000, OldestMs: 2000},
		{Destination: "d2", State: ForwardQueued, Retrying: false, Count: 3, Bytes: 700, OldestMs: 1000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SummariseForwards\n got %+v\nwant %+v", got, want)
	}

	// Replayed failures are queued afresh (not retrying).
	if n, err := r.ReplayForwards(ctx, "d1", nil, 9500); err != nil || n != 2 {
		t.Fatalf("ReplayForwards = %d, %v", n, err)
	}
	got, err = r.SummariseForwards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want = []ForwardSummary{
		{Destination: "d1", State: ForwardQueued, Retrying: false, Count: 3, Bytes: 2100, OldestMs: 500},
		{Destination: "d1", State: ForwardQueued, Retrying: true, Count: 2, Bytes: 1000, OldestMs: 2000},
		{Destination: "d2", State: ForwardQueued, Retrying: false, Count: 3, Bytes: 700, OldestMs: 1000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SummariseForwards after replay\n got %+v\nwant %+v", got, want)
	}
}

func testProxyReplayForwards(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	ss := pxStreams(t, r, "FEED-A", 3, 10)
	a1 := pxClosed(t, r, ss[0:1], 10, 1000, "d1", "d2")
	a2 := pxClosed(t, r, ss[1:2], 10, 2000, "d1", "d2")
	a3 := pxClosed(t, r, ss[2:3], 10, 3000, "d1", "d2")
	f1 := pxFail(t, r, pxForward(t, r, a1.ID, "d1"), ForwardFailed, 4, 4000)
	pxFail(t, r, pxForward(t, r, a2.ID, "d1"), ForwardFailed, 6, 5000)
	pxFail(t, r, pxForward(t, r, a3.ID, "d1"), ForwardQueued, 2, 6000)
	pxFail(t, r, pxForward(t, r, a1.ID, "d2"), ForwardFailed, 9, 7000)

	state := func() map[string]string {
		t.Helper()
		fs, err := r.ListForwards(ctx, ForwardFilter{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, f := range fs {
			m[fmt.Sprintf("%d/%s", f.ID, f.Destination)] = fmt.Sprintf("%s a%d first%d next%d", f.State, f.Attempts, f.FirstMs, f.NextMs)
		}
		return m
	}
	before := state()

	// By id: only the FAILED forward of that destination moves.
	n, err := r.ReplayForwards(ctx, "d1", []int64{a1.ID}, 10000)
	if err != nil || n != 1 {
		t.Fatalf("ReplayForwards(d1, [a1]) = %d, %v; want 1", n, err)
	}
	got := pxForward(t, r, a1.ID, "d1")
	want := f1
	want.State, want.Attempts, want.FirstMs, want.NextMs = ForwardQueued, 0, 0, 10000
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed forward\n got %+v\nwant %+v", got, want)
	}
	after := state()
	before[fwdKey(a1, "d1")] = after[fwdKey(a1, "d1")]
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("replaying a1 for d1 changed others:\n got %v\nwant %v", after, before)
	}
	if due, err := r.DueForwards(ctx, "d1", 10000, nil, 10); err != nil || !slices.Equal(aggIDs(due), []int64{a3.ID, a1.ID}) {
		t.Errorf("due after replay: %v, %v", aggIDs(due), err)
	}

	// Queued, already replayed and unknown ids do not move.
	if n, err := r.ReplayForwards(ctx, "d1", []int64{a1.ID, a3.ID, 999999}, 11000); err != nil || n != 0 {
		t.Fatalf("ReplayForwards of non-failed ids = %d, %v; want 0", n, err)
	}
	if after2 := state(); !reflect.DeepEqual(after2, after) {
		t.Fatalf("replaying non-failed ids changed:\n got %v\nwant %v", after2, after)
	}

	// All of a destination.
	if n, err := r.ReplayForwards(ctx, "d1", nil, 12000); err != nil || n != 1 {
		t.Fatalf("ReplayForwards(d1, all) = %d, %v; want 1", n, err)
	}
	if got := pxForward(t, r, a2.ID, "d1"); got.State != ForwardQueued || got.Attempts != 0 || got.FirstMs != 0 || got.NextMs != 12000 {
		t.Fatalf("a2 after replaying all of d1: %+v", got)
	}
	if got := pxForward(t, r, a1.ID, "d2"); got.State != ForwardFailed || got.Attempts != 9 {
		t.Fatalf("d2's failed forward moved when replaying d1: %+v", got)
	}
	if n, err := r.ReplayForwards(ctx, "d1", nil, 13000); err != nil || n != 0 {
		t.Fatalf("second ReplayForwards(d1, all) = %d, %v; want 0", n, err)
	}
	if n, err := r.ReplayForwards(ctx, "d2", []int64{a1.ID, a2.ID}, 14000); err != nil || n != 1 {
		t.Fatalf("ReplayForwards(d2, [a1 a2]) = %d, %v; want 1", n, err)
	}
	if fs, err := r.ListForwards(ctx, ForwardFilter{State: ForwardFailed}); err != nil || len(fs) != 0 {
		t.Fatalf("failed forwards left: %v, %v", fwdKeys(fs), err)
	}
}

func testProxyPendingBytes(t *testing.T, loc location) {
	ctx := t.Context()
	r := openRepo(t, loc)
	pending := func() int64 {
		t.Helper()
		n, err := r.PendingBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := pending(); n != 0 {
		t.Fatalf("PendingBytes of nothing = %d", n)
	}
	a := pxStreams(t, r, "FEED-A", 2, 100)  // 200
	b := pxStreams(t, r, "FEED-B", 1, 1000) // 1000
	locked := newStream("FEED-A", "n1", "locked")
	locked.FileSize = 10000
	apply(t, r, &Batch{Create: []*Stream{locked}})
	if n := pending(); n != 11200 {
		t.Fatalf("PendingBytes = %d, want 11200", n)
	}
	if err := r.SetStreamStatus(ctx, b[0].ID, Deleted); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 10200 {
		t.Fatalf("PendingBytes with a DELETED stream = %d, want 10200", n)
	}
	// Sent everywhere: the aggregate's streams no longer count.
	agg := pxClosed(t, r, []*Stream{a[0], a[1]}, 200, 1000, "d1")
	if _, err := r.ForwardSent(ctx, agg.ID, "d1"); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 10000 {
		t.Fatalf("PendingBytes after sending = %d, want 10000", n)
	}
	// Large sizes sum without overflow on either engine.
	big := pxStreams(t, r, "FEED-C", 2, 3<<40)
	_ = big
	if n := pending(); n != 10000+6<<40 {
		t.Fatalf("PendingBytes with large streams = %d, want %d", n, int64(10000+6<<40))
	}
}
