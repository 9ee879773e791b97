package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/streamfile"
)

// TestPackNameAfterRestartWithEarlierClock: pack names are <node>-<seq>,
// the sequence starting at the clock's nanoseconds at Open. A start whose
// clock read earlier than an earlier run's (set back while weir was
// stopped) came to a name that run had used: the pack's creation failed
// (O_EXCL), and so did the batch's posts. The next free number is taken.
func TestPackNameAfterRestartWithEarlierClock(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		s := e.openPacked(t, nil, "n1", packMax)
		first := commitOne(t, s, "FIRST", []section{{streamfile.Data, 0, []byte("before the restart")}})
		seq, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(first.Pack), "N1-"), ".wpk"), 10, 64)
		if err != nil {
			t.Fatalf("pack %q: %v", first.Pack, err)
		}
		s.Close()

		s2 := e.openPacked(t, nil, "n1", packMax)
		store.SetPackSeq(s2, seq-1) // the clock read at this start what it read at the last one
		post := s2.Begin()
		w, err := post.NewStream(context.Background(), spec("SECOND"))
		if err != nil {
			t.Fatal(err)
		}
		if err := writeSections(w, []section{{streamfile.Data, 0, []byte("after the restart")}}); err != nil {
			t.Fatal(err)
		}
		streams, err := post.Commit(context.Background())
		if err != nil {
			t.Fatalf("a post after a start with the clock set back: %v", err)
		}
		if streams[0].Pack == first.Pack || streams[0].Pack == "" {
			t.Fatalf("new pack %q, the earlier run's %q", streams[0].Pack, first.Pack)
		}
		if got := read(t, s2, first.ID, streamfile.Data, 0); string(got) != "before the restart" {
			t.Fatalf("earlier stream: %q", got)
		}
		if got := read(t, s2, streams[0].ID, streamfile.Data, 0); string(got) != "after the restart" {
			t.Fatalf("new stream: %q", got)
		}
	})
}

// TestPackOrphansAfterClockSetBack: the clock read years ahead for a while
// (day directories of 2099 were made), then was set right. A pack written
// since, in today's directory, whose batch never committed (a crash) was
// never removed: the start looked for orphans only in the two newest day
// directories.
func TestPackOrphansAfterClockSetBack(t *testing.T) {
	engines(t, func(t *testing.T, e *env) {
		for _, d := range []string{"01", "02"} {
			if err := os.MkdirAll(filepath.Join(e.root(), "packs", "2099", "01", d), 0o750); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now().UTC()
		today := filepath.Join(e.root(), "packs", now.Format("2006"), now.Format("01"), now.Format("02"))
		if err := os.MkdirAll(today, 0o750); err != nil {
			t.Fatal(err)
		}
		orphan := filepath.Join(today, "N1-7.wpk")
		if err := os.WriteFile(orphan, []byte("never committed"), 0o640); err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(context.Background(), e.repo, e.codec, store.Options{
			Root: e.root(), Node: "n1", BlockSize: 4096, PackMax: packMax, Now: func() time.Time { return now },
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("orphan pack in today's directory after the clock was set back: %v, want it removed", err)
		}
	})
}
