package app_test

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/config"
)

// rawAt sends a request with this exact target (not cleaned by a client)
// on a new connection, as curl --path-as-is or a sender that joins its
// base URL and the path with a doubled slash does.
func rawAt(t *testing.T, s *apptest.Server, method, target, body string, lines ...string) *resp {
	t.Helper()
	return rawRequest(t, s, head(s, method+" "+target+" HTTP/1.1",
		append(lines, "Content-Length: "+itoa(len(body)), "Connection: close")...), []byte(body))
}

// servedAsPost asserts that r is a 200 for a post stored exactly once, as
// a post to the clean path is: the body, the receipt, and the receive log
// line (received, with the clean path).
func servedAsPost(t *testing.T, s *apptest.Server, what string, r *resp, body, logPath string) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Errorf("%s: %d Service-Status %q Service-Error %q Location %q, want 200",
			what, r.code, r.header.Get("Service-Status"), r.header.Get("Service-Error"), r.header.Get("Location"))
		return
	}
	id := r.ok(t)
	if got := string(s.Read(streamByReceipt(t, s, id).ID, 0, 0)); got != body {
		t.Errorf("%s: stored %q, want %q", what, got, body)
	}
	l := receiveLog(t, s, "receiptId", id)
	if l.str("outcome") != "received" || l.str("path") != logPath || l.str("feed") != testFeed {
		t.Errorf("%s: receive log outcome %q path %q feed %q, want received %s %s",
			what, l.str("outcome"), l.str("path"), l.str("feed"), logPath, testFeed)
	}
}

