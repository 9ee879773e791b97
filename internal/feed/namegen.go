package feed

import (
	"strings"
	"unicode"

	"github.com/weirhq/weir/internal/attr"
)

// GenerateName expands template placeholders ${name} looked up
// case-insensitively in attrs (the name is trimmed; nil attrs has no values).
// Substituted values: trimmed, upper-cased, every char outside [A-Za-z0-9_]
// -> '_'. Literal text: upper-cased, every char outside [A-Za-z0-9_-] -> '_'.
// Unknown params -> "". A "${" without a closing "}" is literal text.
//
// Values lose '-' but literal text keeps it, so a template such as
// ${AccountId}-${Component} keeps its separators while a value cannot
// invent new ones. Characters are runes: "é" becomes one '_'.
func GenerateName(template string, attrs *attr.Map) string {
	var b strings.Builder
	b.Grow(len(template) + 16)
	for template != "" {
		open := strings.Index(template, "${")
		if open < 0 {
			break
		}
		end := strings.IndexByte(template[open+2:], '}')
		if end < 0 {
			break
		}
		appendNameText(&b, template[:open], true)
		appendNameText(&b, attrs.Value(strings.TrimSpace(template[open+2:open+2+end])), false)
		template = template[open+2+end+1:]
	}
	appendNameText(&b, template, true)
	return b.String()
}

// appendNameText writes s upper-cased with every rune outside
// [A-Z0-9_] (plus '-' when literal) as '_'. Upper-casing comes first, as in
// the reference system, so e.g. 'ſ' (long s) upper-cases to 'S' and is kept;
// each invalid UTF-8 byte becomes one '_'.
func appendNameText(b *strings.Builder, s string, literal bool) {
	if !literal {
		s = strings.TrimSpace(s)
	}
	for _, r := range s {
		r = unicode.ToUpper(r)
		switch {
		case 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', literal && r == '-':
			b.WriteByte(byte(r))
		default:
			b.WriteByte('_')
		}
	}
}

// MissingMandatory returns the first of names whose value in attrs is blank
// (absent, empty or only spaces), and true; else "", false. Blank entries in
// names are skipped, since a configured list may carry them.
func MissingMandatory(names []string, attrs *attr.Map) (string, bool) {
	for _, name := range names {
		if strings.TrimSpace(name) == "" {
			continue
		}
		if strings.TrimSpace(attrs.Value(name)) == "" {
			return name, true
		}
	}
	return "", false
}
