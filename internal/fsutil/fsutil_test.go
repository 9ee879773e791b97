package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFileSynced: the file is created, then replaced whole, with the
// mode asked for and no temporary file left; a directory that is not
// there is an error, and leaves nothing.
func TestWriteFileSynced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "id")
	for _, want := range []string{"first\n", "second, longer\n", "3\n"} {
		if err := WriteFileSynced(p, []byte(want), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			t.Fatalf("read back %q %v, want %q", got, err, want)
		}
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode: %v %v", fi.Mode(), err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("files left beside it: %v", es)
	}
	if err := WriteFileSynced(filepath.Join(dir, "none", "id"), []byte("x"), 0o640); err == nil {
		t.Fatal("a file in a missing directory was written")
	}
	if err := SyncDir(filepath.Join(dir, "none")); err == nil {
		t.Fatal("a missing directory synced")
	}
}
