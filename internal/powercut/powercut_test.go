package powercut

import (
	"errors"
	"golang.org/x/sys/unix"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mount mounts a power-cut filesystem over a backing directory that holds
// one durable file, and returns it and its mountpoint.
func mount(t *testing.T) (*FS, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a FUSE filesystem")
	}
	base := t.TempDir()
	backing, mnt, shadow := filepath.Join(base, "backing"), filepath.Join(base, "mnt"), filepath.Join(base, "shadow")
	for _, d := range []string{backing, mnt, shadow, filepath.Join(backing, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(backing, "sub", "old"), []byte("durable"), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(backing, mnt, shadow)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return f, mnt
}

func syncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", p, err)
	}
}

func writeFile(t *testing.T, p, content string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	return f
}

// after materializes the durable state and returns a file's content, or
// "<none>" if the file does not exist there.
func after(t *testing.T, f *FS, rel ...string) map[string]string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "image")
	if err := f.Materialize(dst); err != nil {
		t.Fatalf("materialize: %v", err)
	}
	out := map[string]string{}
	for _, r := range rel {
		b, err := os.ReadFile(filepath.Join(dst, r))
		switch {
		case errors.Is(err, os.ErrNotExist):
			out[r] = "<none>"
		case err != nil:
			t.Fatal(err)
		default:
			out[r] = string(b)
		}
	}
	return out
}

func TestDurableOnlyWhatWasSynced(t *testing.T) {
	f, mnt := mount(t)
	sub := filepath.Join(mnt, "sub")

	// A new file, synced, in a directory not synced: its name is lost.
	a := writeFile(t, filepath.Join(sub, "a"), "first")
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	// A new file, not synced, in a synced directory: it is there, empty.
	writeFile(t, filepath.Join(sub, "b"), "never synced")
	got := after(t, f, "sub/old", "sub/a", "sub/b")
	if got["sub/old"] != "durable" || got["sub/a"] != "<none>" || got["sub/b"] != "<none>" {
		t.Errorf("before the directory's sync: %v", got)
	}

	syncPath(t, sub)
	got = after(t, f, "sub/a", "sub/b")
	if got["sub/a"] != "first" || got["sub/b"] != "" {
		t.Errorf("after the directory's sync: %v, want a=first and b empty", got)
	}

	// Writes and a truncation after the last sync are lost; a rename is
	// lost until its directory is synced.
	if _, err := a.WriteAt([]byte("FIRST and more"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(sub, "old"), filepath.Join(sub, "new")); err != nil {
		t.Fatal(err)
	}
	got = after(t, f, "sub/a", "sub/old", "sub/new")
	if got["sub/a"] != "first" || got["sub/old"] != "durable" || got["sub/new"] != "<none>" {
		t.Errorf("unsynced write and rename: %v", got)
	}
	if err := syscall.Fdatasync(int(a.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := a.Truncate(5); err != nil {
		t.Fatal(err)
	}
	syncPath(t, sub)
	got = after(t, f, "sub/a", "sub/old", "sub/new")
	if got["sub/a"] != "FIRST and more" || got["sub/old"] != "<none>" || got["sub/new"] != "durable" {
		t.Errorf("after fdatasync, an unsynced truncation and the directory's sync: %v", got)
	}

	// Opening with O_TRUNC truncates: durable once synced.
	tr, err := os.OpenFile(filepath.Join(sub, "new"), os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WriteString("NEW"); err != nil {
		t.Fatal(err)
	}
	if got := after(t, f, "sub/new"); got["sub/new"] != "durable" {
		t.Errorf("before the truncated file's sync: %v", got)
	}
	if err := tr.Sync(); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if got := after(t, f, "sub/new"); got["sub/new"] != "NEW" {
		t.Errorf("after the truncated file's sync: %v, want NEW", got)
	}

	// A new directory's name needs its parent's sync.
	dir := filepath.Join(mnt, "made")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := writeFile(t, filepath.Join(dir, "c"), "in made")
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	syncPath(t, dir)
	if got := after(t, f, "made/c"); got["made/c"] != "<none>" {
		t.Errorf("a new directory's name is durable without its parent's sync: %v", got)
	}
	syncPath(t, mnt)
	if got := after(t, f, "made/c"); got["made/c"] != "in made" {
		t.Errorf("after the parent's sync: %v", got)
	}

	// O_TMPFILE is refused: the model would not see the file.
	if tf, err := os.OpenFile(sub, os.O_RDWR|unix.O_TMPFILE, 0o600); err == nil {
		tf.Close()
		t.Errorf("O_TMPFILE succeeded; the model does not follow such files")
	}

	// The cut: fsync fails and nothing more becomes durable.
	f.Cut()
	if _, err := c.WriteAt([]byte("IN MADE"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync after the cut: %v, want EIO", err)
	}
	if got := after(t, f, "made/c"); got["made/c"] != "in made" {
		t.Errorf("after the cut: %v", got)
	}
	if files, dirs := f.Syncs(); files != 4 || dirs != 4 {
		t.Errorf("syncs: %d files, %d directories; want 4 and 4", files, dirs)
	}
}
