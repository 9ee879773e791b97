// Package receipt makes and reads receipt ids: the identifier a sender gets
// back for each post, in the reference system's shape
// <epochMs:13>_<seq:4>_<origin>_<node>, e.g. 0000000123456_0022_S_node-abc.
package receipt

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/weirhq/weir/internal/fsutil"
)

// Origins: which kind of node issued an id. Keeping the two apart means a
// proxy and a main-service node with the same name cannot issue the same id.
const (
	OriginService byte = 'S'
	OriginProxy   byte = 'P'
)

// MaxSeq is the highest sequence number within one millisecond.
const MaxSeq = 9999

// ID is a parsed receipt id.
type ID struct {
	EpochMs int64
	Seq     int  // 0..9999
	Origin  byte // 'S' main service, 'P' proxy
	Node    string
}

// String formats the id as %013d_%04d_%c_%s. An ID with fields out of range
// (negative, too many digits, bad node) formats but does not Parse.
func (id ID) String() string {
	b := make([]byte, 0, 13+1+4+1+1+1+len(id.Node))
	b = appendPadded(b, id.EpochMs, 13)
	b = append(b, '_')
	b = appendPadded(b, int64(id.Seq), 4)
	b = append(b, '_', id.Origin, '_')
	b = append(b, id.Node...)
	return string(b)
}

func appendPadded(b []byte, v int64, width int) []byte {
	if v < 0 {
		return strconv.AppendInt(b, v, 10)
	}
	n := 1 // digits in v
	for x := v; x >= 10; x /= 10 {
		n++
	}
	for ; n < width; n++ {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, v, 10)
}

// Parse reads an id matching ^\d{13}_\d{4}_[A-Za-z]_[A-Za-z0-9-]+$. The origin
// letter is upper-cased (the reference system parses it case-insensitively).
func Parse(s string) (ID, error) {
	const prefix = 13 + 1 + 4 + 1 + 1 + 1 // up to and including the '_' before the node
	fail := func(why string) (ID, error) {
		return ID{}, fmt.Errorf("receipt id %s: %s (want e.g. 0000000123456_0022_S_node-abc)", quote(s), why)
	}
	if len(s) <= prefix {
		return fail("too short")
	}
	if !digits(s[0:13]) || s[13] != '_' {
		return fail("must start with 13 digits of epoch milliseconds and '_'")
	}
	if !digits(s[14:18]) || s[18] != '_' {
		return fail("sequence must be 4 digits followed by '_'")
	}
	origin := s[19]
	if 'a' <= origin && origin <= 'z' {
		origin -= 'a' - 'A'
	}
	if origin < 'A' || origin > 'Z' || s[20] != '_' {
		return fail("origin must be one letter followed by '_'")
	}
	node := s[prefix:]
	if !ValidNode(node) {
		return fail("node must be letters, digits and '-'")
	}
	// 13 and 4 digits always fit, so these cannot fail.
	epoch, _ := strconv.ParseInt(s[0:13], 10, 64)
	seq, _ := strconv.Atoi(s[14:18])
	return ID{EpochMs: epoch, Seq: seq, Origin: origin, Node: node}, nil
}

// quote quotes s for an error message, shortened so that a sender cannot make
// weir log megabytes by posting a huge id.
func quote(s string) string {
	const limit = 80
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func nodeChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

// ValidNode reports whether s can be the node part of an id: non-empty,
// only [A-Za-z0-9-] ('_' is the id's delimiter).
func ValidNode(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nodeChar(rune(s[i])) {
			return false
		}
	}
	return true
}