// TestDatafeedUncleanPath: a post to a datafeed path that is not clean (a
// doubled slash, a . or .. segment) got http.ServeMux's 307 to the clean
// path, without Service-Status; senders of this protocol do not follow a
// redirect of a post, and a base URL ending in "/" (http://host:8080/ +
// /datafeed) is a common configuration slip. Such a post is now served as
// the clean path, on every datafeed path and below a base path, and no
// cleaning lets a request out of the base path. Paths that are not the
// datafeed once cleaned keep their answers.
func TestDatafeedUncleanPath(t *testing.T) {
	t.Parallel()
	t.Run("root", func(t *testing.T) {
		t.Parallel()
		s := start(t, nil)
		for target, logPath := range map[string]string{
			"//datafeed":                      "/datafeed",
			"///datafeed":                     "/datafeed",
			"/./datafeed":                     "/datafeed",
			"/x/../datafeed":                  "/datafeed",
			"/datafeed/../datafeed":           "/datafeed",
			"//datafeed?Component=q":          "/datafeed",
			"//data%66eed":                    "/datafeed",
			"/datafeed//x":                    "/datafeed/x",
			"//datafeed/":                     "/datafeed/",
			"//stroom/datafeed":               "/stroom/datafeed",
			"/stroom//datafeed":               "/stroom/datafeed",
			"/stroom/noauth//datafeed":        "/stroom/noauth/datafeed",
			"/stroom/./noauth/datafeed/x/../": "/stroom/noauth/datafeed/",
		} {
			body := "unclean " + target + "\n"
			servedAsPost(t, s, target, rawAt(t, s, "POST", target, body, "Feed: "+testFeed), body, logPath)
		}
		// PUT is served as on the clean path; other methods get the
		// datafeed's 405 with Service-Status, not a redirect.
		servedAsPost(t, s, "PUT //datafeed", rawAt(t, s, "PUT", "//datafeed", "put\n", "Feed: "+testFeed), "put\n", "/datafeed")
		r := rawAt(t, s, "GET", "//datafeed", "")
		r.fails(t, 405, 405)
		if a := r.header.Get("Allow"); a != "POST, PUT" {
			t.Errorf("GET //datafeed: Allow %q", a)
		}
		// A failure on an unclean path has the status headers as on the
		// clean one.
		if r := rawAt(t, s, "POST", "//datafeed", "x\n", "Feed: NO-SUCH-FEED"); r.code/100 != 4 || r.header.Get("Service-Status") == "" {
			t.Errorf("POST //datafeed to an unknown feed: %d Service-Status %q, want a 4xx with it", r.code, r.header.Get("Service-Status"))
		}

		// Not the datafeed once cleaned: as before the fix. /DATAFEED and
		// /datafeed%2Fx are the mux's plain 404 (no Service-Status: they
		// are not the datafeed), as they were.
		for target, want := range map[string]int{
			"/DATAFEED":      404,
			"/datafeed%2Fx":  404,
			"//DATAFEED":     307, // the mux's redirect to /DATAFEED, a 404
			"//datafeed%2Fx": 307,
			"//healthz":      307,
			"//api/whoami":   307,
		} {
			r := rawAt(t, s, "POST", target, "x\n", "Feed: "+testFeed)
			if r.code != want {
				t.Errorf("POST %s: %d, want %d", target, r.code, want)
			}
			if want == 404 && (r.body != "404 page not found\n" || r.header.Get("Service-Status") != "") {
				t.Errorf("POST %s: body %q Service-Status %q, want the mux's 404 as before", target, r.body, r.header.Get("Service-Status"))
			}
		}
		if r := rawAt(t, s, "GET", "/x/../healthz", ""); r.code != 307 || r.header.Get("Location") != "/healthz" {
			t.Errorf("GET /x/../healthz: %d Location %q, want the mux's 307 to /healthz", r.code, r.header.Get("Location"))
		}
	})

	t.Run("basePath", func(t *testing.T) {
		t.Parallel()
		s := start(t, func(c *config.Config) { c.BasePath = "/weir" })
		for target, logPath := range map[string]string{
			"//weir/datafeed":                "/datafeed",
			"/weir//datafeed":                "/datafeed",
			"/weir/./datafeed":               "/datafeed",
			"/x/../weir/datafeed":            "/datafeed",
			"/weir/../weir/datafeed":         "/datafeed",
			"/weir//stroom/datafeed":         "/stroom/datafeed",
			"//weir//stroom/noauth/datafeed": "/stroom/noauth/datafeed",
		} {
			body := "unclean " + target + "\n"
			servedAsPost(t, s, target, rawAt(t, s, "POST", target, body, "Feed: "+testFeed), body, logPath)
		}
		// Cleaning never takes a request out of the base path.
		for _, target := range []string{"//datafeed", "/weir/../datafeed", "/weir/x/../../datafeed",
			"/weir/..//datafeed", "/weirx/../datafeed", "//weirdatafeed", "/./datafeed"} {
			r := rawAt(t, s, "POST", target, "escaped\n", "Feed: "+testFeed)
			if r.code == http.StatusOK {
				t.Errorf("POST %s under base path /weir: 200 %q, want no datafeed", target, r.body)
			}
		}
		for _, st := range s.Streams() {
			if got := string(s.Read(st.ID, 0, 0)); got == "escaped\n" {
				t.Errorf("a post outside the base path was stored")
			}
		}
	})

	t.Run("TLS", func(t *testing.T) {
		t.Parallel()
		p := newPKI(t)
		cfg := apptest.Config(t)
		cfg.TLS = config.TLS{CertFile: p.certFile, KeyFile: p.keyFile, ClientAuth: "none"}
		s := apptest.StartConfig(t, cfg)
		s.CreateFeed(testFeed, "", "")
		c := httpsClientConfig(t, &tls.Config{RootCAs: p.ca.pool})
		// As a sender: a redirect of a post is not followed.
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		// A base URL ending in "/" joined with "/datafeed".
		req, err := http.NewRequest(http.MethodPost, "https://"+s.App.Addr()+"/"+"/datafeed", strings.NewReader("over tls\n"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Feed", testFeed)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(res.Body)
		res.Body.Close()
		servedAsPost(t, s, "TLS //datafeed", &resp{code: res.StatusCode, header: res.Header, body: b.String()}, "over tls\n", "/datafeed")
	})

	t.Run("proxy", func(t *testing.T) {
		t.Parallel()
		eachProxyMode(t, "proxy-unclean", func(t *testing.T, main, px *apptest.Server) {
			r := rawAt(t, px, "POST", "//datafeed", "via proxy\n", "Feed: "+testFeed)
			if r.code != http.StatusOK {
				t.Fatalf("proxy POST //datafeed: %d Service-Status %q Location %q", r.code, r.header.Get("Service-Status"), r.header.Get("Location"))
			}
			if l := receiveLogs(t, px); len(l) != 1 || l[0].str("path") != "/datafeed" || l[0].str("outcome") != "received" {
				t.Errorf("proxy receive log: %v, want one line, received, path /datafeed", l)
			}
			waitForBody(t, main, "via proxy\n")
		})
	})
}
