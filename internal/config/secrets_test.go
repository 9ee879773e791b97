package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInlineSecretsInWorldReadableFile: a config file that every user can
// read is refused when it holds a secret itself (the specification forbids
// keys in world-readable configuration files), with the option and the file
// named; the same file readable only by its owner (and group) loads, and a
// world-readable file without secrets loads.
func TestInlineSecretsInWorldReadableFile(t *testing.T) {
	const dest = "forwardHttpDestinations:\n  - forwardUrl: http://127.0.0.1:8080/datafeed\n"
	cases := []struct {
		name, body, option string
		proxy              bool
	}{
		{"apiKey", dest + "    apiKey: sak_inline\n", "forwardHttpDestinations[0].apiKey", true},
		{"dataFeedKey", dest + "    dataFeedKey: sdk_inline\n    dataFeedKeyOwner: \"1000\"\n",
			"forwardHttpDestinations[0].dataFeedKey", true},
		{"feedStatus.apiKey", dest + "feedStatus:\n  apiKey: sak_inline\n", "feedStatus.apiKey", true},
		{"proxy db password", dest + "db: postgres://weir:hunter2@db:5432/weir\n", "db (its password)", true},
		{"serve db password", "db: postgres://weir:hunter2@db:5432/weir\n", "db (its password)", false},
		{"serve db password parameter", "db: postgres://weir@db:5432/weir?password=hunter2\n", "db (its password)", false},
		{"serve db client key passphrase", "db: postgres://weir@db:5432/weir?sslmode=verify-full&sslcert=/etc/weir/db.crt&sslkey=/etc/weir/db.key&sslpassword=hunter2\n",
			"db (its sslpassword)", false},
	}
	load := func(proxy bool, path string) error {
		if proxy {
			_, err := LoadProxy(path)
			return err
		}
		_, err := Load(path)
		return err
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := write(t, c.body)
			for _, mode := range []os.FileMode{0o600, 0o640} {
				if err := os.Chmod(path, mode); err != nil {
					t.Fatal(err)
				}
				if err := load(c.proxy, path); err != nil {
					t.Errorf("mode %04o: %v; want it loaded", mode, err)
				}
			}
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			err := load(c.proxy, path)
			if err == nil {
				t.Fatal("mode 0644: loaded; want it refused")
			}
			for _, want := range []string{path, c.option, "readable by every user", "chmod o-rwx"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
		})
	}
	t.Run("no secrets", func(t *testing.T) {
		for _, c := range []struct {
			body  string
			proxy bool
		}{
			{dest + "    apiKeyFile: /etc/weir/key\n", true},
			{"db: postgres://weir@db:5432/weir\n", false},
			{"node: n1\n", false},
		} {
			path := write(t, c.body)
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := load(c.proxy, path); err != nil {
				t.Errorf("%q in a 0644 file: %v; want it loaded (no secret in it)", c.body, err)
			}
		}
	})
}

// TestInlineSecretsInWorkingTree: a config file holding a secret is refused
// when it lies anywhere in a version control working tree (.git, .hg or
// .svn in its directory or one above), naming the file, the option and the
// tree; the same file outside loads, and a file without secrets loads in a
// working tree.
func TestInlineSecretsInWorkingTree(t *testing.T) {
	for _, vcs := range []string{".git", ".hg", ".svn"} {
		t.Run(vcs, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, vcs), 0o700); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, "deploy", "weir")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "weir.yaml")
			if err := os.WriteFile(path, []byte("db: postgres://weir:hunter2@db:5432/weir\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil {
				t.Fatal("a secret in a working tree loaded; want it refused")
			}
			for _, want := range []string{path, "db (its password)", filepath.Join(root, vcs), "version control working tree", "PGPASSFILE"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if err := os.WriteFile(path, []byte("db: postgres://weir@db:5432/weir\nnode: n1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(path); err != nil {
				t.Errorf("no secret, in a working tree: %v", err)
			}
		})
	}
	// A .git file (a worktree or submodule) counts too.
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, ".git"), []byte("gitdir: /elsewhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "weir.yaml")
	if err := os.WriteFile(path, []byte("db: postgres://weir:hunter2@db:5432/weir\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "working tree") {
		t.Errorf("a secret beside a .git file: %v", err)
	}
}