// SanitiseNode replaces every character outside [A-Za-z0-9-] with '-', one
// '-' per character (rune; each invalid UTF-8 byte counts as one), so a
// configured node name such as "foo_bar" becomes "foo-bar". "" stays "": the
// caller decides what an empty name means.
func SanitiseNode(s string) string {
	if ValidNode(s) || s == "" {
		return s
	}
	b := make([]byte, 0, len(s))
	for _, r := range s {
		if nodeChar(r) {
			b = append(b, byte(r))
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
}

// Generator issues ids for one node. Ids from one Generator strictly increase
// (by epoch, then sequence), even if the clock steps back. Safe for
// concurrent use. Uniqueness across nodes needs a unique node name per origin
// and one Generator per node; uniqueness across restarts whose clock reads
// earlier than the ids already issued needs Keep.
type Generator struct {
	origin byte
	node   string
	now    func() time.Time
	// sleep waits while the sequence of the current millisecond is used up.
	// Tests in this package replace it to drive a fake clock.
	sleep func(time.Duration)

	mu      sync.Mutex
	epochMs int64 // the largest epoch issued; -1 before the first id
	seq     int

	// With Keep: the file holding the reserved ceiling, and how it is
	// written (writeSynced; the tests watch it).
	keep    string
	keepErr func(error)
	write   func(path string, v int64) error
	// The durable ceiling (every epoch issued is below it), and after a
	// failed write, the epoch from which the next write is tried: at the
	// ceiling (retryFrom) and ahead of it (aheadFrom) apart, so that a
	// write ahead that failed does not put off the write an id at the
	// ceiling needs. They change under fileMu, which orders the writes of
	// the file; a reservation ahead is written on its own goroutine
	// (refreshing, refreshes), so that no post waits for it.
	fileMu     sync.Mutex
	reserved   atomic.Int64
	retryFrom  atomic.Int64
	aheadFrom  atomic.Int64
	refreshing atomic.Bool
	refreshes  sync.WaitGroup
}

// overflowWait is how long Next sleeps between clock reads when 10000 ids
// have been issued in one millisecond.
const overflowWait = 100 * time.Microsecond

// NewGenerator returns a Generator for origin ('S' or 'P') and node (see
// ValidNode; use SanitiseNode on a configured name first). now == nil means
// time.Now.
func NewGenerator(origin byte, node string, now func() time.Time) (*Generator, error) {
	if origin != OriginService && origin != OriginProxy {
		return nil, fmt.Errorf("receipt id generator: origin %q must be 'S' (service) or 'P' (proxy)", origin)
	}
	if !ValidNode(node) {
		if node == "" {
			return nil, errors.New("receipt id generator: node name is empty")
		}
		return nil, fmt.Errorf("receipt id generator: node name %s may hold only letters, digits and '-' (sanitised it would be %q)",
			quote(node), SanitiseNode(node))
	}
	if now == nil {
		now = time.Now
	}
	return &Generator{origin: origin, node: node, now: now, sleep: time.Sleep, epochMs: -1}, nil
}

// Next returns the next id: (now, 0) when the clock has moved past the last
// id's millisecond, else (last epoch, seq+1). When the sequence would pass
// MaxSeq it waits for the clock to pass the last epoch. The wait holds the
// lock: every caller would have to wait for the same millisecond anyway.
func (g *Generator) Next() ID {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		nowMs := g.now().UnixMilli()
		if nowMs > g.epochMs {
			g.epochMs, g.seq = nowMs, 0
			break
		}
		if g.seq < MaxSeq {
			g.seq++
			break
		}
		if nowMs < g.epochMs {
			// The clock is behind the ids issued (it stepped back, or
			// the start took its epoch from Keep's file): waiting for it
			// would stop every post for as long as the step. The next
			// millisecond is as unique.
			g.epochMs, g.seq = g.epochMs+1, 0
			break
		}
		g.sleep(overflowWait)
	}
	if g.keep != "" {
		g.reserveFor(g.epochMs)
	}
	return ID{EpochMs: g.epochMs, Seq: g.seq, Origin: g.origin, Node: g.node}
}

// reserveAhead is how far past the epoch being issued a reservation
// reaches, and after a crash, how far ahead of the clock (at most) the
// next start's ids begin. A new reservation is written on its own once
// the ids are within half of it of the ceiling, so every reserveAhead/2
// of ids.
const reserveAhead = 10 * time.Second

// reserveFor makes sure epoch e is below the durable ceiling before an id
// of it is returned, under g.mu: it waits for a write only when e has
// reached the ceiling (a reservation ahead failed, or has not finished),
// and starts the next one ahead of time.
func (g *Generator) reserveFor(e int64) {
	ahead := reserveAhead.Milliseconds()
	switch r := g.reserved.Load(); {
	case e >= r:
		if e < g.retryFrom.Load() {
			return // failed at the ceiling less than a second of ids ago
		}
		g.fileMu.Lock()
		defer g.fileMu.Unlock()
		if e >= g.reserved.Load() { // a reservation ahead may have just been written
			g.reserve(e, e+ahead, &g.retryFrom)
		}
	case e >= r-ahead/2 && e >= g.aheadFrom.Load() && g.refreshing.CompareAndSwap(false, true):
		g.refreshes.Add(1)
		go func() {
			defer g.refreshes.Done()
			defer g.refreshing.Store(false)
			g.fileMu.Lock()
			defer g.fileMu.Unlock()
			if e+ahead > g.reserved.Load() {
				g.reserve(e, e+ahead, &g.aheadFrom)
			}
		}()
	}
}

// Keep makes ids unique across restarts, also when the clock at the next
// start reads earlier than ids already issued (stepped back while weir was
// stopped, or a restart after a step forward was corrected). The file at
// path holds a ceiling on every epoch issued: Keep reads it, and the ids
// issued from then on start at the ceiling while the clock is behind it;
// Next raises it (durably, before an id at the ceiling is returned; ahead
// of time, on its own goroutine, so that no post waits for the disk), and
// Close lowers it to just past the last id. A write that fails is reported
// to onErr (ids are still issued: their uniqueness across such a restart
// is what is at risk) and tried again a second (of epochs) later.
func (g *Generator) Keep(path string, onErr func(error)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("receipt ids: %w", err)
	default:
		c, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || c < 0 {
			return fmt.Errorf("receipt ids: %s does not hold a number of milliseconds (%q)", path, b)
		}
		if c > g.epochMs {
			// Every id issued before is below c: the next is (c, 0) if
			// the clock is not past c.
			g.epochMs, g.seq = c, -1
		}
		g.reserved.Store(c)
	}
	if onErr == nil {
		onErr = func(error) {}
	}
	g.keep, g.keepErr = path, onErr
	if g.write == nil {
		g.write = writeSynced
	}
	return nil
}

