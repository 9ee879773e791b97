// Package fsutil holds the file system steps that durability needs and
// the standard library leaves to its callers.
package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileSynced replaces the file at path with data, durably: a
// temporary file beside it is written and synced, renamed over path, and
// the directory synced, so that a crash or power cut leaves either the old
// file or the new one, whole. The temporary file's name is fixed (path
// with ".tmp"), so a path must have one writer at a time.
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

// CreateFileSynced creates the file at path holding data, durably, unless
// a file is there already: then it returns created false and leaves that
// one alone. The data is written to a temporary file first and linked in
// place, so that another process never sees the file before it is whole,
// and of two processes creating it at once exactly one succeeds. Where the
// filesystem has no hard links, the file is written as WriteFileSynced
// does, if it is still absent.
func CreateFileSynced(path string, data []byte, perm os.FileMode) (created bool, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, err
	}
	switch err := os.Link(tmp.Name(), path); {
	case errors.Is(err, fs.ErrExist):
		return false, nil
	case err != nil:
		if _, serr := os.Lstat(path); serr == nil {
			return false, nil
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return false, err
		}
	}
	return true, SyncDir(filepath.Dir(path))
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
