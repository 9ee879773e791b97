package app_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/meta"
)

// flipAt flips one bit of the file at off.
func flipAt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x08
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestAPIUnreadableStreams: a stream whose file is damaged (a bit flipped
// in its trailer, in a pack; a file cut short), missing (removed) or may
// not be read (permissions) is answered by every reader of the REST API
// (data, text and hex views, zip, an export) with an error that names the
// stream and says why in a few words, not a bare "internal error", and
// never a server path. The stream's metadata still shows, and a stream
// next to the damaged one in its pack reads as before.
func TestAPIUnreadableStreams(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, nil)
	s.CreateFeed("FEED-ROT", "", "")
	post(t, s, []byte("alpha packed\n"), "Feed", "FEED-ROT").ok(t)
	post(t, s, []byte("beta packed\n"), "Feed", "FEED-ROT").ok(t)
	rng := rand.New(rand.NewPCG(7, 9))
	big := func() []byte { // incompressible, above store.packMaxSize: a file of its own
		b := make([]byte, 600<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for range 3 {
		post(t, s, big(), "Feed", "FEED-ROT").ok(t)
	}
	ss := s.Streams()
	if len(ss) != 5 || ss[0].Pack == "" || ss[1].Pack != ss[0].Pack || ss[2].Pack != "" || ss[3].Pack != "" || ss[4].Pack != "" {
		t.Fatalf("streams %+v: want two in one pack, then three files of their own", ss)
	}
	packed, neighbour, missing, short, noperm := ss[0], ss[1], ss[2], ss[3], ss[4]
	st := s.App.Store()
	// The last byte of the packed stream's trailer: its checksum.
	flipAt(t, st.Path(packed), packed.PackOffset+packed.FileSize-9)
	if err := os.Remove(st.Path(missing)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(st.Path(short), 300<<10); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		st  meta.Stream
		why string
	}{{packed, "its stored data is damaged"}, {missing, "its stored file is missing"}, {short, "its stored data is damaged"}}
	if os.Geteuid() != 0 {
		if err := os.Chmod(st.Path(noperm), 0); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			st  meta.Stream
			why string
		}{noperm, "its stored file may not be read"})
	} else {
		t.Log("running as root, which reads a file whatever its mode: the permissions case is skipped")
	}

	viewer := user(t, s, "rotviewer", []string{access.DataView, access.DataExport}, map[string]access.Level{"FEED-ROT": access.View})
	for _, c := range cases {
		id := c.st.ID
		for _, path := range []string{"/data", "/data?part=1&offset=10", "/text", "/text?mode=hex", "/zip"} {
			r := viewer.do("GET", fmt.Sprintf("/streams/%d%s", id, path), "")
			body := string(r.body)
			if r.status != 500 || !strings.Contains(body, fmt.Sprintf("stream %d cannot be read: %s", id, c.why)) {
				t.Errorf("GET /streams/%d%s: %d %s; want 500 naming the stream and %q", id, path, r.status, body, c.why)
			}
			if strings.Contains(body, s.Cfg.Data) || strings.Contains(body, ".wpk") || strings.Contains(body, ".wst") {
				t.Errorf("GET /streams/%d%s names a server path: %s", id, path, body)
			}
		}
		viewer.do("GET", fmt.Sprintf("/streams/%d", id), "").want(t, "metadata of an unreadable stream", 200, nil)
		loc := accepted(t, viewer.do("POST", "/exports", fmt.Sprintf(`{"ids":[%d]}`, id)), "export")
		op := poll(t, viewer, loc)
		if want := fmt.Sprintf("stream %d: %s", id, c.why); op.State != "FAILED" || !strings.Contains(op.Error, want) {
			t.Errorf("export of stream %d: %s %q; want FAILED with %q", id, op.State, op.Error, want)
		}
	}
	if got := string(s.Read(neighbour.ID, 0, 0)); got != "beta packed\n" {
		t.Errorf("the damaged stream's neighbour in its pack reads %q", got)
	}
}