// Close records the last id issued in Keep's file, so that a start
// right after a clean stop does not begin at the reservation, ahead of the
// clock. Ids issued after Close reserve again.
func (g *Generator) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// A reservation ahead written after this would raise the ceiling again.
	g.refreshes.Wait()
	if g.keep == "" || g.epochMs < 0 {
		return nil
	}
	g.fileMu.Lock()
	defer g.fileMu.Unlock()
	c := g.epochMs + 1
	if err := g.write(g.keep, c); err != nil {
		return fmt.Errorf("receipt ids: %w", err)
	}
	g.reserved.Store(c)
	return nil
}

// reserve writes ceiling c for ids of epoch e, under fileMu; after a
// failure, the next such write (at the ceiling, or ahead of it) waits
// for a second of ids (retry).
func (g *Generator) reserve(e, c int64, retry *atomic.Int64) {
	if err := g.write(g.keep, c); err != nil {
		retry.Store(e + time.Second.Milliseconds())
		g.keepErr(fmt.Errorf("receipt ids: cannot reserve ids up to %d: %w", c, err))
		return
	}
	g.reserved.Store(c)
	g.retryFrom.Store(0)
	g.aheadFrom.Store(0)
}

// writeSynced replaces the file at path with v, durably.
func writeSynced(path string, v int64) error {
	return fsutil.WriteFileSynced(path, []byte(strconv.FormatInt(v, 10)+"\n"), 0o640)
}
