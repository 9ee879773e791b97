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

// TestCreateFileSynced: the file is created whole once; later calls, and
// calls racing with it, leave it as it is and say so; exactly one of many
// racing callers creates it, and no temporary file is left.
func TestCreateFileSynced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "id")
	const n = 16
	created := make(chan bool, n)
	for i := range n {
		go func() {
			ok, err := CreateFileSynced(p, []byte{byte('a' + i), '\n'}, 0o640)
			if err != nil {
				t.Error(err)
			}
			created <- ok
		}()
	}
	count := 0
	for range n {
		if <-created {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d callers created the file, want 1", count)
	}
	got, err := os.ReadFile(p)
	if err != nil || len(got) != 2 || got[1] != '\n' {
		t.Fatalf("the file holds %q %v", got, err)
	}
	if ok, err := CreateFileSynced(p, []byte("other\n"), 0o640); ok || err != nil {
		t.Fatalf("a second create: %v %v", ok, err)
	}
	if again, _ := os.ReadFile(p); string(again) != string(got) {
		t.Fatalf("the file changed to %q", again)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode: %v %v", fi.Mode(), err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("files left beside it: %v", es)
	}
}
