package receipt

import (
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStringAndParse(t *testing.T) {
	// Test 38 of the reference.
	id := ID{EpochMs: 123456, Seq: 22, Origin: OriginService, Node: "node-abc"}
	s := id.String()
	if want := "0000000123456_0022_S_node-abc"; s != want {
		t.Fatalf("String() = %q, want %q", s, want)
	}
	back, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if back != id {
		t.Fatalf("Parse(%q) = %+v, want %+v", s, back, id)
	}
	for _, tc := range []struct {
		id   ID
		want string
	}{
		{ID{1748593005000, 1234, OriginProxy, "node-abc"}, "1748593005000_1234_P_node-abc"},
		{ID{0, 0, OriginProxy, "n"}, "0000000000000_0000_P_n"},
		{ID{9999999999999, 9999, OriginService, "A-9"}, "9999999999999_9999_S_A-9"},
	} {
		if got := tc.id.String(); got != tc.want {
			t.Errorf("String(%+v) = %q, want %q", tc.id, got, tc.want)
		}
		if back, err := Parse(tc.want); err != nil || back != tc.id {
			t.Errorf("Parse(%q) = %+v, %v", tc.want, back, err)
		}
	}
}

func TestParseLowerCaseOrigin(t *testing.T) {
	id, err := Parse("1748593005000_0001_p_proxy-1")
	if err != nil {
		t.Fatal(err)
	}
	if id.Origin != 'P' {
		t.Fatalf("origin = %q, want 'P'", id.Origin)
	}
	// Any letter is accepted by the format; only generators are restricted.
	if id, err := Parse("1748593005000_0001_X_n"); err != nil || id.Origin != 'X' {
		t.Fatalf("Parse with origin X = %+v, %v", id, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "too short"},
		{"0000000123456_0022_S_", "too short"},
		{"000000012345_00220_S_node", "13 digits"},
		{"000000012345a_0022_S_node", "13 digits"},
		{"0000000123456-0022_S_node", "13 digits"},
		{"0000000123456_002x_S_node", "sequence must be 4 digits"},
		{"0000000123456_00222S_node", "sequence must be 4 digits"},
		{"0000000123456_0022_1_node", "origin must be one letter"},
		{"0000000123456_0022_SS_node", "origin must be one letter"},
		{"0000000123456_0022_S_foo bar", "node must be"},
		{"0000000123456_0022_S_foo_bar", "node must be"},
		{"0000000123456_0022_S_nodé", "node must be"},
		{"0000000123456_0022_S_node\n", "node must be"},
		{"+000000123456_0022_S_node", "13 digits"},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) err = %v, want containing %q", tc.in, err, tc.want)
		}
	}
	// Errors quote a huge input only in part.
	_, err := Parse(strings.Repeat("9", 10000))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("error for a huge id: %d bytes", len(err.Error()))
	}
}

func TestNodeNames(t *testing.T) {
	for _, tc := range []struct {
		in        string
		valid     bool
		sanitised string
	}{
		{"node-abc", true, "node-abc"},
		{"Node-1", true, "Node-1"},
		{"foo bar", false, "foo-bar"},
		{"foo_bar", false, "foo-bar"},
		{"foo-bar?()", false, "foo-bar---"},
		{"héllo", false, "h-llo"},
		{"a\xffb", false, "a-b"},
		{"", false, ""},
	} {
		if got := ValidNode(tc.in); got != tc.valid {
			t.Errorf("ValidNode(%q) = %v, want %v", tc.in, got, tc.valid)
		}
		got := SanitiseNode(tc.in)
		if got != tc.sanitised {
			t.Errorf("SanitiseNode(%q) = %q, want %q", tc.in, got, tc.sanitised)
		}
		if got != "" && !ValidNode(got) {
			t.Errorf("SanitiseNode(%q) = %q is not valid", tc.in, got)
		}
	}
}

func TestNewGeneratorRejects(t *testing.T) {
	for _, tc := range []struct {
		origin byte
		node   string
		want   string
	}{
		{'X', "node", "origin"},
		{'s', "node", "origin"},
		{'S', "", "empty"},
		{'S', "foo bar", `sanitised it would be "foo-bar"`},
		{'P', "foo_bar", "letters, digits and '-'"},
	} {
		g, err := NewGenerator(tc.origin, tc.node, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewGenerator(%q, %q) = %v, %v; want error containing %q", tc.origin, tc.node, g, err, tc.want)
		}
	}
}

