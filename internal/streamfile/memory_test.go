package streamfile

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestWriteMemoryBounded writes a 512 MiB stream from a generator and checks
// that the live heap does not grow with the stream: a writer must hold about
// one block plus a small index, whatever it is fed.
func TestWriteMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 512 MiB through the compressor")
	}
	const (
		total   = 512 << 20
		parts   = 4
		chunk   = 1 << 20
		sample  = 32 << 20
		maxGrow = 16 << 20
	)
	c := newTestCodec(t)
	// The encoder allocates its match tables on first use; they belong to the
	// Codec (one per process), not to a stream, so they go in the baseline.
	encodeStream(t, c, WriterOptions{}, []section{{Data, 0, logBytes(1, 4<<20)}})

	// The generator's pool and the caller's chunk are the test's, not the
	// writer's, so they are allocated before the baseline too.
	gen := newMixedGen(42)
	buf := make([]byte, chunk)

	liveHeap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse)
	}
	base := liveHeap()

	path := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := NewWriter(f, c, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var peak int64
	written := 0
	for part := range parts {
		sw, err := w.Open(Data, part)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < total/parts; n += chunk {
			gen.Read(buf)
			if _, err := sw.Write(buf); err != nil {
				t.Fatal(err)
			}
			if written += chunk; written%sample == 0 {
				peak = max(peak, liveHeap()-base)
			}
		}
		if err := sw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	peak = max(peak, liveHeap()-base)
	t.Logf("wrote %d MiB into %d bytes (ratio %.1f); live heap peak %+d KiB over baseline %d KiB",
		total>>20, w.Size(), float64(total)/float64(w.Size()), peak>>10, base>>10)
	if peak > maxGrow {
		t.Errorf("live heap grew by %d KiB while writing, want under %d KiB", peak>>10, maxGrow>>10)
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r := openStream(t, c, path)
	for part := range parts {
		if got := r.Size(Data, part); got != total/parts {
			t.Errorf("Size(Data, %d) = %d, want %d", part, got, total/parts)
		}
	}
}

// mixedGen feeds the memory test: one chunk in sixteen is log text, the
// rest are windows of a 4 MiB random pool at random offsets. Compressing log
// text is ~15x slower under the race detector, and this test is about memory,
// not ratio; the mix still produces both zstd and raw blocks.
type mixedGen struct {
	rng  *rand.Rand
	pool []byte
	logs *logGen
	n    int
}

func newMixedGen(seed uint64) *mixedGen {
	return &mixedGen{rng: rand.New(rand.NewPCG(seed, 1)), pool: randomBytes(seed, 4<<20), logs: newLogGen(seed)}
}

// Read fills p, which must be at most len(pool) bytes.
func (g *mixedGen) Read(p []byte) (int, error) {
	g.n++
	if g.n%16 == 0 {
		return g.logs.Read(p)
	}
	off := g.rng.IntN(len(g.pool) - len(p) + 1)
	return copy(p, g.pool[off:]), nil
}
