package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"
	"golang.org/x/text/transform"

	"github.com/weirhq/weir/internal/feed"
)

// This file is the data viewer's text side: charsets, byte-order marks,
// telling text from data that is not text, decoding a character range and
// the hex dump. It works on a part's bytes through io.ReaderAt, so only the
// blocks a range needs are read.

// sniffBytes is how much of the start of a part decides whether it is text.
const sniffBytes = 8 << 10

// charset is a resolved character encoding.
type charset struct {
	name string
	enc  encoding.Encoding
	// width is the fixed number of bytes per character (1 for single-byte
	// charsets, 4 for UTF-32), or 0 when it varies: a character offset can
	// then only be found by decoding from the start.
	width int64
}

// lookupCharset resolves a feed's encoding name with feed.LookupEncoding,
// the lookup feed writes are checked with, so that the viewer knows every
// name a feed accepts.
func lookupCharset(name string) (charset, error) {
	n, enc, err := feed.LookupEncoding(name)
	if err != nil {
		return charset{}, err
	}
	cs := charset{name: n, enc: enc}
	switch {
	case n == "UTF-32BE" || n == "UTF-32LE":
		cs.width = 4
	default:
		if _, ok := enc.(*charmap.Charmap); ok {
			cs.width = 1
		}
	}
	return cs, nil
}

// detectBOM finds a byte-order mark at the start of b. UTF-32LE is tested
// before UTF-16LE, whose mark is its prefix.
func detectBOM(b []byte) (cs charset, n int, ok bool) {
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE, 0, 0}):
		return charset{name: "UTF-32LE", enc: utf32.UTF32(utf32.LittleEndian, utf32.IgnoreBOM), width: 4}, 4, true
	case bytes.HasPrefix(b, []byte{0, 0, 0xFE, 0xFF}):
		return charset{name: "UTF-32BE", enc: utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM), width: 4}, 4, true
	case bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}):
		return charset{name: "UTF-8", enc: unicode.UTF8}, 3, true
	case bytes.HasPrefix(b, []byte{0xFE, 0xFF}):
		return charset{name: "UTF-16BE", enc: unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM)}, 2, true
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE}):
		return charset{name: "UTF-16LE", enc: unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM)}, 2, true
	}
	return charset{}, 0, false
}

// compressedMagic names the compressed format b starts with, and its magic
// bytes as hex, or "" when it starts like none.
func compressedMagic(b []byte) (format, magic string) {
	switch {
	case len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b:
		return "gzip", "1f 8b"
	case len(b) >= 4 && b[0] == 'P' && b[1] == 'K' && (b[2] == 3 && b[3] == 4 || b[2] == 5 && b[3] == 6 || b[2] == 7 && b[3] == 8):
		return "zip", fmt.Sprintf("50 4b %02x %02x", b[2], b[3])
	case bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd", "28 b5 2f fd"
	case bytes.HasPrefix(b, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "xz", "fd 37 7a 58 5a 00"
	case len(b) >= 4 && b[0] == 'B' && b[1] == 'Z' && b[2] == 'h' && b[3] >= '1' && b[3] <= '9':
		return "bzip2", "42 5a 68"
	}
	return "", ""
}

const cannotShow = "The data cannot be displayed as text: "
const showHex = " View it with mode=hex, or download it raw."

// nonTextReason decides whether a part is text from its first bytes
// (head, the whole part when atEOF) and says why not, or returns "".
// flagged is the stream's UndeclaredCompression attribute, if any.
func nonTextReason(head []byte, atEOF bool, bomLen int, cs charset, flagged string) string {
	if format, magic := compressedMagic(head); format != "" {
		why := fmt.Sprintf("it starts with %s magic (%s), so it is probably %s-compressed data", format, magic, format)
		switch format {
		case "gzip":
			why = fmt.Sprintf("it starts with gzip magic (%s), so it was probably sent compressed without a Compression header", magic)
		case "zip":
			why = fmt.Sprintf("it starts with zip magic (%s), so it is probably a zip archive sent without the header Compression: ZIP", magic)
		}
		if flagged != "" {
			why += fmt.Sprintf(" (the receiver noticed when it arrived and set the attribute UndeclaredCompression: %s)", flagged)
		}
		return cannotShow + why + "." + showHex
	}
	src := head[bomLen:]
	text := decodeSample(cs.enc, src, atEOF)
	var chars, nuls, controls, bad int
	firstNUL := -1
	for _, r := range string(text) {
		switch {
		case r == 0:
			if firstNUL < 0 {
				firstNUL = chars
			}
			nuls++
		case r == utf8.RuneError:
			bad++
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' && r != '\v' && r != 0x1b, r >= 0x7f && r <= 0x9f:
			controls++
		}
		chars++
	}
	if nuls > 0 {
		why := fmt.Sprintf("it holds NUL characters, which text does not (the first is character %d)", firstNUL)
		if guess := utf16Guess(src); guess != "" && !strings.HasPrefix(strings.ToUpper(cs.name), "UTF-16") {
			why += fmt.Sprintf("; every other byte is NUL, as in %s text without a byte-order mark, but it is read as %s (the feed's encoding)", guess, cs.name)
		}
		return cannotShow + why + "." + showHex
	}
	// A replacement character is only a decoding failure when the source
	// did not hold the charset's own encoding of U+FFFD.
	if want := legitReplacements(cs.enc, src); bad > want {
		why := fmt.Sprintf("it is not valid %s: its first %d bytes hold %d byte sequence(s) that are not %s characters",
			cs.name, len(src), bad-want, cs.name)
		if cs.name == "UTF-8" {
			why += fmt.Sprintf(" (the first at byte %d)", firstInvalidUTF8(src, atEOF)+bomLen)
		}
		return cannotShow + why + "." + showHex
	}
	if chars > 0 && controls*10 > chars {
		return cannotShow + fmt.Sprintf("%d of its first %d characters are control characters, so it is probably binary data.", controls, chars) + showHex
	}
	return ""
}

// decodeSample decodes src as far as it holds whole characters (all of it
// when atEOF), so a character cut by the end of the sample is not mistaken
// for an invalid one.
func decodeSample(enc encoding.Encoding, src []byte, atEOF bool) []byte {
	dst := make([]byte, 3*len(src)+16)
	for {
		dec := enc.NewDecoder()
		n, _, err := dec.Transform(dst, src, atEOF)
		if errors.Is(err, transform.ErrShortDst) {
			dst = make([]byte, 2*len(dst))
			continue
		}
		return dst[:n]
	}
}

// legitReplacements counts U+FFFD encoded in src in the charset's own
// encoding (0 when the charset cannot encode it).
func legitReplacements(enc encoding.Encoding, src []byte) int {
	rep, err := enc.NewEncoder().Bytes([]byte("\uFFFD"))
	if err != nil || len(rep) == 0 {
		return 0
	}
	return bytes.Count(src, rep)
}

// firstInvalidUTF8 is the offset of the first byte of b that does not
// start a valid UTF-8 sequence (a sequence cut by the end only when atEOF).
func firstInvalidUTF8(b []byte, atEOF bool) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 && (atEOF || utf8.FullRune(b[i:])) {
			return i
		}
		i += n
	}
	return len(b)
}