// fakeClock is a clock that only moves when told to, or when slept on.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps int
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps++
	c.now = c.now.Add(d)
}

func newFakeGenerator(t *testing.T, start time.Time) (*Generator, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: start}
	g, err := NewGenerator(OriginService, "node-1", clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	g.sleep = clock.Sleep
	return g, clock
}

func TestNextSequenceAndClock(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	want := func(ms int64, seq int) {
		t.Helper()
		id := g.Next()
		if id.EpochMs != ms || id.Seq != seq || id.Origin != 'S' || id.Node != "node-1" {
			t.Fatalf("Next() = %+v, want epoch %d seq %d", id, ms, seq)
		}
	}
	want(1_700_000_000_000, 0)
	want(1_700_000_000_000, 1)
	want(1_700_000_000_000, 2)
	clock.Set(start.Add(5 * time.Millisecond))
	want(1_700_000_000_005, 0)
	// The clock steps back: the epoch sticks at the largest seen, the sequence goes on.
	clock.Set(start.Add(-time.Hour))
	want(1_700_000_000_005, 1)
	want(1_700_000_000_005, 2)
	clock.Set(start.Add(5 * time.Millisecond))
	want(1_700_000_000_005, 3)
	clock.Set(start.Add(6 * time.Millisecond))
	want(1_700_000_000_006, 0)
	if clock.sleeps != 0 {
		t.Fatalf("slept %d times without an overflow", clock.sleeps)
	}
}

func TestNextOverflowWaitsForNextMillisecond(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	for i := 0; i <= MaxSeq; i++ {
		if id := g.Next(); id.Seq != i || id.EpochMs != start.UnixMilli() {
			t.Fatalf("id %d = %+v", i, id)
		}
	}
	id := g.Next() // sequence used up: must sleep until the clock passes the epoch
	if id.EpochMs != start.UnixMilli()+1 || id.Seq != 0 {
		t.Fatalf("after overflow Next() = %+v, want epoch+1, seq 0", id)
	}
	// 100µs slices: 10 sleeps reach the next millisecond.
	if clock.sleeps != 10 {
		t.Fatalf("slept %d times, want 10", clock.sleeps)
	}
}

func TestNextOverflowAfterClockWentBack(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	g.Next()
	clock.Set(start.Add(-2 * time.Millisecond))
	for range MaxSeq {
		g.Next()
	}
	id := g.Next()
	if id.EpochMs != start.UnixMilli()+1 || id.Seq != 0 {
		t.Fatalf("Next() = %+v, want epoch+1, seq 0", id)
	}
	if clock.sleeps != 30 { // from -2ms to +1ms in 100µs slices
		t.Fatalf("slept %d times, want 30", clock.sleeps)
	}
}

func less(a, b ID) bool {
	return a.EpochMs < b.EpochMs || a.EpochMs == b.EpochMs && a.Seq < b.Seq
}

func TestNextStrictlyIncreasingConcurrently(t *testing.T) {
	g, err := NewGenerator(OriginProxy, "proxy-1", nil) // the real clock
	if err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 8, 20000
	results := make([][]ID, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ids := make([]ID, perWorker)
			for i := range ids {
				ids[i] = g.Next()
			}
			results[w] = ids
		})
	}
	wg.Wait()
	seen := make(map[ID]struct{}, workers*perWorker)
	for w, ids := range results {
		for i, id := range ids {
			if i > 0 && !less(ids[i-1], id) {
				t.Fatalf("worker %d: id %d %v not after %v", w, i, id, ids[i-1])
			}
			if _, dup := seen[id]; dup {
				t.Fatalf("duplicate id %v", id)
			}
			seen[id] = struct{}{}
			if id.Seq < 0 || id.Seq > MaxSeq {
				t.Fatalf("sequence out of range: %v", id)
			}
		}
	}
}

func BenchmarkNext(b *testing.B) {
	g, err := NewGenerator(OriginService, "node-1", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Next().String()
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"0000000123456_0022_S_node-abc", "1748593005000_1234_p_node-abc", "0000000123456_0022_S_foo bar",
		"", "_", "9999999999999_9999_Z_-",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			return
		}
		out := id.String()
		// Only the origin's case may differ from the input.
		if !strings.EqualFold(out, s) || len(out) != len(s) {
			t.Fatalf("Parse(%q).String() = %q", s, out)
		}
		again, err := Parse(out)
		if err != nil || again != id {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", out, again, err, id)
		}
	})
}
