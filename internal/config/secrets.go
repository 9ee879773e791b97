package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/weirhq/weir/internal/auth"
)

// inlineSecrets names the options of c that hold a secret in the file
// itself: a password in the db URL, or the passphrase of its client key
// (sslpassword, which the PostgreSQL driver takes as a URL parameter).
func (c *Config) inlineSecrets() []string {
	u, err := url.Parse(c.DB)
	if err != nil || c.DB == "" {
		return nil
	}
	var s []string
	if _, ok := u.User.Password(); ok || u.Query().Has("password") {
		s = append(s, "db (its password)")
	}
	if u.Query().Has("sslpassword") {
		s = append(s, "db (its sslpassword)")
	}
	return s
}

// inlineSecrets names the options of p that hold a secret in the file
// itself: inline keys for a downstream and the feed status check, and the
// serve options' secrets.
func (p *Proxy) inlineSecrets() []string {
	s := p.Config.inlineSecrets()
	for i, h := range p.ForwardHTTPDestinations {
		if h.APIKey != "" {
			s = append(s, fmt.Sprintf("forwardHttpDestinations[%d].apiKey", i))
		}
		if h.DataFeedKey != "" {
			s = append(s, fmt.Sprintf("forwardHttpDestinations[%d].dataFeedKey", i))
		}
	}
	if p.FeedStatus.APIKey != "" {
		s = append(s, "feedStatus.apiKey")
	}
	return s
}

// checkInlineSecrets refuses a configuration file that every user can read
// when it holds secrets: the specification forbids keys in world-readable
// configuration files, and a key that every user could read must be
// assumed leaked, so weir will not start with it (as with a world-readable
// apiKeyFile).
func checkInlineSecrets(path string, secrets []string) error {
	if len(secrets) == 0 {
		return nil
	}
	if err := auth.CheckSecretFile(path); err != nil {
		return fmt.Errorf("config %s: %s set in the file itself: %w; "+
			"or move the secret to a file of its own that only weir can read (apiKeyFile, dataFeedKeyFile)",
			path, strings.Join(secrets, ", "), err)
	}
	return nil
}
