package receiptrule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/logtest"
	"github.com/weirhq/weir/internal/meta"
)

func attrs(kv ...string) func(string) (string, bool) {
	m := &attr.Map{}
	for i := 0; i < len(kv); i += 2 {
		m.Put(kv[i], kv[i+1])
	}
	return m.Get
}

func mustParse(t *testing.T, js string) *Set {
	t.Helper()
	_, s, err := Parse([]byte(js))
	if err != nil {
		t.Fatalf("parse %s: %v", js, err)
	}
	return s
}

// The reference system's cases (datafeed-and-proxy.md 10.6), re-expressed:
// no rules reject; a REJECT match rejects; a DROP match drops; with several
// rules the first match decides; a rule whose expression is empty or
// switched off takes no part (the reference's "empty expression" case is
// 113). Weir needs no field definitions; a rule with no expression at all
// matches every post.
func TestDecide(t *testing.T) {
	var nilSet *Set
	if d := nilSet.Decide(attrs("Feed", "F")); d.Action != Reject || d.Rule != 0 {
		t.Errorf("nil set: %+v", d)
	}
	if d := mustParse(t, `[]`).Decide(attrs("Feed", "F")); d.Action != Reject || d.Rule != 0 {
		t.Errorf("no rules: %+v", d)
	}
	if d := mustParse(t, `[{"action":"RECEIVE"}]`).Decide(attrs()); d.Action != Receive || d.Rule != 1 {
		t.Errorf("a rule without expression: %+v", d)
	}
	set := mustParse(t, `[
	  {"name":"off","enabled":false,"action":"DROP"},
	  {"name":"reject x","action":"REJECT","expression":{"type":"term","field":"System","condition":"EQUALS","value":"X"}},
	  {"name":"drop test","action":"DROP","expression":{"type":"term","field":"attribute:Environment","condition":"IN","value":"TEST,DEV"}},
	  {"name":"empty operator","action":"RECEIVE","expression":{"type":"operator","op":"OR","children":[]}},
	  {"name":"terms off","action":"RECEIVE","expression":{"type":"operator","children":[
	    {"type":"term","field":"System","condition":"EQUALS","value":"Y","enabled":false}]}},
	  {"name":"expression off","action":"RECEIVE","expression":{"type":"term","field":"System","condition":"EQUALS","value":"x","enabled":false}},
	  {"name":"the rest","action":"REJECT"}
	]`)
	// Rules whose expression is switched off or has no enabled term are
	// skipped, as the reference system skips them: switching a condition
	// off never makes a rule match every post.
	if set.Len() != 3 {
		t.Errorf("Len %d, want 3 rules that take part", set.Len())
	}
	for _, c := range []struct {
		kv   []string
		rule int
		act  Action
	}{
		{[]string{"system", "X", "Environment", "TEST"}, 2, Reject},
		{[]string{"System", "Y", "ENVIRONMENT", "DEV"}, 3, Drop},
		{[]string{"System", "x"}, 7, Reject}, // case-sensitive values; rules 4-6 skipped
		{[]string{"System", "Y"}, 7, Reject},
		{nil, 7, Reject},
	} {
		d := set.Decide(attrs(c.kv...))
		if d.Rule != c.rule || d.Action != c.act {
			t.Errorf("%v: %+v, want rule %d %s", c.kv, d, c.rule, c.act)
		}
	}
	if d := set.Decide(attrs("System", "X")); d.Name != "reject x" {
		t.Errorf("name %q", d.Name)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, c := range []struct{ js, path, msg string }{
		{`{}`, "rules", "not a JSON array"},
		{`[{"action":"RECEIVE"}] []`, "rules", "more than one"},
		{`[{"action":"RECEIVE","colour":"red"}]`, "rules", "unknown field"},
		{`[{"action":"RECEIVE"},{}]`, "rules[1].action", "missing"},
		{`[{"action":"receive"}]`, "rules[0].action", "is not RECEIVE"},
		{`[{"action":"DROP","name":"a\u0007b"}]`, "rules[0].name", "control"},
		{`[{"action":"DROP","name":"` + strings.Repeat("é", MaxNameLength+1) + `"}]`, "rules[0].name", "longer than 256 characters"},
		{`[{"action":"DROP","enabled":false,"expression":{"type":"term","field":"Feed","condition":"NEAR","value":"x"}}]`,
			"rules[0].expression.condition", "unknown condition"},
		{`[{"action":"DROP","expression":{"type":"operator","children":[{"type":"term","field":"","condition":"EQUALS"}]}}]`,
			"rules[0].expression.children[0].field", "missing"},
	} {
		_, _, err := Parse([]byte(c.js))
		var e *Error
		if !errors.As(err, &e) || e.Path != c.path || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("%.60s: %v; want %s: ...%s...", c.js, err, c.path, c.msg)
		}
	}
	many := make([]Rule, MaxRules+1)
	for i := range many {
		many[i].Action = Receive
	}
	if _, err := Compile(many); err == nil {
		t.Errorf("%d rules compiled", len(many))
	}
}

