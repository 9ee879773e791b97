package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/meta/metatest"
)

// TestNodeNameInUseOnPostgres: a second server with the same node name on
// the same PostgreSQL database, but a data directory of its own (so the
// data directory's lock cannot see it), is refused at start. It used to
// start, and its crash recovery deleted the first server's posts in flight
// (LOCKED rows), failing them, and the two gave the same receipt ids.
// Another node name starts beside it, and the name is free again once the
// first server stops.
func TestNodeNameInUseOnPostgres(t *testing.T) {
	cfg := apptest.Config(t)
	if cfg.DB == "" {
		cfg.DB = metatest.PostgresDSN(t) // skips without WEIR_TEST_POSTGRES_DSN
	}
	first := apptest.StartConfig(t, cfg)
	first.CreateFeed("NODE-FEED", "", "")

	second := cfg
	second.Data = t.TempDir()
	log := slog.New(slog.DiscardHandler)
	if a, err := app.New(context.Background(), second, log); err == nil {
		_ = a.Shutdown(0)
		t.Fatal("a second server as node test-node on the same database started")
	} else if !strings.Contains(err.Error(), `node "test-node" is in use by another weir server`) ||
		!strings.Contains(err.Error(), "--node") {
		t.Fatalf("second server as the same node: %v", err)
	}

	other := second
	other.Node = "other-node"
	apptest.StartConfig(t, other).Stop()

	// The first server is unharmed.
	req, _ := http.NewRequest("POST", first.URL+"/datafeed", strings.NewReader("still here\n"))
	req.Header.Set("Feed", "NODE-FEED")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "_S_test-node\n") {
		t.Fatalf("post to the first server: %d %q", resp.StatusCode, body)
	}

	first.Stop()
	apptest.StartConfig(t, second).Stop()
}
