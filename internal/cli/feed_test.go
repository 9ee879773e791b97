package cli

import (
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/meta"
)

// TestFeedCLI: feed create and update refuse an encoding the data viewer
// would not know (only when the flag is given), and feed create, an
// administrator's tool, may take a name that an earlier feed's streams
// still carry, saying so.
func TestFeedCLI(t *testing.T) {
	onEngines(t, testFeedCLI)
}

func testFeedCLI(t *testing.T, e *accessEnv, repo *meta.Repo) {
	ctx := t.Context()
	e.fail(1, []string{"feed", "create", "ENC-FEED", "--encoding", "NOPE-ENC"}, "--encoding", `"NOPE-ENC" is not a character encoding weir knows`, "IANA")
	e.fail(1, []string{"feed", "create", "ENC-FEED", "--context-encoding", "NOPE-ENC"}, "--context-encoding", "NOPE-ENC")
	if _, err := repo.GetFeed(ctx, "ENC-FEED"); err == nil {
		t.Fatal("a refused feed create created the feed")
	}
	e.ok("feed", "create", "ENC-FEED", "--encoding", "windows-1252", "--context-encoding", "utf_32le")
	e.fail(1, []string{"feed", "update", "ENC-FEED", "--encoding", "NOT-REAL"}, "--encoding", "NOT-REAL")
	// A name stored before the check (or by the database's hand) does not
	// stop an update of another field.
	f, _ := repo.GetFeed(ctx, "ENC-FEED")
	f.ContextEncoding = "LEGACY-NONSENSE"
	if err := repo.UpdateFeed(ctx, f); err != nil {
		t.Fatal(err)
	}
	e.ok("feed", "update", "ENC-FEED", "--description", "still editable")
	if f, _ := repo.GetFeed(ctx, "ENC-FEED"); f.Encoding != "windows-1252" || f.Description != "still editable" {
		t.Fatalf("after updates: %+v", f)
	}

	// A name whose earlier feed left streams: created, with a note.
	e.ok("feed", "create", "OLD-FEED")
	st := &meta.Stream{Feed: "OLD-FEED", Type: "Raw Events", Node: "n", ReceiptID: "r"}
	if err := repo.Apply(ctx, &meta.Batch{Create: []*meta.Stream{st}}); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.DeleteFeed(ctx, "OLD-FEED", true); err != nil {
		t.Fatal(err)
	}
	r := e.run("feed", "create", "OLD-FEED")
	if r.code != 0 || !strings.Contains(r.stdout, "created feed OLD-FEED") ||
		!strings.Contains(r.stderr, "streams of an earlier feed named OLD-FEED exist") {
		t.Fatalf("feed create over earlier streams: %+v", r)
	}
	if r := e.run("feed", "create", "NEW-FEED"); r.code != 0 || r.stderr != "" {
		t.Fatalf("feed create of a new name: %+v", r)
	}
}
