package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weirhq/weir/internal/fsutil"
	"github.com/weirhq/weir/internal/meta"
)

// dataIDFile names the file in the data directory that holds its id.
const dataIDFile = "data-id"

// checkDataDir makes sure, on PostgreSQL, that dataDir is the data
// directory whose files the database's rows name. Servers that share a
// database must share the directory too (a filesystem each mounts): a
// server on another one could read none of the others' streams (500, "its
// stored file is missing"), nor their exports, and its start would look
// for its node's files in the wrong place. So the first server on a
// database writes a random id into dataDir's data-id file and records it in
// the database; every later start compares the two and refuses to go on
// when they differ or the file is missing. Admin commands (readOnly) are
// not checked: most change only rows, and may run where the directory is
// not mounted. On SQLite the database is inside the data directory:
// nothing to check.
func checkDataDir(ctx context.Context, repo *meta.Repo, dataDir string, readOnly bool) error {
	if readOnly || repo.Engine() != "postgres" {
		return nil
	}
	// The row before the file: the file is written before the row, so a
	// server that finds the row finds the file too (on the right
	// directory), even while another server is recording them.
	path := filepath.Join(dataDir, dataIDFile)
	want, err := repo.DataDirID(ctx)
	if err != nil {
		return err
	}
	if want == "" {
		// The first start on this database since it has had ids (servers
		// starting at once take turns here): the directory's id is recorded,
		// the file's if it has one (a crash between the file and the row),
		// else a new one, written first.
		want, err = repo.RecordDataDirID(ctx, func() (string, error) {
			if id, err := readDataID(path); err != nil || id != "" {
				return id, err
			}
			if err := claimable(ctx, repo, dataDir); err != nil {
				return "", err
			}
			var b [16]byte
			_, _ = rand.Read(b[:])
			if _, err := fsutil.CreateFileSynced(path, []byte(hex.EncodeToString(b[:])+"\n"), 0o640); err != nil {
				return "", fmt.Errorf("write the data directory's id: %w", err)
			}
			return readDataID(path)
		})
		if err != nil {
			return err
		}
	}
	have, err := readDataID(path)
	if err != nil {
		return err
	}
	switch {
	case have == want:
		return nil
	case have == "":
		return fmt.Errorf("the data directory %s has no %s file, but this PostgreSQL database's streams are in the data directory "+
			"whose id is %s: every weir server on one database must use the same data directory (a filesystem all of them mount), "+
			"or none could read the others' streams. Start this server on that directory (--data or data:). If that directory "+
			"was lost and this server is to go on with an empty one, write %s into %s",
			dataDir, dataIDFile, want, want, path)
	default:
		return fmt.Errorf("the data directory %s (id %s, in its %s file) is not the one whose files this PostgreSQL database's "+
			"rows name (id %s): every weir server on one database must use the same data directory (a filesystem all of them "+
			"mount), or none could read the others' streams. Start this server on that directory (--data or data:), or give it "+
			"a database of its own", dataDir, have, dataIDFile, want)
	}
}

// claimable refuses to give a database that holds streams (one upgraded
// from a version without data directory ids) a data directory without a
// store: a shared filesystem not mounted yet, or a mistyped --data, would
// otherwise claim it, and every node on the right directory be refused.
func claimable(ctx context.Context, repo *meta.Repo, dataDir string) error {
	has, err := repo.HasStreams(ctx)
	if err != nil || !has {
		return err
	}
	store := filepath.Join(dataDir, "store")
	if fi, err := os.Stat(store); err == nil && fi.IsDir() {
		return nil
	}
	return fmt.Errorf("this PostgreSQL database holds streams, but the data directory %s has no store (%s): it is not the "+
		"data directory they are in (a shared filesystem not mounted yet, or another --data). Start this server on that "+
		"directory (every weir server on one database must use the same one); if their files are lost and it is to go on "+
		"without them, create the directory %s", dataDir, store, store)
}

// readDataID reads the id in the data-id file at path, "" if there is none.
func readDataID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the data directory's id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool {
		return !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || r == '-')
	}) {
		return "", fmt.Errorf("%s does not hold a data directory id (up to 64 letters, digits and '-'): fix it", path)
	}
	return id, nil
}
