package app

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/weirhq/weir/internal/auth"
	"github.com/weirhq/weir/internal/config"
)

// serverTLS builds the HTTPS configuration, or nil for plain HTTP. Client
// certificates are only ever accepted when verified against the configured
// CAs: without tls.clientCAFile no client certificate is requested at all.
func serverTLS(c config.TLS) (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	if err := auth.CheckSecretFile(c.KeyFile); err != nil {
		return nil, fmt.Errorf("tls.keyFile: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile == "" || c.ClientAuth == "none" {
		return tc, nil
	}
	pem, err := os.ReadFile(c.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tls.clientCAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls.clientCAFile %s: no PEM certificates in it", c.ClientCAFile)
	}
	tc.ClientCAs = pool
	tc.ClientAuth = tls.VerifyClientCertIfGiven
	if c.ClientAuth == "require" {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
