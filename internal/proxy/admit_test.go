package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/config"
)

// TestAdmitLooksAgainBeforeRefusing: the free-space sample is refreshed
// once a second; a stale low sample must not refuse posts once space has
// returned, and a real shortage is refused with a message naming the
// setting.
func TestAdmitLooksAgainBeforeRefusing(t *testing.T) {
	dir := t.TempDir()
	p := New(Options{DataDir: dir, Repository: config.Repository{MinFreeSpace: 1 << 10}})
	if err := p.Admit(); err != nil {
		t.Fatalf("unknown free space: %v", err)
	}
	p.free.Store(10) // a sample taken while the disk was full
	if err := p.Admit(); err != nil {
		t.Fatalf("stale low sample with space free now: %v", err)
	}
	if p.free.Load() < 1<<10 {
		t.Errorf("the sample was not refreshed: %d", p.free.Load())
	}

	p = New(Options{DataDir: dir, Repository: config.Repository{MinFreeSpace: config.ByteSize(1) << 60}})
	p.free.Store(10)
	err := p.Admit()
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "minFreeSpace") {
		t.Fatalf("1 EiB minFreeSpace: %v, want ErrFull naming minFreeSpace", err)
	}
	if p.free.Load() == 10 {
		t.Errorf("the refusal did not look at the volume again")
	}
}
