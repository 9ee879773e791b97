package streamfile

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// countWriter discards bytes but counts them, so BenchmarkWrite measures the
// writer and compressor, not the disk.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// BenchmarkWrite writes 64 MiB of log-like text in 32 KiB writes (the size a
// request body arrives in) and reports the compression ratio, with blocks
// compressed one at a time on the writer's goroutine (pipeline=1) and with
// the pipeline (compare the two in one run: the machines are shared).
func BenchmarkWrite(b *testing.B) {
	depth := pipelineDepth
	defer func() { pipelineDepth = depth }()
	for _, d := range []int{1, depth} {
		pipelineDepth = d
		b.Run(fmt.Sprintf("pipeline=%d", d), benchWrite)
	}
}

func benchWrite(b *testing.B) {
	c := newTestCodec(b)
	data := logBytes(1, 64<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var size int64
	for b.Loop() {
		var cw countWriter
		w, err := NewWriter(&cw, c, WriterOptions{})
		if err != nil {
			b.Fatal(err)
		}
		sw, err := w.Open(Data, 0)
		if err != nil {
			b.Fatal(err)
		}
		for p := data; len(p) > 0; {
			n := min(len(p), 32<<10)
			if _, err := sw.Write(p[:n]); err != nil {
				b.Fatal(err)
			}
			p = p[n:]
		}
		if err := sw.Close(); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	b.ReportMetric(float64(len(data))/float64(size), "ratio")
}

// benchStream writes 64 MiB of log-like text to a file and opens it.
func benchStream(b *testing.B) (*io.SectionReader, int64) {
	c := newTestCodec(b)
	path := filepath.Join(b.TempDir(), "stream")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	data := logBytes(2, 64<<20)
	w, err := NewWriter(f, c, WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	sw, err := w.Open(Data, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sw.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := sw.Close(); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	r := openStream(b, c, path)
	sec, err := r.Section(Data, 0)
	if err != nil {
		b.Fatal(err)
	}
	return sec, int64(len(data))
}

// BenchmarkReadAtRandom reads at random offsets, so nearly every read
// inflates a block (the cache rarely hits): the cost of a random access.
func BenchmarkReadAtRandom(b *testing.B) {
	sec, size := benchStream(b)
	for _, n := range []int{4 << 10, 1 << 20} {
		b.Run(byteSize(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			p := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sec.ReadAt(p, rng.Int64N(size-int64(n))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadSequential inflates a whole 64 MiB section through io.Copy.
func BenchmarkReadSequential(b *testing.B) {
	sec, size := benchStream(b)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.Copy(io.Discard, io.NewSectionReader(sec, 0, size)); err != nil {
			b.Fatal(err)
		}
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return itoa(n>>20) + "MiB"
	}
	return itoa(n>>10) + "KiB"
}

func itoa(n int) string { return string(appendPad(nil, int64(n), 1)) }
