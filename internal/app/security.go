package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/weirhq/weir/internal/access"
	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/auth/datafeedkey"
	"github.com/weirhq/weir/internal/auth/token"
	"github.com/weirhq/weir/internal/config"
	"github.com/weirhq/weir/internal/meta"
)

// security is everything that decides who a caller is.
type security struct {
	access *access.Service
	certs  *auth.Certificates
	tokens *token.Authenticator
	keys   *datafeedkey.Store
	chain  *auth.Chain
}

func (s *security) close() {
	if s.tokens != nil {
		s.tokens.Close()
	}
	if s.keys != nil {
		s.keys.Close()
	}
}

// newSecurity builds the sender authenticators and the API's access
// service from the configuration.
func newSecurity(ctx context.Context, cfg config.Config, repo *meta.Repo, log *slog.Logger) (*security, error) {
	r := cfg.Receive
	s := &security{access: access.New(repo, cfg.Security.APIKeys.MaxExpiry.D(), nil)}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	var err error
	if s.certs, err = auth.NewCertificates(auth.CertOptions{
		DNHeader: r.X509CertificateDnHeader, DNFormat: auth.DNFormat(strings.ToUpper(r.X509CertificateDnFormat)),
		AllowedProviders: r.AllowedCertificateProviders, Logger: log,
	}); err != nil {
		return nil, fmt.Errorf("receive.allowedCertificateProviders: %w", err)
	}
	if s.tokens, err = token.New(ctx, token.Options{OIDC: cfg.Security.OIDC, APIKeys: s.access, Logger: log}); err != nil {
		return nil, fmt.Errorf("security.oidc: %w", err)
	}
	dir := r.DataFeedIdentitiesDir
	if dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cfg.Data, dir)
		}
		// The data directory may be relative (the default is ./weir-data).
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("receive.dataFeedIdentitiesDir: %w", err)
		}
	}
	if s.keys, err = datafeedkey.Open(ctx, datafeedkey.Options{
		Dir: dir, OwnerHeader: r.DataFeedOwnerMetaKey, CacheTTL: r.DataFeedKeyCacheTTL.D(), Repo: repo, Logger: log,
	}); err != nil {
		return nil, fmt.Errorf("data feed keys: %w", err)
	}
	enabled := make([]auth.Type, 0, len(r.EnabledAuthenticationTypes))
	for _, name := range r.EnabledAuthenticationTypes {
		t, err := auth.ParseType(name)
		if err != nil {
			return nil, fmt.Errorf("receive.enabledAuthenticationTypes: %w", err)
		}
		enabled = append(enabled, t)
	}
	if s.chain, err = auth.NewChain(r.AuthenticationRequired, enabled, map[auth.Type]auth.Authenticator{
		auth.DataFeedKey:         s.keys.KeyAuthenticator(),
		auth.CertificateIdentity: s.keys.CertificateIdentityAuthenticator(s.certs.ClientDN),
		auth.Token:               s.tokens,
		auth.Certificate:         s.certs,
	}); err != nil {
		return nil, fmt.Errorf("receive: %w", err)
	}
	s.chain.SetOwnerHeader(r.DataFeedOwnerMetaKey)
	ok = true
	return s, nil
}

// bootstrap creates the first administrator on a database without users
// and says where its one-time API key is (never the key itself).
func (s *security) bootstrap(ctx context.Context, dataDir string, log *slog.Logger) error {
	path, created, err := s.access.Bootstrap(ctx, dataDir)
	if err != nil {
		return fmt.Errorf("bootstrap administrator: %w", err)
	}
	if created {
		log.Warn("created the administrator user \"admin\"; its API key is in a file readable only by this user: "+
			"read it, keep it somewhere safe and delete the file", "file", path)
	}
	return nil
}

// stampedVersion is the version the linker stamps into a release build:
//
//	go build -ldflags "-X github.com/weirhq/weir/internal/app.stampedVersion=v1.2.3" ./cmd/weir
//
// (`make build` stamps `git describe --always --dirty`). It is set nowhere
// else; empty when the build was not stamped.
var stampedVersion string

// Version is the running build's version: the stamped version, else the
// module version, else the VCS revision when built from a checkout, else
// "dev".
func Version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(stampedVersion, bi)
}

// versionOf applies Version's order of precedence. The stamp comes first
// because builds with -buildvcs=false (or from a source tarball) carry no
// revision, and every one of them would otherwise say "dev".
func versionOf(stamped string, bi *debug.BuildInfo) string {
	if v := strings.TrimSpace(stamped); v != "" {
		return v
	}
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev-" + s.Value[:12]
		}
	}
	return "dev"
}
