// Package fsutil holds the file system steps that durability needs and
// the standard library leaves to its callers.
package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFileSynced replaces the file at path with data, durably: a
// temporary file beside it is written and synced, renamed over path, and
// the directory synced, so that a crash or power cut leaves either the old
// file or the new one, whole.
func WriteFileSynced(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the entries of dir (files created, renamed or removed in
// it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