// fakeStore counts reads and can fail.
type fakeStore struct {
	mu                   sync.Mutex
	rr                   meta.ReceiptRules
	err                  error
	versionReads, fetchs int
}

func (f *fakeStore) GetReceiptRules(context.Context) (meta.ReceiptRules, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetchs++
	return f.rr, f.err
}

func (f *fakeStore) ReceiptRulesVersion(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versionReads++
	return f.rr.Version, f.err
}

func (f *fakeStore) set(rules string, version int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rr, f.err = meta.ReceiptRules{Rules: rules, Version: version}, err
}

// TestSource: the set is read once, kept for the refresh period, then its
// version is checked (and the rules read again only when it changed);
// Invalidate rereads at once; a failed refresh keeps the last set; only a
// first load can fail.
func TestSource(t *testing.T) {
	ctx := t.Context()
	st := &fakeStore{}
	st.set(`[]`, 0, errors.New("database down"))
	src := NewSource(st, time.Minute, nil)
	now := time.Unix(1000, 0)
	src.now = func() time.Time { return now }
	if _, err := src.Current(ctx); err == nil || !strings.Contains(err.Error(), "database down") {
		t.Fatalf("first load with the store down: %v", err)
	}

	st.set(`[{"action":"DROP"}]`, 1, nil)
	s1, err := src.Current(ctx)
	if err != nil || s1.Decide(attrs()).Action != Drop {
		t.Fatalf("first load: %v", err)
	}
	for range 100 {
		if s, _ := src.Current(ctx); s != s1 {
			t.Fatal("the set changed within the refresh period")
		}
	}
	if st.fetchs != 2 || st.versionReads != 0 {
		t.Errorf("within the period: %d fetches, %d version reads; want 2 and 0", st.fetchs, st.versionReads)
	}

	now = now.Add(2 * time.Minute) // same version: no fetch
	if s, _ := src.Current(ctx); s != s1 || st.versionReads != 1 || st.fetchs != 2 {
		t.Errorf("refresh at the same version: %d version reads, %d fetches", st.versionReads, st.fetchs)
	}

	st.set(`[{"action":"RECEIVE"}]`, 2, nil) // changed, but not yet due
	if s, _ := src.Current(ctx); s != s1 {
		t.Error("a change was read before its refresh was due")
	}
	src.Invalidate()
	s2, _ := src.Current(ctx)
	if s2.Decide(attrs()).Action != Receive {
		t.Error("Invalidate did not make the next Current read the change")
	}

	st.set(`[{"action":"REJECT"}]`, 3, errors.New("database down"))
	now = now.Add(2 * time.Minute)
	if s, err := src.Current(ctx); err != nil || s != s2 {
		t.Errorf("a failed refresh: %v; want the last set kept", err)
	}
	reads := st.versionReads
	for range 10 { // not retried on every post while the store is down
		src.Current(ctx)
	}
	if st.versionReads != reads {
		t.Errorf("%d more version reads within the period after a failure", st.versionReads-reads)
	}
	st.set(`[{"action":"nonsense"}]`, 4, nil) // invalid stored rules: keep the last good set
	now = now.Add(2 * time.Minute)
	if s, err := src.Current(ctx); err != nil || s != s2 {
		t.Errorf("invalid stored rules: %v; want the last set kept", err)
	}
}

// blockingStore is a fakeStore whose version reads, once armed, wait for
// release after reading the version (a read that began before a change).
type blockingStore struct {
	*fakeStore
	entered, release chan struct{}
	failAfter        error // if set, the blocked read's answer once released
}

func (b *blockingStore) ReceiptRulesVersion(ctx context.Context) (int64, error) {
	v, err := b.fakeStore.ReceiptRulesVersion(ctx)
	if b.entered != nil {
		close(b.entered)
		b.entered = nil
		<-b.release
		if b.failAfter != nil {
			err = b.failAfter
		}
	}
	return v, err
}

