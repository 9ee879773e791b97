package access

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weirhq/weir/internal/meta"
)

// Bootstrap names: the first administrator, and the file in the data
// directory that receives its one-time API key.
const (
	BootstrapUser    = "admin"
	BootstrapKeyFile = "bootstrap-admin-api-key"
	bootstrapKeyName = "bootstrap"
)

// Bootstrap gives a new installation its first administrator. When there are
// no users or groups at all, it creates user "admin" (display name
// "Administrator") holding Administrator, with an API key whose plaintext it
// writes to <dataDir>/bootstrap-admin-api-key (mode 0600, created
// exclusively, synced), and returns that path and true. Otherwise it returns
// "" and false. The caller logs the path, never the key.
//
// User, permission and key are created in one transaction that first checks
// there are still no users, under a lock, so when several nodes start at
// once exactly one creates the administrator and the others see it exists.
// The file is written after that commit: a crash in between leaves an
// administrator whose key nobody has, which `weir admin api-key create
// --user admin` repairs (the reverse order could leave a key file that
// authenticates nothing, or a second node's file for a key never stored).
//
// If the file already exists while the database has no users (the data
// directory outlived its database, or was pointed at a new one), Bootstrap
// fails before changing anything rather than overwrite what may be the only
// copy of an older key.
func (s *Service) Bootstrap(ctx context.Context, dataDir string) (path string, created bool, err error) {
	has, err := s.repo.HasUsers(ctx)
	if err != nil {
		return "", false, fmt.Errorf("bootstrap: %w", err)
	}
	if has {
		return "", false, nil
	}
	if dataDir == "" {
		return "", false, errors.New("bootstrap: no data directory given for the administrator's key file")
	}
	path = filepath.Join(dataDir, BootstrapKeyFile)
	if _, err := os.Lstat(path); err == nil {
		// Another server sharing the data directory may have just
		// bootstrapped (the file is written after its transaction
		// commits): then there are users now, and nothing to do.
		if has, herr := s.repo.HasUsers(ctx); herr == nil && has {
			return "", false, nil
		}
		return "", false, fmt.Errorf("bootstrap: the database has no users but %s already exists, left by an earlier start against another database; move it away (keeping it if that database is still in use) and start again", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("bootstrap: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return "", false, fmt.Errorf("bootstrap: create data directory: %w", err)
	}

	key, err := generateKey()
	if err != nil {
		return "", false, fmt.Errorf("bootstrap: %w", err)
	}
	now := s.now()
	created, err = s.repo.BootstrapAdmin(ctx,
		meta.User{Name: BootstrapUser, DisplayName: "Administrator", Enabled: true,
			CreateMs: now.UnixMilli(), UpdateMs: now.UnixMilli()},
		Administrator,
		meta.APIKey{Prefix: key[:visibleLen], Hash: hashKey(key), Name: bootstrapKeyName,
			Comments:  "created at first start; replace it with a key of your own and delete this one",
			ExpiresMs: now.Add(s.maxKeyExpiry).UnixMilli(), CreateMs: now.UnixMilli(), Enabled: true})
	if err != nil {
		return "", false, err
	}
	if !created {
		return "", false, nil
	}
	if err := writeKeyFile(path, key); err != nil {
		return "", false, fmt.Errorf("bootstrap: created user %q but could not save its API key: %w; create one with `weir admin api-key create --user %s`",
			BootstrapUser, err, BootstrapUser)
	}
	return path, true, nil
}

// writeKeyFile writes the key so that only the owner can read it. O_EXCL
// refuses an existing file or symlink (nothing is overwritten or followed);
// the file and its directory are synced so that the key outlives a crash
// right after the transaction that stored its hash.
func writeKeyFile(path, key string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if _, err := f.WriteString(key + "\n"); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync directory of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory of %s: %w", path, err)
	}
	return nil
}
