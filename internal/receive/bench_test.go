package receive

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/weirhq/weir/internal/config"
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
