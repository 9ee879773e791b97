package main_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/streamfile"
)

// logGen generates a large, deterministic, log-like body without holding it.
// The body is a sequence of pages; each starts with a 32-byte line naming its
// page number, followed by a window of a 1 MiB template of log lines chosen
// by the page number. Any byte range can be regenerated, so stored data can
// be spot-checked anywhere. It compresses like text but is not trivially
// repetitive: every page is distinct.
type logGen struct {
	tmpl     []byte
	pageSize int64
	windows  int64 // distinct template windows
	stride   int64 // template offset between consecutive windows
}

const genHeader = 32 // "#page          <page number>\n"

// newLogGen makes a generator with pages of pageSize bytes. windows == 0
// lets a page start at any template offset; otherwise pages cycle through
// that many windows (so that each window's compressed form can be reused).
func newLogGen(seed uint64, pageSize int64, windows int64) *logGen {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	levels := []string{"INFO ", "DEBUG", "WARN ", "ERROR", "INFO ", "INFO "}
	services := []string{"auth", "billing", "gateway", "search", "ingest", "scheduler", "mailer"}
	actions := []string{"login", "logout", "read", "write", "delete", "refresh", "export", "import"}
	var b bytes.Buffer
	for b.Len() < 1<<20 {
		fmt.Fprintf(&b, "2026-%02d-%02dT%02d:%02d:%02d.%03dZ %s host-%03d svc=%s user=u%05d action=%s status=%d latencyMs=%d req=%016x\n",
			1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000),
			levels[r.IntN(len(levels))], r.IntN(200), services[r.IntN(len(services))], r.IntN(100000),
			actions[r.IntN(len(actions))], []int{200, 200, 200, 201, 204, 400, 403, 404, 500}[r.IntN(9)],
			r.IntN(5000), r.Uint64())
	}
	g := &logGen{tmpl: b.Bytes(), pageSize: pageSize, windows: windows, stride: 4099}
	if windows == 0 {
		g.windows, g.stride = int64(len(g.tmpl))-pageSize, 1
	}
	if (g.windows-1)*g.stride+pageSize > int64(len(g.tmpl)) {
		panic("logGen: template too small for the windows")
	}
	return g
}

// window is the template window page p uses, and its bytes.
func (g *logGen) window(p int64) int64 { return (p * 7919) % g.windows }

func (g *logGen) windowBytes(w int64) []byte {
	return g.tmpl[w*g.stride : w*g.stride+g.pageSize-genHeader]
}

// header writes page p's first line (genHeader bytes) into dst.
func (g *logGen) header(p int64, dst []byte) {
	copy(dst[:genHeader], "#page                          \n")
	n := strconv.AppendInt(nil, p, 10)
	copy(dst[genHeader-1-len(n):], n)
}

// page writes page p (pageSize bytes) into dst.
func (g *logGen) page(p int64, dst []byte) {
	g.header(p, dst)
	copy(dst[genHeader:g.pageSize], g.windowBytes(g.window(p)))
}

// fill writes the body bytes [off, off+len(b)) into b.
func (g *logGen) fill(b []byte, off int64) {
	var scratch []byte
	for len(b) > 0 {
		p, in := off/g.pageSize, off%g.pageSize
		if in == 0 && int64(len(b)) >= g.pageSize {
			g.page(p, b[:g.pageSize])
			b, off = b[g.pageSize:], off+g.pageSize
			continue
		}
		if scratch == nil {
			scratch = make([]byte, g.pageSize)
		}
		g.page(p, scratch)
		n := copy(b, scratch[in:])
		b, off = b[n:], off+int64(n)
	}
}

// genReader reads the first size bytes of a logGen body.
type genReader struct {
	g         *logGen
	off, size int64
}

func (r *genReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if rem := r.size - r.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	r.g.fill(p, r.off)
	r.off += int64(len(p))
	return len(p), nil
}

