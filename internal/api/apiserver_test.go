package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/api"
	"github.com/weirhq/weir/internal/app"
	"github.com/weirhq/weir/internal/app/apptest"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/auth/datafeedkey"
	"github.com/weirhq/weir/internal/auth/token"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
	"github.com/weirhq/weir/internal/receipt"
	"github.com/weirhq/weir/internal/receive"
)

// testAPI is the real API handler (and the datafeed beside it, to store
// streams), built as app.New builds them (see TestRoutesDocumented), with
// the datafeed's sender authentication as the configuration says (as
// app's newSecurity builds it, without OIDC), served by an httptest
// server, with an Administrator's API key.
type testAPI struct {
	t   *testing.T
	URL string // the server's root: URL+"/api/..." and URL+"/datafeed"
	Key string // an Administrator's API key
}

func newTestAPI(t *testing.T, mutate func(*config.Config)) *testAPI {
	t.Helper()
	cfg := apptest.Config(t)
	if mutate != nil {
		mutate(&cfg)
	}
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	st, err := app.OpenStorage(ctx, cfg, cfg.Node, log, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ids, err := receipt.NewGenerator(receipt.OriginService, cfg.Node, nil)
	if err != nil {
		t.Fatal(err)
	}
	acc := access.New(st.Repo, 0, nil)
	chain := senderChain(t, cfg, st.Repo, acc)
	mux := http.NewServeMux()
	h := receive.New(receive.Options{Config: cfg.Receive, Feeds: st.Repo, Store: st.Store, IDs: ids, Auth: chain})
	h.Register(mux)
	srv, err := api.Register(mux, api.Deps{Repo: st.Repo, Store: st.Store, Access: acc,
		FeedNames: cfg.FeedNameRegexp(), Log: log, Version: app.Version(), Node: cfg.Node, DataDir: cfg.Data, Config: cfg,
		Receiver: h, Ready: http.NotFoundHandler(), Metrics: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	if _, err := acc.CreateUser(ctx, "tester", "Tester", false); err != nil {
		t.Fatal(err)
	}
	if err := acc.GrantApp(ctx, "tester", access.Administrator); err != nil {
		t.Fatal(err)
	}
	key, _, err := acc.CreateAPIKey(ctx, access.NewKey{Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	return &testAPI{t: t, URL: hs.URL, Key: key}
}

// senderChain is the datafeed's authentication, as app's newSecurity
// builds it (no OIDC issuer: tokens are API keys).
func senderChain(t *testing.T, cfg config.Config, repo *meta.Repo, acc *access.Service) *auth.Chain {
	t.Helper()
	r := cfg.Receive
	certs, err := auth.NewCertificates(auth.CertOptions{DNHeader: r.X509CertificateDnHeader,
		DNFormat: auth.DNFormat(strings.ToUpper(r.X509CertificateDnFormat)), AllowedProviders: r.AllowedCertificateProviders})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := token.New(context.Background(), token.Options{APIKeys: acc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tokens.Close)
	keys, err := datafeedkey.Open(context.Background(), datafeedkey.Options{OwnerHeader: r.DataFeedOwnerMetaKey, Repo: repo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keys.Close)
	var enabled []auth.Type
	for _, name := range r.EnabledAuthenticationTypes {
		typ, err := auth.ParseType(name)
		if err != nil {
			t.Fatal(err)
		}
		enabled = append(enabled, typ)
	}
	chain, err := auth.NewChain(r.AuthenticationRequired, enabled, map[auth.Type]auth.Authenticator{
		auth.DataFeedKey:         keys.KeyAuthenticator(),
		auth.CertificateIdentity: keys.CertificateIdentityAuthenticator(certs.ClientDN),
		auth.Token:               tokens,
		auth.Certificate:         certs,
	})
	if err != nil {
		t.Fatal(err)
	}
	chain.SetOwnerHeader(r.DataFeedOwnerMetaKey)
	return chain
}

// do sends a request with the given headers (name, value, ...) and
// returns the answer with its body read.
func (a *testAPI) do(method, path, body string, headers ...string) (*http.Response, string) {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.URL+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp, string(b)
}

// call is do with the Administrator's key.
func (a *testAPI) call(method, path, body string, headers ...string) (*http.Response, string) {
	a.t.Helper()
	return a.do(method, path, body, append([]string{"Authorization", "Bearer " + a.Key}, headers...)...)
}