// utf16Guess recognises UTF-16 text of mostly ASCII characters: NUL at
// every other byte.
func utf16Guess(b []byte) string {
	if len(b) < 8 {
		return ""
	}
	var even, odd int
	for i, c := range b {
		if c == 0 {
			if i%2 == 0 {
				even++
			} else {
				odd++
			}
		}
	}
	half := len(b) / 2
	switch {
	case odd*10 > half*8 && even*10 < half:
		return "UTF-16LE"
	case even*10 > half*8 && odd*10 < half:
		return "UTF-16BE"
	}
	return ""
}

// textRange is the characters [offset, offset+length) of a part.
type textRange struct {
	text  string
	chars int64 // characters returned
	// total characters of the part (after any BOM), exact or estimated
	total int64
	exact bool
}

// readTextRange decodes characters [offset, offset+length) of the part's
// bytes [start, size) (start skips a BOM). Fixed-width charsets go straight
// to the bytes; others are decoded from the start, which is linear in the
// offset but reads the part sequentially, inflating each block once. It
// stops early when ctx ends (the client went away).
func readTextRange(ctx context.Context, ra io.ReaderAt, start, size int64, cs charset, offset, length int64) (textRange, error) {
	body := size - start
	if cs.width > 0 {
		total := body / cs.width
		from := min(offset, total)
		n := min(length, total-from)
		b := make([]byte, n*cs.width)
		if _, err := ra.ReadAt(b, start+from*cs.width); err != nil && !errors.Is(err, io.EOF) {
			return textRange{}, fmt.Errorf("read: %w", err)
		}
		text, err := cs.enc.NewDecoder().Bytes(b)
		if err != nil {
			return textRange{}, fmt.Errorf("decode %s: %w", cs.name, err)
		}
		return textRange{text: string(text), chars: int64(utf8.RuneCount(text)), total: total, exact: true}, nil
	}

	dec := &decodeReader{r: io.NewSectionReader(ra, start, body), t: cs.enc.NewDecoder(), src: make([]byte, 64<<10)}
	var (
		out     []byte
		seen    int64 // characters decoded so far, up to the end of the range
		decoded int64 // whole characters decoded so far, those after the range too
		got     int64
		carry   int
		buf     = make([]byte, 64<<10)
		reached bool // the end of the part
		more    bool // decoded characters after the range
	)
	for got < length {
		if err := ctx.Err(); err != nil {
			return textRange{}, err
		}
		n, err := dec.Read(buf[carry:])
		chunk := buf[:carry+n]
		end := len(chunk)
		if err == nil {
			end = completeRunes(chunk)
		}
		// The decoder's output is valid UTF-8, so runes can be walked
		// without checks; only the skip to the offset counts them in bulk.
		whole := chunk[:end]
		decoded += int64(utf8.RuneCount(whole))
		if seen < offset {
			if c := int64(utf8.RuneCount(whole)); seen+c <= offset {
				seen += c
				whole = nil
			} else {
				i := 0
				for seen < offset {
					_, w := utf8.DecodeRune(whole[i:])
					i += w
					seen++
				}
				whole = whole[i:]
			}
		}
		i := 0
		for ; i < len(whole) && got < length; got++ {
			_, w := utf8.DecodeRune(whole[i:])
			out = append(out, whole[i:i+w]...)
			i += w
			seen++
		}
		more = i < len(whole)
		carry = copy(buf, chunk[end:])
		if errors.Is(err, io.EOF) {
			reached = true
			break
		}
		if err != nil {
			return textRange{}, fmt.Errorf("decode %s: %w", cs.name, err)
		}
	}
	if !reached && !more && carry == 0 {
		// The range ended where a read did: one more read tells whether
		// that was the end, which makes the total exact.
		for {
			n, err := dec.Read(buf)
			if n > 0 {
				decoded += int64(utf8.RuneCount(buf[:n]))
				break
			}
			if errors.Is(err, io.EOF) {
				reached = true
			}
			if err != nil {
				break
			}
		}
	}
	tr := textRange{text: string(out), chars: got}
	switch {
	case reached:
		// Every character was decoded: those past the range too, when the
		// last read brought them with the end.
		tr.total, tr.exact = max(seen, decoded), true
	case dec.consumed > 0:
		// An estimate from the characters per byte decoded so far, as the
		// reference system's viewer gives: exact only once read to the end.
		// Both counts cover the same bytes: every character decoded, the
		// ones after the range included, over the bytes behind them, not
		// the bytes read ahead. More is known to follow, so the estimate
		// stays above what was seen, and a client that pages while its
		// offset is below the total reaches the end.
		tr.total = max(seen+1, int64(float64(decoded)/float64(dec.consumed)*float64(body)+0.5))
	default:
		tr.total = seen + 1
	}
	return tr, nil
}

