// Package stroomzip understands the Stroom zip format: the entries of a zip
// are grouped by base name into parts, each with a data entry and optional
// context, meta and manifest entries.
//
// Extensions (case-insensitive): .dat is data; .ctx and .context are
// context; .meta, .hdr, .header and .met are meta; .mf and .manifest are
// manifests. Any other extension, or none, is data whose base name is the
// whole name, unless a known entry shares the stem before the last dot, in
// which case it joins that group (so 001.txt goes with 001.meta, while
// 2023.11.15.10001 alone stays one data entry).
//
// Directories in entry names are separated by '/', or by '\' as some
// Windows tools (older .NET and PowerShell archivers) write them; the
// reference system groups such names as they are, and so does this package.
package stroomzip

import (
	"archive/zip"
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Kind is the role of an entry within its group.
type Kind int

const (
	Data Kind = iota
	Context
	Meta
	Manifest
	numKinds
)

func (k Kind) String() string {
	return [...]string{"data", "context", "meta", "manifest"}[k]
}

var extensions = map[string]Kind{
	"dat": Data, "ctx": Context, "context": Context,
	"meta": Meta, "hdr": Meta, "header": Meta, "met": Meta,
	"mf": Manifest, "manifest": Manifest,
}

// Group is one part: the index (into the names given to Groups) of each
// of its entries, or -1 when absent.
type Group struct {
	Base    string
	Entries [numKinds]int
}

// Entry returns the index of the group's entry of kind k, or -1.
func (g *Group) Entry(k Kind) int { return g.Entries[k] }

// MaxNameLength bounds an entry name; longer names are rejected.
const MaxNameLength = 1024

// FormatError is a zip whose entries break the Stroom zip format.
type FormatError struct{ Msg string }

func (e *FormatError) Error() string { return e.Msg }

func formatErrorf(format string, a ...any) error {
	return &FormatError{Msg: fmt.Sprintf(format, a...)}
}

// Groups groups entry names into parts, in the order each group's first
// entry appears. Directory entries (names ending in '/' or '\') are
// skipped, once their names are checked as any other's: the caller must
// refuse one that holds data (IsDir), which would otherwise be lost.
// Errors are *FormatError.
func Groups(names []string) ([]Group, error) {
	type classified struct {
		stem string // name without the extension
		kind Kind
		ok   bool // the extension is a known one
	}
	cls := make([]classified, len(names))
	stems := make(map[string]bool) // stems of entries with a known extension
	for i, name := range names {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		if IsDir(name) {
			continue
		}
		stem, ext := name, ""
		if dot := strings.LastIndexByte(name, '.'); dot > strings.LastIndexAny(name, `/\`) {
			stem, ext = name[:dot], name[dot+1:]
		}
		if strings.ContainsRune(ext, ',') {
			return nil, formatErrorf("zip entry %q: an extension must not contain ','", name)
		}
		kind, ok := extensions[strings.ToLower(ext)]
		cls[i] = classified{stem: stem, kind: kind, ok: ok}
		if ok {
			stems[stem] = true
		}
	}
	var groups []Group
	index := make(map[string]int)
	for i, name := range names {
		if IsDir(name) {
			continue
		}
		c := cls[i]
		base, kind := c.stem, c.kind
		if !c.ok {
			kind = Data
			if !stems[c.stem] {
				base = name
			}
		}
		gi, seen := index[base]
		if !seen {
			gi = len(groups)
			index[base] = gi
			g := Group{Base: base}
			for k := range g.Entries {
				g.Entries[k] = -1
			}
			groups = append(groups, g)
		}
		g := &groups[gi]
		if prev := g.Entries[kind]; prev >= 0 {
			return nil, formatErrorf("zip entries %q and %q are both the %s of part %q; a part has at most one of each",
				names[prev], name, kind, base)
		}
		g.Entries[kind] = i
	}
	return groups, nil
}

// IsDir reports whether an entry name names a directory: it ends in '/' or
// '\'.
func IsDir(name string) bool { return strings.HasSuffix(name, "/") || strings.HasSuffix(name, `\`) }

// CheckStart checks that the zip read from r begins with an entry its
// directory lists (files, as zip.Reader read them). Go's reader, like
// unzip, takes anything before the entries the directory locates for a
// prefix (a self-extractor's program) and ignores it; in a post that is
// data: two zips joined into one body (only the last one's directory is
// read, so the first one's entries would be lost without a word), or
// bytes prepended to a zip.
func CheckStart(r io.ReaderAt, files []*zip.File) error {
	if len(files) == 0 {
		return nil
	}
	var h [30]byte
	start := int64(0)
	if _, err := r.ReadAt(h[:4], 0); err != nil {
		return fmt.Errorf("read the start of the zip: %w", err)
	}
	if binary.LittleEndian.Uint32(h[:]) == 0x08074b50 {
		start = 4 // the marker a split archive of one segment starts with
	}
	if _, err := r.ReadAt(h[:], start); err != nil || binary.LittleEndian.Uint32(h[:]) != 0x04034b50 {
		return errors.New("the body does not start with a zip entry: bytes before the zip's entries would be lost")
	}
	// Where the data of the entry at the start begins, by its own header.
	want := start + int64(len(h)) + int64(binary.LittleEndian.Uint16(h[26:])) + int64(binary.LittleEndian.Uint16(h[28:]))
	// Directories list their entries in the order they were written, so
	// the first one is nearly always it; look at the rest only if not.
	for _, f := range files {
		if off, err := f.DataOffset(); err == nil && off == want {
			return nil
		}
	}
	return errors.New("the zip's directory does not list the entry at its start (two zips joined into one body?): " +
		"its entries would be lost; send each zip in a post of its own")
}

// CheckName rejects entry names that could escape a directory they were
// unpacked into, or that the format cannot represent. A '\' counts as a
// directory separator, as an unpacker on Windows takes it.
func CheckName(name string) error {
	slashed := strings.ReplaceAll(name, `\`, "/")
	switch {
	case name == "":
		return formatErrorf("zip entry with an empty name")
	case len(name) > MaxNameLength:
		return formatErrorf("zip entry name of %d bytes is longer than %d", len(name), MaxNameLength)
	case strings.IndexByte(name, 0) >= 0:
		return formatErrorf("zip entry %q: names must contain no NUL", name)
	case strings.HasPrefix(slashed, "/") || (len(name) > 1 && name[1] == ':'):
		return formatErrorf("zip entry %q: absolute names are not allowed", name)
	case strings.HasSuffix(name, "."):
		return formatErrorf("zip entry %q: a name must not end in '.'", name)
	}
	if c := path.Clean(slashed); c == ".." || strings.HasPrefix(c, "../") {
		return formatErrorf("zip entry %q escapes the archive root", name)
	}
	return nil
}

// ErrNotZip means the bytes have no zip end-of-central-directory record.
var ErrNotZip = errors.New("not a zip file: no end of central directory record")

// Directory is where a zip's central directory is, from its end records.
type Directory struct {
	Offset   int64  // where it starts in the zip
	Size     int64  // its length in bytes
	Declared uint64 // the entry count the end record declares
}

// FindDirectory reads a zip's end of central directory record (and the
// zip64 one, if there is one) and returns where the directory is: just
// before them, which holds even when bytes were put before the zip (the
// offset the record states is then wrong, and CheckStart refuses such a
// zip later).
func FindDirectory(r io.ReaderAt, size int64) (Directory, error) {
	const eocdLen, maxComment = 22, 65535
	tail := int64(eocdLen + maxComment)
	if tail > size {
		tail = size
	}
	buf := make([]byte, tail)
	if _, err := r.ReadAt(buf, size-tail); err != nil && !errors.Is(err, io.EOF) {
		return Directory{}, fmt.Errorf("read end of zip: %w", err)
	}
	for i := len(buf) - eocdLen; i >= 0; i-- {
		if binary.LittleEndian.Uint32(buf[i:]) != 0x06054b50 {
			continue
		}
		eocd := size - tail + int64(i)
		count := uint64(binary.LittleEndian.Uint16(buf[i+10:]))
		dirSize := uint64(binary.LittleEndian.Uint32(buf[i+12:]))
		if count != 0xffff && dirSize != 0xffffffff {
			if int64(dirSize) > eocd {
				return Directory{}, fmt.Errorf("central directory larger than the zip: %w", ErrNotZip)
			}
			return Directory{Offset: eocd - int64(dirSize), Size: int64(dirSize), Declared: count}, nil
		}
		// Zip64: the locator sits just before the record and points at the zip64 record.
		loc := eocd - 20
		if loc < 0 {
			return Directory{}, ErrNotZip
		}
		var l [20]byte
		if _, err := r.ReadAt(l[:], loc); err != nil || binary.LittleEndian.Uint32(l[:]) != 0x07064b50 {
			return Directory{}, fmt.Errorf("zip64 locator missing: %w", ErrNotZip)
		}
		off := int64(binary.LittleEndian.Uint64(l[8:]))
		var rec [56]byte
		if off < 0 || off > size-56 {
			return Directory{}, fmt.Errorf("zip64 record offset out of range: %w", ErrNotZip)
		}
		if _, err := r.ReadAt(rec[:], off); err != nil || binary.LittleEndian.Uint32(rec[:]) != 0x06064b50 {
			return Directory{}, fmt.Errorf("zip64 record missing: %w", ErrNotZip)
		}
		size64 := binary.LittleEndian.Uint64(rec[40:])
		if size64 > uint64(off) {
			return Directory{}, fmt.Errorf("central directory larger than the zip: %w", ErrNotZip)
		}
		return Directory{Offset: off - int64(size64), Size: int64(size64), Declared: binary.LittleEndian.Uint64(rec[32:])}, nil
	}
	return Directory{}, ErrNotZip
}

// EntryBound is an upper bound of the number of entries in the directory,
// known without reading it: the declared count is only 16 bits in a plain
// zip and readers check it modulo 65536, so the bound is also the
// directory's size divided by the smallest size of a directory entry (46
// bytes). Entries with names count more than once.
func (d Directory) EntryBound() uint64 {
	const minDirEntry = 46
	return max(d.Declared, uint64(d.Size)/minDirEntry)
}

// EntryCount returns an upper bound of the number of entries of a zip
// (FindDirectory, then EntryBound), so that it can be checked against a
// limit before anything is allocated.
func EntryCount(r io.ReaderAt, size int64) (uint64, error) {
	d, err := FindDirectory(r, size)
	if err != nil {
		return 0, err
	}
	return d.EntryBound(), nil
}

// CountEntries walks the directory's entry headers (46 bytes and three
// lengths each, read through a small buffer: nothing is allocated per
// entry) and returns how many there are. A directory that does not parse
// as headers end to end is ErrNotZip. The caller bounds d.Size.
func CountEntries(r io.ReaderAt, d Directory) (uint64, error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, d.Offset, d.Size), 64<<10)
	var h [46]byte
	var n uint64
	for left := d.Size; left > 0; {
		if _, err := io.ReadFull(br, h[:]); err != nil || binary.LittleEndian.Uint32(h[:]) != 0x02014b50 {
			return n, fmt.Errorf("central directory entry %d does not parse: %w", n+1, ErrNotZip)
		}
		rest := int64(binary.LittleEndian.Uint16(h[28:])) + int64(binary.LittleEndian.Uint16(h[30:])) + int64(binary.LittleEndian.Uint16(h[32:]))
		if _, err := br.Discard(int(rest)); err != nil {
			return n, fmt.Errorf("central directory entry %d is cut short: %w", n+1, ErrNotZip)
		}
		left -= int64(len(h)) + rest
		n++
	}
	return n, nil
}