// gzipPipe produces, on the fly, a gzip body that decompresses to the first
// size bytes of g (a whole number of pages). Each page is two gzip members:
// its header line as a stored (uncompressed) member, then its template
// window, deflated once up front and reused. Compressing a gigabyte in the
// test process would take minutes under the race detector; this way the body
// still has real deflate data, stored blocks and many members (which the
// datafeed must read as one stream), and costs little more than copying.
func gzipPipe(g *logGen, size int64) io.ReadCloser {
	if size%g.pageSize != 0 {
		panic("gzipPipe: size must be a whole number of pages")
	}
	segs := make([][]byte, g.windows)
	for w := range segs {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(g.windowBytes(int64(w)))
		_ = zw.Close()
		segs[w] = buf.Bytes()
	}
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 256<<10)
		hz, _ := gzip.NewWriterLevel(bw, gzip.NoCompression)
		hdr := make([]byte, genHeader)
		for p := range size / g.pageSize {
			g.header(p, hdr)
			hz.Reset(bw)
			if _, err := hz.Write(hdr); err != nil {
				pw.CloseWithError(err)
				return
			}
			if err := hz.Close(); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := bw.Write(segs[g.window(p)]); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(bw.Flush())
	}()
	return pr
}

// TestLargePostBoundedMemory posts very large bodies, generated on the fly
// and sent chunked, and checks they are received in bounded memory and
// stored exactly: 5 GiB uncompressed, and 1 GiB (decompressed) as gzip.
func TestLargePostBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("large post; run without -short")
	}
	const rssLimit = 300 << 20
	cases := []struct {
		name        string
		size        int64
		compression string
		maxRequest  string
	}{
		{"NONE-5GiB", 5 << 30, "NONE", "6GiB"},
		{"GZIP-1GiB", 1 << 30, "GZIP", "2GiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "maxRequestSize: "+tc.maxRequest, "bodyIdleTimeout: 5m")
			if free := freeDisk(t, e.data); free < 8<<30 {
				t.Fatalf("only %.1f GiB free on the volume of %s: the large post tests need at least 8 GiB free", float64(free)/(1<<30), e.data)
			}
			e.mustAdmin("feed", "create", "LARGE-PROOF")
			srv := e.startServer()
			var (
				g    *logGen
				body io.Reader
			)
			if tc.compression == "GZIP" {
				g = newLogGen(uint64(tc.size), 64<<10, 48)
				rc := gzipPipe(g, tc.size)
				defer rc.Close()
				body = rc
			} else {
				g = newLogGen(uint64(tc.size), 4<<10, 0)
				body = &genReader{g: g, size: tc.size}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			start := time.Now()
			resp, err := postBody(ctx, newClient(15*time.Minute), srv.url, body, -1,
				map[string]string{"Feed": "LARGE-PROOF", "Compression": tc.compression})
			elapsed := time.Since(start)
			if err != nil {
				t.Fatalf("post %s: %v", tc.name, err)
			}
			if resp.status != http.StatusOK {
				t.Fatalf("post %s: HTTP %d, Service-Status %s, Service-Error %q, body %q",
					tc.name, resp.status, resp.header.Get("Service-Status"), resp.header.Get("Service-Error"), resp.body)
			}
			id := receiptID(t, e.node, resp)
			peak := srv.peakRSS()
			if code := srv.terminate(); code != 0 {
				t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
			}
			t.Logf("%s: posted %d bytes (%s) in %s (%.0f MiB/s); server peak RSS (VmHWM) %.1f MiB",
				tc.name, tc.size, tc.compression, elapsed.Round(time.Millisecond), float64(tc.size)/(1<<20)/elapsed.Seconds(), float64(peak)/(1<<20))
			if peak > rssLimit {
				t.Errorf("server peak RSS %.1f MiB exceeds %d MiB while receiving a %d-byte post: memory is not bounded",
					float64(peak)/(1<<20), rssLimit>>20, tc.size)
			}

			streams := e.listStreams()
			if len(streams) != 1 {
				t.Fatalf("%d streams stored, want 1: %+v", len(streams), streams)
			}
			s := streams[0]
			if s.ReceiptID != id || s.Status != "UNLOCKED" || s.Parts != 1 || s.RawSize != tc.size ||
				attrValue(s.Attributes, "StreamSize") != strconv.FormatInt(tc.size, 10) {
				t.Errorf("stream %+v: want receipt %s, UNLOCKED, 1 part, rawSize and StreamSize %d", s, id, tc.size)
			}
			t.Logf("%s: stored in a %.1f MiB stream file", tc.name, float64(s.FileSize)/(1<<20))

			// Spot-check byte ranges through the Go store API.
			r := e.openStore()
			sec, closeFn, err := r.section(s.ID, streamfile.Data, 0)
			if err != nil {
				t.Fatalf("open stream %d: %v", s.ID, err)
			}
			defer closeFn()
			if sec.Size() != tc.size {
				t.Errorf("data section is %d bytes, want %d", sec.Size(), tc.size)
			}
			rng := rand.New(rand.NewPCG(uint64(tc.size), 7))
			ranges := [][2]int64{
				{0, 1 << 20},                      // the start
				{tc.size - 1<<20, 1 << 20},        // the last MiB
				{tc.size/2 - 12345, 1<<20 + 4321}, // a middle range across block boundaries
			}
			for range 5 {
				ranges = append(ranges, [2]int64{rng.Int64N(tc.size - 64<<10), 1 + rng.Int64N(64<<10)})
			}
			for _, rg := range ranges {
				got := make([]byte, rg[1])
				if _, err := sec.ReadAt(got, rg[0]); err != nil && !(err == io.EOF && rg[0]+rg[1] == tc.size) {
					t.Errorf("read [%d, +%d): %v", rg[0], rg[1], err)
					continue
				}
				want := make([]byte, rg[1])
				g.fill(want, rg[0])
				if !bytes.Equal(got, want) {
					t.Errorf("bytes [%d, +%d) differ from what was sent, first at +%d", rg[0], rg[1], firstDiff(got, want))
				}
			}
			// The whole stream, as an operator reads it with stream cat, is
			// exactly what was sent; the reader runs in bounded memory too.
			start = time.Now()
			catRSS := catCompare(t, e, s.ID, g, tc.size)
			t.Logf("%s: admin stream cat of all %d bytes matches what was sent (%s, peak RSS %.1f MiB)",
				tc.name, tc.size, time.Since(start).Round(time.Millisecond), float64(catRSS)/(1<<20))
			if catRSS > rssLimit {
				t.Errorf("admin stream cat peak RSS %.1f MiB exceeds %d MiB", float64(catRSS)/(1<<20), rssLimit>>20)
			}

			// Reading past the end yields nothing more.
			if n, err := sec.ReadAt(make([]byte, 16), tc.size); n != 0 || err != io.EOF {
				t.Errorf("read at the end: %d bytes, %v; want 0, EOF", n, err)
			}
		})
	}
}

