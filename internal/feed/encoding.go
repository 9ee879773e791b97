package feed

import (
	"fmt"
	"strings"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/htmlindex"
	"golang.org/x/text/encoding/ianaindex"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"
)

// EncodingNames says which names LookupEncoding accepts, for messages that
// refuse one.
const EncodingNames = "IANA character set names and aliases (https://www.iana.org/assignments/character-sets), " +
	"the WHATWG encoding labels (https://encoding.spec.whatwg.org/#names-and-labels) and UTF-32, UTF-32BE and " +
	"UTF-32LE; e.g. UTF-8, ISO-8859-1, windows-1252, UTF-16LE, Shift_JIS"

// LookupEncoding resolves a feed's encoding or context encoding name, as
// the data viewer decodes with it; feed writes check names with it too, so
// that a name a feed accepts is one the viewer knows. IANA names and
// aliases come first (ISO-8859-1 is Latin-1, as senders mean it), then the
// WHATWG names browsers use (utf8, cp1252), and UTF-32, which neither index
// decodes. "" is UTF-8, a new feed's default. name is the name to show:
// the canonical one for UTF-8 and UTF-32, else the name as given.
func LookupEncoding(encName string) (name string, enc encoding.Encoding, err error) {
	n := strings.TrimSpace(encName)
	switch strings.ToUpper(strings.ReplaceAll(n, "_", "-")) {
	case "", "UTF-8", "UTF8":
		return "UTF-8", unicode.UTF8, nil
	case "UTF-32", "UTF-32BE":
		return "UTF-32BE", utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM), nil
	case "UTF-32LE":
		return "UTF-32LE", utf32.UTF32(utf32.LittleEndian, utf32.IgnoreBOM), nil
	}
	enc, err = ianaindex.IANA.Encoding(n)
	if err != nil || enc == nil {
		// The IANA index names some charsets it cannot decode (nil, nil).
		enc, err = htmlindex.Get(n)
	}
	if err != nil || enc == nil {
		return "", nil, fmt.Errorf("%q is not a character encoding weir knows", encName)
	}
	return n, enc, nil
}
