package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
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

// checkInlineSecrets refuses a configuration file that holds secrets when
// every user can read it or it lies in a version control working tree: the
// specification forbids keys in both. A key that every user could read
// must be assumed leaked, so weir will not start with it (as with a
// world-readable apiKeyFile); a file in a working tree is one commit from
// being published. (weir cannot tell a file the repository ignores from
// one it tracks without running its tool; either way the key sits where
// it is easily committed.)
func checkInlineSecrets(path string, secrets []string) error {
	if len(secrets) == 0 {
		return nil
	}
	if err := auth.CheckSecretFile(path); err != nil {
		return fmt.Errorf("config %s: %s set in the file itself: %w; "+
			"or move the secret to a file of its own that only weir can read (apiKeyFile, dataFeedKeyFile)",
			path, strings.Join(secrets, ", "), err)
	}
	if root := vcsRoot(path); root != "" {
		return fmt.Errorf("config %s: %s set in the file itself, and the file is in a version control working tree (%s): "+
			"keys must not be kept where they can be committed; move the secret to a file of its own outside it, "+
			"that only weir can read (apiKeyFile, dataFeedKeyFile; for db, a password file such as ~/.pgpass or PGPASSFILE)",
			path, strings.Join(secrets, ", "), root)
	}
	return nil
}

// vcsRoot returns the version control metadata (.git, .hg, .svn) of the
// working tree that holds the file at path, "" if none does.
func vcsRoot(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	for dir := filepath.Dir(abs); ; {
		for _, m := range []string{".git", ".hg", ".svn"} {
			if _, err := os.Lstat(filepath.Join(dir, m)); err == nil {
				return filepath.Join(dir, m)
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
