package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminNotesNewDatabase: an admin command pointed at a data directory
// that holds no database (a mistyped --data) still works, so that feeds
// and keys can be provisioned before the first start, but says that it
// created a new, empty database and where; with the database there it
// says nothing of the kind.
func TestAdminNotesNewDatabase(t *testing.T) {
	data := filepath.Join(t.TempDir(), "weir-dta")
	e := &accessEnv{t: t, data: data}
	r := e.run("feed", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "no weir database at "+filepath.Join(data, "weir.db")) ||
		!strings.Contains(r.stderr, "--data") {
		t.Fatalf("feed list on a data directory without a database: %+v", r)
	}
	r = e.run("feed", "create", "NEW-FEED")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("feed create on the database made before: %+v", r)
	}
}
