package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestMkdirAllSyncTrustsNoFoundDirectory: a directory that is there
// already is made durable (its parent flushed) the first time this store
// uses it, and again after a flush that failed, not trusted because it
// exists. It used to be: compaction creates today's pack directory too,
// and stage one could put an answered post's record in it before
// compaction had flushed its entry (a power cut then took the directory
// and the pack). Found by a review of the log-structured commit
// (reliability.md, bug 49).
func TestMkdirAllSyncTrustsNoFoundDirectory(t *testing.T) {
	root := t.TempDir()
	var synced []string
	var fail error
	s := &Store{opt: Options{Root: root}, syncDir: func(dir string) error {
		if fail != nil {
			return fail
		}
		synced = append(synced, dir)
		return nil
	}}
	day := filepath.Join(root, "packs", "2026", "12", "06")
	// Created by someone else (compaction), its entry not flushed yet.
	if err := os.MkdirAll(day, 0o750); err != nil {
		t.Fatal(err)
	}
	fail = errors.New("injected: EIO")
	if err := s.mkdirAllSync(day); err == nil {
		t.Fatal("a failed flush of a parent was not reported")
	}
	fail = nil
	if err := s.mkdirAllSync(day); err != nil {
		t.Fatal(err)
	}
	want := []string{root, filepath.Join(root, "packs"), filepath.Join(root, "packs", "2026"), filepath.Join(root, "packs", "2026", "12")}
	if !slices.Equal(synced, want) {
		t.Errorf("flushed %q, want every parent up to the root %q", synced, want)
	}
	// Known durable now: no flush again; a new sibling flushes its parent only.
	synced = nil
	if err := s.mkdirAllSync(day); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(root, "packs", "2026", "12", "07")
	if err := s.mkdirAllSync(next); err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(root, "packs", "2026", "12")}; !slices.Equal(synced, want) {
		t.Errorf("flushed %q, want %q", synced, want)
	}
	if fi, err := os.Stat(next); err != nil || !fi.IsDir() {
		t.Errorf("%s not created: %v", next, err)
	}
	// Nothing above the root is the store's to flush.
	synced = nil
	if err := s.mkdirAllSync(root); err != nil || len(synced) != 0 {
		t.Errorf("the root: err %v, flushed %q", err, synced)
	}
}