// catCompare streams `weir admin stream cat ID` and compares every byte with
// the generator; it returns the command's peak RSS.
func catCompare(t *testing.T, e *weirEnv, id int64, g *logGen, size int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, weirBin, append([]string{"admin", "stream", "cat", strconv.FormatInt(id, 10)}, e.storageArgs()...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got, want := make([]byte, 1<<20), make([]byte, 1<<20)
	var off, peak int64
	for {
		// Near the end, while the command is still blocked writing the
		// rest to us, sample its peak RSS. (The rusage of a child is no
		// use: Linux carries the parent's high-water mark over fork+exec.)
		if peak == 0 && off+2<<20 >= size {
			peak = vmHWM(t, cmd.Process.Pid)
		}
		n, err := io.ReadFull(out, got)
		if n > 0 {
			if off+int64(n) > size {
				t.Errorf("stream cat wrote more than the %d bytes sent", size)
				break
			}
			g.fill(want[:n], off)
			if !bytes.Equal(got[:n], want[:n]) {
				t.Errorf("stream cat: bytes [%d, +%d) differ from what was sent, first at +%d", off, n, firstDiff(got[:n], want[:n]))
				break
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Errorf("read stream cat output: %v", err)
			break
		}
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("weir admin stream cat %d: %v\n%s", id, err, stderr.String())
	}
	if off != size && !t.Failed() {
		t.Errorf("stream cat wrote %d bytes, want %d", off, size)
	}
	return peak
}