// completeRunes is the length of the prefix of b that holds whole UTF-8
// sequences: a sequence cut by the end of a read waits for the next one.
func completeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// decodeReader is transform.Reader that also counts the source bytes
// behind what it has returned: it transforms straight into the caller's
// buffer, so nothing decoded waits unreturned, and consumed counts exactly
// the bytes whose characters the caller has (transform.Reader reads and
// decodes ahead into buffers of its own, and a count below it is of bytes
// read, not decoded). Reads of the source are as large as src.
type decodeReader struct {
	r        io.Reader
	t        transform.Transformer
	src      []byte
	s0, s1   int   // src[s0:s1] is read and not yet transformed
	eof      bool  // r is exhausted
	consumed int64 // source bytes transformed into what Read returned
}

func (d *decodeReader) Read(p []byte) (int, error) {
	for {
		if d.s0 < d.s1 || d.eof {
			nDst, nSrc, err := d.t.Transform(p, d.src[d.s0:d.s1], d.eof)
			d.s0 += nSrc
			d.consumed += int64(nSrc)
			switch {
			case err == nil && d.eof:
				return nDst, io.EOF
			case err == nil, errors.Is(err, transform.ErrShortSrc):
				if nDst > 0 {
					return nDst, nil
				}
				// All of src is decoded, or it ends inside a character:
				// read more.
			case errors.Is(err, transform.ErrShortDst) && nDst > 0:
				return nDst, nil
			default:
				return nDst, err
			}
		}
		if d.s0 > 0 {
			d.s1 = copy(d.src, d.src[d.s0:d.s1])
			d.s0 = 0
		}
		if d.s1 == len(d.src) {
			return 0, errors.New("the decoder takes no input from a full buffer")
		}
		n, err := d.r.Read(d.src[d.s1:])
		d.s1 += n
		switch {
		case errors.Is(err, io.EOF):
			d.eof = true
		case err != nil:
			return 0, err
		}
	}
}

// hexDump formats b, which starts at byte base of the part, as hexdump -C
// does: offset, 16 bytes in two groups of 8, and the printable ASCII.
func hexDump(b []byte, base int64) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	sb.Grow((len(b)/16 + 1) * 79)
	for i := 0; i < len(b); i += 16 {
		line := b[i:min(i+16, len(b))]
		fmt.Fprintf(&sb, "%08x  ", base+int64(i))
		for j := range 16 {
			if j < len(line) {
				sb.WriteByte(digits[line[j]>>4])
				sb.WriteByte(digits[line[j]&0xf])
				sb.WriteByte(' ')
			} else {
				sb.WriteString("   ")
			}
			if j == 7 {
				sb.WriteByte(' ')
			}
		}
		sb.WriteString(" |")
		for _, c := range line {
			if c < 0x20 || c > 0x7e {
				c = '.'
			}
			sb.WriteByte(c)
		}
		sb.WriteString("|\n")
	}
	return sb.String()
}