// refreshUnderWay returns a Source whose rules (one DROP rule, version 1)
// were loaded a refresh period ago, with a routine refresh under way that
// has read the version and waits for release (then answers failAfter, if
// set); refreshed is closed when that refresh's Current returns.
func refreshUnderWay(t *testing.T, failAfter error) (src *Source, st *blockingStore, release, refreshed chan struct{}) {
	t.Helper()
	st = &blockingStore{fakeStore: &fakeStore{}}
	st.set(`[{"action":"DROP"}]`, 1, nil)
	src = NewSource(st, time.Minute, nil)
	var now atomic.Int64
	now.Store(1000)
	src.now = func() time.Time { return time.Unix(now.Load(), 0) }
	if s, err := src.Current(t.Context()); err != nil || s.Decide(attrs()).Action != Drop {
		t.Fatalf("first load: %v", err)
	}
	now.Add(120) // a routine refresh is due
	entered := make(chan struct{})
	release, refreshed = make(chan struct{}), make(chan struct{})
	st.entered, st.release, st.failAfter = entered, release, failAfter
	go func() {
		defer close(refreshed)
		_, _ = src.Current(t.Context())
	}()
	<-entered // the refresh has read version 1
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		<-refreshed
	})
	return src, st, release, refreshed
}

// TestSourceInvalidateWaitsForReadUnderWay: a post that starts after a
// change of the rules and its Invalidate is decided by the new rules even
// while a routine refresh that read the version before the change is
// under way (it used to get the old set, as the refresh held the lock).
func TestSourceInvalidateWaitsForReadUnderWay(t *testing.T) {
	ctx := t.Context()
	src, st, release, refreshed := refreshUnderWay(t, nil)
	st.set(`[{"action":"RECEIVE"}]`, 2, nil)
	src.Invalidate() // as the API does once the change is committed
	decided := make(chan Action, 1)
	go func() {
		s, _ := src.Current(ctx)
		decided <- s.Decide(attrs()).Action
	}()
	select {
	case a := <-decided:
		t.Fatalf("a post after the change was decided (%v) before the read under way ended", a)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if a := <-decided; a != Receive {
		t.Errorf("a post that started after the change and its Invalidate was decided %v, want %v", a, Receive)
	}
	<-refreshed // began before the change: either answer is right
	if s, _ := src.Current(ctx); s.Decide(attrs()).Action != Receive {
		t.Error("the new rules are not kept")
	}
}

// TestSourceInvalidateWaitEndsWithPost: a post waiting, after an
// Invalidate, for a read under way stops waiting when it goes (its
// context ends) and gets the set it had; it used to wait for the read
// whatever became of it. The read under way, and the next post's, still
// give the new rules.
func TestSourceInvalidateWaitEndsWithPost(t *testing.T) {
	src, st, release, refreshed := refreshUnderWay(t, nil)
	st.set(`[{"action":"RECEIVE"}]`, 2, nil)
	src.Invalidate()
	ctx, cancel := context.WithCancel(t.Context())
	decided := make(chan Action, 1)
	go func() {
		s, err := src.Current(ctx)
		if err != nil {
			t.Errorf("a post that went while waiting: %v", err)
			decided <- Action("error")
			return
		}
		decided <- s.Decide(attrs()).Action
	}()
	select {
	case a := <-decided:
		t.Fatalf("decided (%v) before the read under way ended", a)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case a := <-decided:
		if a != Drop {
			t.Errorf("a post that went while waiting got %v, want the set it had (%v)", a, Drop)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a post whose context ended still waits for the read under way")
	}
	close(release)
	<-refreshed
	if s, err := src.Current(t.Context()); err != nil || s.Decide(attrs()).Action != Receive {
		t.Errorf("after the read: %v", err)
	}
}

// TestSourceFailedReadAfterInvalidate: when the read under way at an
// Invalidate fails (the store down), the posts after it are decided by the
// set read before, as after any failed refresh, until a refresh period
// has passed: they do not each queue for a read of their own (the failed
// read used to record the generation it began at, so every post after the
// Invalidate read the store again, one at a time).
func TestSourceFailedReadAfterInvalidate(t *testing.T) {
	ctx := t.Context()
	// The read under way fails.
	src, st, release, refreshed := refreshUnderWay(t, errors.New("database down"))
	st.set(`[{"action":"RECEIVE"}]`, 2, errors.New("database down"))
	src.Invalidate()
	close(release)
	<-refreshed
	st.mu.Lock()
	reads := st.versionReads
	st.mu.Unlock()
	for range 5 {
		if s, err := src.Current(ctx); err != nil || s.Decide(attrs()).Action != Drop {
			t.Fatalf("a post with the store down: %v", err)
		}
	}
	st.mu.Lock()
	after := st.versionReads
	st.mu.Unlock()
	if after != reads {
		t.Errorf("posts after a failed read read the store %d more times within the refresh period, want none", after-reads)
	}
	// The store back, a period later: the change decides.
	st.set(`[{"action":"RECEIVE"}]`, 2, nil)
	later := time.Unix(1000, 0).Add(4 * time.Minute)
	src.now = func() time.Time { return later } // nothing else runs now
	if s, err := src.Current(ctx); err != nil || s.Decide(attrs()).Action != Receive {
		t.Errorf("a period after the store came back: %v", err)
	}
}

// TestSourceConcurrent: posts on many goroutines read the set while the
// rules change and are invalidated; every set they get is one that was
// stored, and once the changes stop they all see the last (run with -race).
func TestSourceConcurrent(t *testing.T) {
	ctx := t.Context()
	st := &fakeStore{}
	st.set(`[{"action":"DROP"}]`, 1, nil)
	src := NewSource(st, time.Millisecond, nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s, err := src.Current(ctx)
				if err != nil && !errors.Is(err, errLoading) {
					t.Error(err)
					return
				}
				if err == nil && s.Len() != 1 {
					t.Errorf("a set of %d rules", s.Len())
					return
				}
			}
		})
	}
	for v := int64(2); v <= 200; v++ {
		action := []string{"RECEIVE", "REJECT", "DROP"}[v%3]
		st.set(`[{"action":"`+action+`"}]`, v, nil)
		src.Invalidate()
	}
	close(stop)
	wg.Wait()
	src.Invalidate()
	s, err := src.Current(ctx)
	if err != nil || s.Decide(attrs()).Action != Drop { // version 200: 200 % 3 == 2
		t.Fatalf("after the changes: %v, %+v", err, s.Decide(attrs()))
	}
}

