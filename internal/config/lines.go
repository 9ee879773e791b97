package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// AtLines names, in front of each line of a validation error that is about
// an option the file at path sets (receive.retryAfter: ..., or
// trustedForwarders[1]: ...), the file and the line of that option:
// "weir.yaml:7: receive.retryAfter: ...". Options in overridden were set
// by flags, not by the file, and are left as they are. With no file, or
// one that cannot be read again, err is returned unchanged.
func AtLines(path string, err error, overridden ...string) error {
	if err == nil || path == "" {
		return err
	}
	b, rerr := os.ReadFile(path)
	if rerr != nil {
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil {
		return err
	}
	lines := map[string]int{}
	keyLines(&doc, "", lines)
	for _, o := range overridden {
		delete(lines, o)
	}
	msgs := strings.Split(err.Error(), "\n")
	for i, m := range msgs {
		end := strings.IndexAny(m, ":[")
		if end <= 0 {
			continue
		}
		if n, ok := lines[m[:end]]; ok {
			msgs[i] = fmt.Sprintf("%s:%d: %s", path, n, m)
		}
	}
	return errors.New(strings.Join(msgs, "\n"))
}

// keyLines records the line of every mapping key under n by its dotted
// path (receive.retryAfter).
func keyLines(n *yaml.Node, prefix string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			keyLines(c, prefix, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if prefix != "" {
				key = prefix + "." + key
			}
			lines[key] = n.Content[i].Line
			keyLines(n.Content[i+1], key, lines)
		}
	}
}
