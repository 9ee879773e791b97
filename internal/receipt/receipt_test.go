package receipt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	// The clock is behind the last id: the next millisecond is taken at
	// once rather than waited for (it waited 30 slices of 100µs, from -2ms
	// to +1ms, and as long as the step for a bigger one).
	if clock.sleeps != 0 {
		t.Fatalf("slept %d times, want 0", clock.sleeps)
	}
}

// The clock steps back an hour and more than a millisecond's worth of ids
// are issued: Next went on waiting for the clock, holding its lock, so every
// post waited for the hour to pass (here, 36 million fake sleeps).
func TestNextOverflowAfterClockWentBackFar(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	prev := g.Next()
	clock.Set(start.Add(-time.Hour))
	for range 3*MaxSeq + 3 {
		id := g.Next()
		if !less(prev, id) {
			t.Fatalf("id %v not after %v", id, prev)
		}
		prev = id
	}
	if clock.sleeps != 0 {
		t.Fatalf("slept %d times (fake clock now %v): Next waited for the clock to catch up", clock.sleeps, clock.Now().Sub(start))
	}
	if want := start.UnixMilli() + 3; prev.EpochMs != want || prev.Seq != 0 {
		t.Fatalf("last id %+v, want epoch %d seq 0", prev, want)
	}
}

// A restart whose clock reads earlier than ids already issued: the
// generator started from the clock alone and issued the same ids again.
// With Keep it starts past every id issued before, after a crash (the
// reservation) and after a clean stop (Close: just past the last id, not
// ahead of a clock that is right).
func TestKeepAcrossRestartWithEarlierClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipt-ids-node-1")
	start := time.UnixMilli(1_700_000_000_000)
	var (
		mu   sync.Mutex // errors come from the reservations ahead too
		errs []error
	)
	open := func(at time.Time) (*Generator, *fakeClock) {
		t.Helper()
		g, clock := newFakeGenerator(t, at)
		if err := g.Keep(path, func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }); err != nil {
			t.Fatal(err)
		}
		return g, clock
	}
	seen := map[ID]bool{}
	issue := func(g *Generator, n int) ID {
		t.Helper()
		var id ID
		for range n {
			id = g.Next()
			if seen[id] {
				t.Fatalf("id %v issued twice", id)
			}
			seen[id] = true
		}
		return id
	}

	// First run: ids over 30 s, then a crash (no Close).
	g, clock := open(start)
	for i := range 30 {
		clock.Set(start.Add(time.Duration(i) * time.Second))
		issue(g, 3)
	}
	last := issue(g, 1)
	// The crash comes after the reservation ahead it started: one process
	// writes the file at a time.
	g.refreshes.Wait()
	// The clock stepped back an hour while weir was down.
	g, clock = open(start.Add(-time.Hour))
	first := g.Next()
	if !less(last, first) {
		t.Fatalf("after a crash and an earlier clock: first id %v is not after the last id before, %v", first, last)
	}
	if first.EpochMs > last.EpochMs+reserveAhead.Milliseconds() {
		t.Fatalf("first id %v more than %v ahead of the last one before, %v", first, reserveAhead, last)
	}
	seen[first] = true
	for i := range 20 {
		clock.Set(start.Add(-time.Hour + time.Duration(i)*time.Second))
		last = issue(g, 5)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean stop, and a start with the clock earlier still.
	g, _ = open(start.Add(-2 * time.Hour))
	if first := issue(g, 1); first.EpochMs != last.EpochMs+1 || first.Seq != 0 {
		t.Fatalf("after a clean stop: first id %v, want (%d, 0)", first, last.EpochMs+1)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// A start with the clock past every id: ids follow the clock.
	later := start.Add(time.Hour)
	g, _ = open(later)
	if id := issue(g, 1); id.EpochMs != later.UnixMilli() || id.Seq != 0 {
		t.Fatalf("with the clock past the ids: %v, want (%d, 0)", id, later.UnixMilli())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
}

// A reservation that cannot be written does not stop ids: the error is
// reported, and tried again a second of epochs later, not at every id.
func TestKeepWriteFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "receipt-ids")
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	var errs int
	if err := g.Keep(path, func(error) { errs++ }); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		clock.Set(start.Add(time.Duration(i) * 10 * time.Millisecond))
		g.Next()
	}
	if errs != 1 {
		t.Fatalf("%d errors reported over 1 s of ids, want 1", errs)
	}
	clock.Set(start.Add(1500 * time.Millisecond))
	g.Next()
	if errs != 2 {
		t.Fatalf("%d errors reported after 1.5 s, want 2", errs)
	}
}

