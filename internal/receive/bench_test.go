package receive

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/stroomzip"
)

// BenchmarkReceive measures whole posts through the handler into a real
// store (durable commits included), one post per goroutine at a time, so
// with -cpu N it shows how group commit carries concurrent senders. Compare
// ns/op and allocs/op between -cpu values and across changes, not to a
// fixed number: the machines are shared.
//
// pack=0 stores every stream in a file of its own (the design before
// packing); pack=default packs small streams into one file per group
// commit. Compare the two in one run.
func BenchmarkReceive(b *testing.B) {
	for _, pack := range []config.ByteSize{0, config.Default().Store.PackMaxSize} {
		for _, size := range []int{1 << 10, 45 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("pack=%s/body=%dKiB", pack, size>>10), func(b *testing.B) {
				benchReceive(b, pack, size)
			})
		}
	}
}

func benchReceive(b *testing.B, pack config.ByteSize, size int) {
	{
		{
			h, _, _ := benchHandler(b, pack)
			body := bytes.Repeat([]byte("2024-03-01T12:34:56.789Z host=web-01 level=INFO msg=\"request served\"\n"), size/60+1)[:size]
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodPost, "/datafeed", bytes.NewReader(body))
					req.Header.Set("Feed", "FUZZ")
					req.Header.Set("System", "bench")
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
				}
			})
		}
	}
}

// BenchmarkReceiveS2Zip measures a weir proxy's aggregate reaching the
// main service: a zip of 10 parts of 45 KiB of varied log lines, each data
// entry of S2 blocks made as a proxy's store makes them (and passed on as
// they are, stroomzip.Blocks). Compare across changes of the receiving
// side (what it costs to take such an entry into the store).
func BenchmarkReceiveS2Zip(b *testing.B) {
	h, _, _ := benchHandler(b, config.Default().Store.PackMaxSize)
	var body bytes.Buffer
	zw := stroomzip.NewWriterS2(&body)
	for i := range 10 {
		var lines []byte
		for j := range 640 {
			lines = fmt.Appendf(lines, "2024-03-01T12:%02d:%02d.%03dZ host=web-%02d level=INFO user=u%05d msg=\"request %d served\"\n",
				j%60, i, j, j%17, (i*7919+j*104729)%100000, i*1000+j)
		}
		src := &s2Source{Reader: bytes.NewReader(lines), data: [][]byte{lines}, blocks: [][]byte{s2.Encode(nil, lines)}}
		meta := fmt.Sprintf("Feed:FUZZ\nSystem:bench\nReceiptId:%d\n", i)
		if _, err := zw.WritePart(stroomzip.Part{Meta: strings.NewReader(meta), Data: src}); err != nil {
			b.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	b.SetParallelism(4)
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if rec := postZip(h, body.Bytes()); rec.Code != http.StatusOK {
				b.Fatalf("status %d: %s", rec.Code, rec.Header().Get("Service-Error"))
			}
		}
	})
	b.StopTimer()
	// The posts wait for the disk more than for the CPU: the CPU they
	// take is the figure to compare.
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
