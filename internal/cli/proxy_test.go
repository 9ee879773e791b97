package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProxyReplayDestinations: `weir proxy replay` refuses a destination
// that is neither configured nor holds anything in the repository (a
// mistyped name), and replays nothing, successfully, for a configured
// destination whose queue is empty (as a replay run by cron finds it).
func TestProxyReplayDestinations(t *testing.T) {
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(cfg, []byte("forwardHttpDestinations:\n  - name: main\n    forwardUrl: http://127.0.0.1:9/datafeed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(dest string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Main([]string{"proxy", "replay", "--config", cfg, "--data", data, "--destination", dest, "--all"}, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := run("main"); code != 0 || out != "0 failed item(s) of main queued again\n" {
		t.Errorf("a configured destination with an empty queue: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := run("mian"); code == 0 || !strings.Contains(errOut, `no items for destination "mian"`) {
		t.Errorf("a mistyped destination: exit %d, %q, %q", code, out, errOut)
	}
}
