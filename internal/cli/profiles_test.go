package cli

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestProfiles: --cpuprofile and --memprofile each leave a profile in
// pprof's format (gzipped protocol buffers) once the server stops, and
// naming neither writes nothing.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	p := profiles{cpu: filepath.Join(dir, "cpu.pprof"), mem: filepath.Join(dir, "mem.pprof")}
	stop, err := p.start()
	if err != nil {
		t.Fatal(err)
	}
	var sink [][]byte
	for i := range 2000 {
		sink = append(sink, bytes.Repeat([]byte{byte(i)}, 4096))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{p.cpu, p.mem} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s is not a pprof profile: %v", filepath.Base(path), err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil || len(raw) == 0 {
			t.Fatalf("%s: %d bytes of profile, %v", filepath.Base(path), len(raw), err)
		}
	}
	if len(sink) != 2000 {
		t.Fatal("allocations optimised away")
	}

	stop, err = profiles{}.start()
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("files after a run with no profiles: %v", entries)
	}

	// A profile that cannot be written is an error at start (CPU) or at
	// the end (memory), not a silent nothing.
	if _, err := (profiles{cpu: filepath.Join(dir, "missing", "cpu")}).start(); err == nil {
		t.Error("a CPU profile in a missing directory started")
	}
	stop, err = profiles{mem: filepath.Join(dir, "missing", "mem")}.start()
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err == nil {
		t.Error("a memory profile in a missing directory was reported written")
	}
}
