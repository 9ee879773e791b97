package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirhq/weir/internal/powercut"
)

// powerDisk is a data directory on a power-cut filesystem
// (internal/powercut) that the test can cut and bring back: dir is the
// mountpoint, the same path across cuts; each cut's durable state becomes
// the next disk under base.
type powerDisk struct {
	t    *testing.T
	base string
	dir  string
	fs   *powercut.FS
	n    int
}

// newPowerDisk mounts an empty power-cut filesystem. It needs root and
// /dev/fuse (CI checks both); elsewhere the test skips.
func newPowerDisk(t *testing.T) *powerDisk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a FUSE filesystem (CI runs as root)")
	}
	d := &powerDisk{t: t, base: t.TempDir()}
	d.dir = filepath.Join(d.base, "data")
	disk := filepath.Join(d.base, "disk0")
	for _, p := range []string{d.dir, disk} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d.mount(disk)
	return d
}

// mount shows disk on dir; it is unmounted at cleanup, after the
// processes using it were stopped (their cleanups are registered later),
// unless restore unmounts it first.
func (d *powerDisk) mount(disk string) {
	d.t.Helper()
	shadow, err := os.MkdirTemp(d.base, "shadow-")
	if err != nil {
		d.t.Fatal(err)
	}
	fs, err := powercut.Mount(disk, d.dir, shadow)
	if err != nil {
		d.t.Fatalf("%v (the test needs root and /dev/fuse; CI checks both)", err)
	}
	d.t.Cleanup(func() { _ = fs.Unmount() })
	d.fs = fs
}

// cut is the power failure: nothing more becomes durable.
func (d *powerDisk) cut() { d.fs.Cut() }

// restore brings the machine back with what its disk held (after the
// processes using it were killed) and returns the syncs made before the
// cut.
func (d *powerDisk) restore() (files, dirs int64) {
	d.t.Helper()
	files, dirs = d.fs.Syncs()
	if err := d.fs.Unmount(); err != nil {
		d.t.Fatal(err)
	}
	d.n++
	disk := filepath.Join(d.base, fmt.Sprintf("disk%d", d.n))
	if err := d.fs.Materialize(disk); err != nil {
		d.t.Fatalf("power cut %d: %v", d.n, err)
	}
	d.mount(disk)
	return files, dirs
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
	crashDuringPosts(t, newPowerDisk(t))
}

// TestProxyPowerCutDuringReceipt is TestProxyKillDuringReceipt with the
// proxy's data directory (its repository and queue) on a power-cut
// filesystem: the power is cut and the proxy killed three times while
// clients post, and every receipt it gave must still reach the main
// service, byte-exact.
func TestProxyPowerCutDuringReceipt(t *testing.T) {
	proxyCrashDuringReceipt(t, true)
}
