package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProxyRefusesInlineKeyInWorldReadableConfig: `weir proxy` with an
// inline apiKey in a config file that every user can read does not start,
// and says which option and which file; the same file made private starts.
func TestProxyRefusesInlineKeyInWorldReadableConfig(t *testing.T) {
	if os.Getenv("WEIR_TEST_DB") == "postgres" {
		t.Skip("start-up only; it runs in the SQLite pass")
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`listen: 127.0.0.1:%d
forwardHttpDestinations:
  - name: main
    forwardUrl: http://127.0.0.1:%d/datafeed
    apiKey: sak_0000000000_inline
`, freePort(t), freePort(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(config, 0o644); err != nil {
		t.Fatal(err)
	}
	res := runWithin(t, 30*time.Second, "proxy", "--config", config, "--data", filepath.Join(dir, "data"))
	if res.code != 1 {
		t.Fatalf("want exit 1; %s", res)
	}
	for _, want := range []string{"forwardHttpDestinations[0].apiKey", config, "readable by every user", "chmod o-rwx"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr does not name %q: %s", want, res)
		}
	}
	if strings.Contains(res.stderr, "sak_0000000000_inline") {
		t.Errorf("stderr shows the key: %s", res)
	}

	if err := os.Chmod(config, 0o600); err != nil {
		t.Fatal(err)
	}
	startIn(t, dir, "proxy", "--config", config, "--data", filepath.Join(dir, "data"))
}
