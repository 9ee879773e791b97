package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/streamfile"
)

// TestSmoke posts one plain body and reads it back after a restart.
func TestSmoke(t *testing.T) {
	s := apptest.Start(t, nil)
	s.CreateFeed("TEST-FEED", "", "")
	req, _ := http.NewRequest("POST", s.URL+"/datafeed", strings.NewReader("SOME TEST DATA"))
	req.Header.Set("Feed", "TEST-FEED")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "_S_test-node\n") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	s = s.Restart()
	st := s.Streams()
	if len(st) != 1 || st[0].ReceiptID+"\n" != string(body) {
		t.Fatalf("streams %+v", st)
	}
	if got := s.Read(st[0].ID, streamfile.Data, 0); string(got) != "SOME TEST DATA" {
		t.Fatalf("data %q", got)
	}
}
