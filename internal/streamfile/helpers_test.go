package streamfile

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func newTestCodec(tb testing.TB) *Codec { return newTestCodecFor(tb, Zstd) }

// newTestCodecFor is a codec compressing with comp that compresses every
// block, however small, so the tests' small blocks exercise the compressed
// path; TestSmallBlocksRaw covers the default threshold.
func newTestCodecFor(tb testing.TB, comp Compression) *Codec {
	tb.Helper()
	c, err := NewCodecFor(comp)
	if err != nil {
		tb.Fatalf("NewCodecFor: %v", err)
	}
	tb.Cleanup(c.Close)
	c.minCompress = 0
	return c
}

// section is one (channel, part) of a test stream and its expected content.
type section struct {
	ch   Channel
	part int
	data []byte
}

// writeStream writes secs in the given order to a new file in a temp dir,
// feeding each section in irregular chunk sizes so the block buffering is
// exercised at every alignment. It returns the path and the closed Writer.
func writeStream(tb testing.TB, c *Codec, opt WriterOptions, secs []section) (string, *Writer) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "stream")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, c, opt)
	if err != nil {
		tb.Fatalf("NewWriter: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, uint64(len(secs))))
	for _, s := range secs {
		sw, err := w.Open(s.ch, s.part)
		if err != nil {
			tb.Fatalf("Open(%s, %d): %v", s.ch, s.part, err)
		}
		for rest := s.data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(100_000))
			if m, err := sw.Write(rest[:n]); err != nil || m != n {
				tb.Fatalf("Write(%s, %d): wrote %d of %d: %v", s.ch, s.part, m, n, err)
			}
			rest = rest[n:]
		}
		if got := w.SectionSize(s.ch, s.part); got != int64(len(s.data)) {
			tb.Fatalf("SectionSize(%s, %d) before close = %d, want %d", s.ch, s.part, got, len(s.data))
		}
		if err := sw.Close(); err != nil {
			tb.Fatalf("Close(%s, %d): %v", s.ch, s.part, err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatalf("Writer.Close: %v", err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path, w
}

// openStream opens path with NewReader; the file is closed at test end.
func openStream(tb testing.TB, c *Codec, path string) *Reader {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	r, err := NewReader(f, st.Size(), c)
	if err != nil {
		tb.Fatalf("NewReader: %v", err)
	}
	return r
}

// encodeStream writes secs to memory, for tests that mutate file bytes.
func encodeStream(tb testing.TB, c *Codec, opt WriterOptions, secs []section) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, c, opt)
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range secs {
		sw, err := w.Open(s.ch, s.part)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := sw.Write(s.data); err != nil {
			tb.Fatal(err)
		}
		if err := sw.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
	return b
}

func logBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	if _, err := io.ReadFull(newLogGen(seed), b); err != nil {
		panic(err)
	}
	return b
}

// logGen is an endless reader of plausible service log lines: fixed
// vocabulary, varying numbers and ids, so it compresses like real logs rather
// than like repeated text. It formats by hand because the memory test pushes
// half a gigabyte through it.
type logGen struct {
	rng  *rand.Rand
	us   int64 // microseconds since midnight
	line []byte
	pend []byte
}

func newLogGen(seed uint64) *logGen {
	return &logGen{rng: rand.New(rand.NewPCG(seed, 0x5eed)), us: 9 * 3600e6}
}

func appendPad(b []byte, v int64, width int) []byte {
	s := strconv.AppendInt(nil, v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

func (g *logGen) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(g.pend) == 0 {
			g.pend = g.next()
		}
		m := copy(p[n:], g.pend)
		g.pend = g.pend[m:]
		n += m
	}
	return n, nil
}

func (g *logGen) next() []byte {
	// Local arrays rather than package vars: fixed vocabulary, no shared state.
	logLevels := [...]string{"INFO ", "INFO ", "INFO ", "DEBUG", "WARN ", "ERROR"}
	logMsgs := [...]string{"http: request served", "store: stream committed", "feed: status checked", "receive: part accepted", "meta: attributes parsed", "gc: sweep finished"}
	logMethods := [...]string{"GET", "POST", "POST", "PUT", "HEAD"}
	logPaths := [...]string{"/datafeed", "/api/v1/feeds", "/api/v1/streams", "/status", "/api/v1/receipts"}
	statuses := [...]int64{200, 200, 200, 201, 204, 404, 500}
	r := g.rng
	g.us += int64(r.IntN(5000))
	b := append(g.line[:0], "2025-03-14T"...)
	b = appendPad(b, g.us/3600e6%24, 2)
	b = append(b, ':')
	b = appendPad(b, g.us/60e6%60, 2)
	b = append(b, ':')
	b = appendPad(b, g.us/1e6%60, 2)
	b = append(b, '.')
	b = appendPad(b, g.us%1e6, 6)
	b = append(b, "Z "...)
	b = append(b, logLevels[r.IntN(len(logLevels))]...)
	b = append(b, ' ')
	b = append(b, logMsgs[r.IntN(len(logMsgs))]...)
	b = append(b, " method="...)
	b = append(b, logMethods[r.IntN(len(logMethods))]...)
	b = append(b, " path="...)
	b = append(b, logPaths[r.IntN(len(logPaths))]...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(r.IntN(5000)), 10)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, statuses[r.IntN(len(statuses))], 10)
	b = append(b, " dur_us="...)
	b = strconv.AppendInt(b, int64(r.IntN(200000)), 10)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, int64(r.IntN(1<<20)), 10)
	b = append(b, " req="...)
	b = strconv.AppendUint(b, r.Uint64(), 16)
	b = append(b, " node=weir-"...)
	b = strconv.AppendInt(b, int64(r.IntN(8)), 10)
	b = append(b, '\n')
	g.line = b
	return b
}
