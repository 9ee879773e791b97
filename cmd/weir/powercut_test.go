package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/powercut"
)

// powerCutCycles is how many times TestPowerCutDuringPosts cuts the power.
const powerCutCycles = 3

// mountPowerCut mounts a power-cut filesystem (internal/powercut) showing
// backing on mountpoint; it is unmounted at cleanup, after the processes
// using it were stopped (their cleanups were registered later), unless the
// test unmounts it first.
func mountPowerCut(t *testing.T, backing, mountpoint string) *powercut.FS {
	t.Helper()
	shadow, err := os.MkdirTemp(filepath.Dir(backing), "shadow-")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := powercut.Mount(backing, mountpoint, shadow)
	if err != nil {
		t.Fatalf("%v (the test needs root and /dev/fuse; CI checks both)", err)
	}
	t.Cleanup(func() { _ = pc.Unmount() })
	return pc
}

// TestPowerCutDuringPosts is the proof for power loss, as TestKillDuringPosts
// is for SIGKILL: weir serve's data directory (stream files, packs and the
// SQLite database) is on a filesystem that keeps only what was synced, by
// the strict POSIX rules (a file's bytes up to its last fsync or
// fdatasync, a directory's names up to the directory's last fsync). While
// 16 clients post, the power is cut (every sync fails from then on) and
// the server killed; weir then starts on exactly what a disk would have
// held, and every receipt a client got must name exactly one complete,
// byte-exact stream, with nothing partial visible. Three cuts, each on the
// state the previous one left.
func TestPowerCutDuringPosts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a FUSE filesystem (CI runs as root)")
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(7*time.Minute))
	defer cancel()

	base := t.TempDir()
	e := newEnv(t)
	e.data = filepath.Join(base, "data") // the mountpoint
	disk := filepath.Join(base, "disk0")
	for _, d := range []string{e.data, disk} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pc := mountPowerCut(t, disk, e.data)
	e.mustAdmin("feed", "create", killFeed)
	ledger := &killLedger{pool: newKillPool(), sent: map[string]bool{}, receipts: map[string]string{}}
	srv := e.startServer()
	var totalCutOff int64
	for cycle := 1; cycle <= powerCutCycles; cycle++ {
		before := len(ledger.receipts)
		st := runKillCycle(ctx, t, e, srv, ledger, cycle, func() {
			pc.Cut()
			srv.kill()
		})
		totalCutOff += st.cutOff
		if st.receipts == 0 {
			t.Errorf("cycle %d: no post was acknowledged before the power cut", cycle)
		}
		files, dirs := pc.Syncs()
		if err := pc.Unmount(); err != nil {
			t.Fatal(err)
		}

		// The machine comes back with what its disk held.
		disk = filepath.Join(base, fmt.Sprintf("disk%d", cycle))
		if err := pc.Materialize(disk); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		pc = mountPowerCut(t, disk, e.data)
		start := time.Now()
		srv = e.startServer()
		restart := time.Since(start)
		removed := removedAtStart(srv.logs.String())

		streams := verifyKillStore(t, e, ledger)
		verifyKillSample(t, e, ledger, ledger.order[before:])
		t.Logf("cycle %d: %d posts attempted (%d MiB sent), %d acknowledged, %d cut off by the power cut (in flight: %d by the clients' count, %d by the server's gauge), posting for %s; "+
			"%d file and %d directory syncs before the cut; restart %s, %d incomplete stream(s) removed at start; %d receipts in all (%d streams) byte-exact",
			cycle, st.attempted, st.sentBytes>>20, st.receipts, st.cutOff, st.inflightAtKill, st.serverInflight, st.elapsed.Round(time.Millisecond),
			files, dirs, restart.Round(time.Millisecond), removed, len(ledger.receipts), streams)
		if t.Failed() || ctx.Err() != nil {
			break
		}
	}
	if totalCutOff == 0 && !t.Failed() {
		t.Errorf("no post was in flight at any of the power cuts: the test did not exercise one during posts")
	}
	if code := srv.terminate(); code != 0 {
		t.Errorf("weir serve exited with %d after SIGTERM, want 0", code)
	}
	if ctx.Err() != nil {
		t.Fatalf("the test ran into its hard deadline")
	}
}