// Reservations ahead: once the ids are within half a reservation of the
// ceiling, the next is written on its own goroutine and Next does not
// wait for it (before, every post waited for two fsyncs every 10 s of
// ids); an id that reaches the ceiling waits until one is durable. Every
// id is below the ceiling the file durably held when it was returned.
func TestKeepReservesAhead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipt-ids")
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	if err := g.Keep(path, nil); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		durable int64
		writes  int
		blocked atomic.Bool
	)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	g.write = func(p string, v int64) error {
		if blocked.Load() {
			entered <- struct{}{}
			<-release
		}
		err := writeSynced(p, v)
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			durable = v
		}
		writes++
		return err
	}
	type issued struct {
		id      ID
		durable int64 // when it was returned
	}
	next := func() issued {
		id := g.Next()
		mu.Lock()
		defer mu.Unlock()
		return issued{id, durable}
	}
	check := func(is issued) {
		t.Helper()
		if is.id.EpochMs >= is.durable {
			t.Fatalf("id %v returned while the durable ceiling was %d", is.id, is.durable)
		}
	}
	check(next()) // the first reservation: to start+10 s, waited for

	// Past half of it, the next reservation starts; held up, it does not
	// hold up the ids.
	blocked.Store(true)
	clock.Set(start.Add(6 * time.Second))
	done := make(chan issued)
	go func() { done <- next() }()
	select {
	case is := <-done:
		check(is)
	case <-time.After(time.Minute):
		t.Fatal("Next waited for the reservation ahead")
	}
	check(next())
	select { // the reservation ahead is being written
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("no reservation ahead was started")
	}

	// At the ceiling, an id waits for the reservation.
	clock.Set(start.Add(10 * time.Second))
	go func() { done <- next() }()
	close(release)
	check(<-done)
	g.refreshes.Wait()
	if want := start.Add(16 * time.Second).UnixMilli(); durable != want || writes != 2 {
		t.Errorf("%d writes, ceiling %d; want 2, %d", writes, durable, want)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != fmt.Sprintf("%d\n", start.Add(10*time.Second).UnixMilli()+1) {
		t.Errorf("after Close the file holds %q (%v), want just past the last id", b, err)
	}
}

// A reservation ahead that fails just below the ceiling does not put off
// the write that an id at the ceiling needs: a review found the second
// of ids after such a failure skipping every write, so an id past the
// ceiling was returned with no durable ceiling above it.
func TestKeepAheadFailureStillReservesAtCeiling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipt-ids")
	start := time.UnixMilli(1_700_000_000_000)
	g, clock := newFakeGenerator(t, start)
	if err := g.Keep(path, func(error) {}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		durable int64
		fail    bool
	)
	g.write = func(p string, v int64) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("EIO (passing)")
		}
		durable = v
		return writeSynced(p, v)
	}
	g.Next() // the ceiling: start+10 s
	mu.Lock()
	fail = true
	mu.Unlock()
	clock.Set(start.Add(9500 * time.Millisecond))
	g.Next() // starts a reservation ahead, which fails
	g.refreshes.Wait()
	mu.Lock()
	fail = false // the disk answers again
	mu.Unlock()
	clock.Set(start.Add(10100 * time.Millisecond))
	id := g.Next()
	mu.Lock()
	defer mu.Unlock()
	if id.EpochMs >= durable {
		t.Errorf("id %v returned with the durable ceiling at %d", id, durable)
	}
}

func TestKeepRejectsGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipt-ids")
	if err := os.WriteFile(path, []byte("not a number\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, _ := newFakeGenerator(t, time.UnixMilli(1_700_000_000_000))
	if err := g.Keep(path, nil); err == nil {
		t.Fatal("Keep accepted a file that holds no number")
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