// BenchmarkDecide: the cost the rules add to a post, with a hundred rules
// of the common shape (sender and feed prefix) and the post matching the
// last.
func BenchmarkDecide(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[")
	for i := range 100 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"action":"RECEIVE","expression":{"type":"operator","children":[
		  {"type":"term","field":"UploadUserId","condition":"EQUALS","value":"user-%d"},
		  {"type":"term","field":"Feed","condition":"EQUALS","value":"TEAM-%d-*"}]}}`, i, i)
	}
	sb.WriteString("]")
	_, set, err := Parse([]byte(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	get := attrs("Feed", "TEAM-99-LOGS", "UploadUserId", "user-99", "System", "S", "Environment", "PROD",
		"GUID", "0f8fad5b-d9cb-469f-a165-70867728950e", "ReceiptId", "1795687903768_0000_S_node")
	b.ReportAllocs()
	for b.Loop() {
		if d := set.Decide(get); d.Rule != 100 {
			b.Fatalf("rule %d", d.Rule)
		}
	}
}

// TestSourceFailedRefreshLogged: while the store stays down, a failed
// refresh (one a period, as long as posts arrive) is logged once, then at
// most once a minute with the count left out, and the recovery once.
func TestSourceFailedRefreshLogged(t *testing.T) {
	ctx := t.Context()
	st := &fakeStore{}
	st.set(`[{"action":"DROP"}]`, 1, nil)
	var logs logtest.Counter
	src := NewSource(st, 5*time.Second, slog.New(&logs))
	now := time.Unix(1000, 0)
	src.now = func() time.Time { return now }
	if _, err := src.Current(ctx); err != nil {
		t.Fatal(err)
	}
	st.set(`[{"action":"DROP"}]`, 1, errors.New("database down"))
	for range 12 { // failed refreshes from 5 s to 60 s
		now = now.Add(5 * time.Second)
		if _, err := src.Current(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.Count("receipt rules: refresh failed"); n != 1 {
		t.Errorf("%d failed refreshes logged within a minute, want 1", n)
	}
	now = now.Add(5 * time.Second) // a minute after the first logged
	src.Current(ctx)
	if n := logs.Count("receipt rules: refresh failed"); n != 2 {
		t.Errorf("%d failed refreshes logged in a minute, want 2", n)
	}
	if got := logs.Last("notLogged").Int64(); got != 11 {
		t.Errorf("the second logged failure counts %d left out, want 11", got)
	}
	st.set(`[{"action":"DROP"}]`, 1, nil)
	for range 3 {
		now = now.Add(5 * time.Second)
		src.Current(ctx)
	}
	if n := logs.Count("receipt rules: refresh works again"); n != 1 {
		t.Errorf("the recovery was logged %d times, want once", n)
	}
}
