package stroomzip

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// describe renders groups as "base:data=name,meta=name;..." for comparison.
func describe(names []string, groups []Group) string {
	var parts []string
	for _, g := range groups {
		s := g.Base + ":"
		var es []string
		for k := Data; k < numKinds; k++ {
			if i := g.Entry(k); i >= 0 {
				es = append(es, k.String()+"="+names[i])
			}
		}
		parts = append(parts, s+strings.Join(es, ","))
	}
	return strings.Join(parts, ";")
}

func seq(format string, from, to, step int) []string {
	var out []string
	for i := from; i != to+step; i += step {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func TestGroups(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{"single data", []string{"TEST.txt"}, "TEST.txt:data=TEST.txt"},
		// Reference cases 23 and 24: unknown extensions are part of the base name; .dat is not.
		{"txt entries", []string{"1.txt", "2.txt"}, "1.txt:data=1.txt;2.txt:data=2.txt"},
		{"dat entries", []string{"1.dat", "2.dat"}, "1:data=1.dat;2:data=2.dat"},
		// Case 25: interleaved data and meta.
		{"interleaved", []string{"1.txt", "1.meta", "2.txt", "2.meta"}, "1:data=1.txt,meta=1.meta;2:data=2.txt,meta=2.meta"},
		// Case 26-29: .hdr alias, meta before data, in either order.
		{"hdr first desc", []string{"2.hdr", "2.txt", "1.hdr", "1.txt"}, "2:data=2.txt,meta=2.hdr;1:data=1.txt,meta=1.hdr"},
		{"all hdr then txt asc", []string{"2.hdr", "1.hdr", "1.txt", "2.txt"}, "2:data=2.txt,meta=2.hdr;1:data=1.txt,meta=1.hdr"},
		{"dotted data name", []string{"2023.11.15.10001"}, "2023.11.15.10001:data=2023.11.15.10001"},
		{"reclassified", []string{"001.foo", "001.ctx"}, "001:data=001.foo,context=001.ctx"},
		{"all kinds mixed case", []string{"a/x.MF", "a/x.Meta", "a/x.context", "a/x.DAT"}, "a/x:data=a/x.DAT,context=a/x.context,meta=a/x.Meta,manifest=a/x.MF"},
		{"directories skipped", []string{"dir/", "dir/1.dat"}, "dir/1:data=dir/1.dat"},
		{"same stem other dir", []string{"a/1.dat", "b/1.meta"}, "a/1:data=a/1.dat;b/1:meta=b/1.meta"},
		{"no extension", []string{"events"}, "events:data=events"},
		// Windows tools may separate directories with '\'.
		{"backslash dirs", []string{`a\`, `a\1.meta`, `a\1.dat`, `b.d\x`, `b.d\x.ctx`},
			`a\1:data=a\1.dat,meta=a\1.meta;b.d\x:data=b.d\x,context=b.d\x.ctx`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Groups(tc.names)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(tc.names, g); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	if g, err := Groups(seq("%d.txt", 10, 1, -1)); err != nil || len(g) != 10 || g[0].Base != "10.txt" {
		t.Errorf("descending txt: %v %v", g, err)
	}
}

func TestGroupsRejects(t *testing.T) {
	for _, names := range [][]string{
		{"1.dat", "1.DAT"},
		{"1.meta", "1.hdr"},
		{"1.txt", "1.dat", "1.meta"},
		{"../evil.dat"},
		{"a/../../evil.dat"},
		{"/etc/passwd"},
		{"C:/x.dat"},
		{`..\evil.dat`},
		{`a\..\..\evil.dat`},
		{`a/..\..\evil.dat`},
		{`\\server\share\x.dat`},
		{`\x.dat`},
		{`C:\x.dat`},
		{"a\x00b.dat"},
		{"trailing."},
		{"x.da,t"},
		{""},
		{strings.Repeat("a", MaxNameLength+1)},
	} {
		_, err := Groups(names)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("Groups(%q) = %v, want a FormatError", names, err)
		}
	}
}

func makeZip(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := 0; i < n; i++ {
		// Stored, not deflated: a flate writer per entry makes 70000 entries slow.
		w, err := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("%d.dat", i), Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "entry %d", i)
	}
	zw.SetComment("a comment that pushes the record away from the end")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestEntryCount(t *testing.T) {
	for _, n := range []int{0, 1, 7, 70000} {
		b := makeZip(t, n)
		got, err := EntryCount(bytes.NewReader(b), int64(len(b)))
		// An upper bound: exact for ordinary zips, at least n for zip64 ones.
		if err != nil || got < uint64(n) || (n < 65535 && got != uint64(n)) {
			t.Errorf("EntryCount(%d entries) = %d, %v", n, got, err)
		}
	}
	for _, junk := range [][]byte{nil, []byte("SMALL DATA"), bytes.Repeat([]byte("x"), 100)} {
		if _, err := EntryCount(bytes.NewReader(junk), int64(len(junk))); !errors.Is(err, ErrNotZip) {
			t.Errorf("EntryCount(junk) = %v", err)
		}
	}
}

func FuzzGroups(f *testing.F) {
	f.Add("1.txt\n1.meta\n2.txt")
	f.Add("a/x.mf\na/x.dat\n../y")
	f.Add("001.foo\n001.ctx\n2023.11.15.10001")
	f.Add("sub\\001.dat\n\\")
	f.Fuzz(func(t *testing.T, joined string) {
		names := strings.Split(joined, "\n")
		groups, err := Groups(names)
		if err != nil {
			return
		}
		// Every non-directory entry (a name ending in / or \) lands in
		// exactly one group slot.
		used := make(map[int]bool)
		for _, g := range groups {
			for _, i := range g.Entries {
				if i < 0 {
					continue
				}
				if used[i] {
					t.Fatalf("entry %d used twice", i)
				}
				used[i] = true
				if CheckName(names[i]) != nil {
					t.Fatalf("bad name %q grouped", names[i])
				}
			}
		}
		for i, n := range names {
			if !IsDir(n) && !used[i] {
				t.Fatalf("entry %q not grouped", n)
			}
		}
	})
}

func FuzzEntryCount(f *testing.F) {
	f.Add(makeZip(f, 2))
	f.Add([]byte("PK\x05\x06"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = EntryCount(bytes.NewReader(b), int64(len(b)))
		if d, err := FindDirectory(bytes.NewReader(b), int64(len(b))); err == nil {
			if d.Offset < 0 || d.Size < 0 || d.Offset+d.Size > int64(len(b)) {
				t.Fatalf("directory %+v outside a zip of %d bytes", d, len(b))
			}
			_, _ = CountEntries(bytes.NewReader(b), d)
		}
	})
}

// TestCountEntries: the walk counts the entries exactly, whatever their
// names and comments make of the size-based bound, zip64 included.
func TestCountEntries(t *testing.T) {
	for _, n := range []int{0, 1, 7, 70000} {
		b := makeZip(t, n)
		d, err := FindDirectory(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := CountEntries(bytes.NewReader(b), d); err != nil || got != uint64(n) {
			t.Errorf("CountEntries(%d entries) = %d, %v", n, got, err)
		}
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := range 30 {
		if _, err := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("dir/%04d.dat", i), Comment: strings.Repeat("c", 500)}); err != nil {
			t.Fatal(err)
		}
	}
	zw.Close()
	b := buf.Bytes()
	d, err := FindDirectory(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if d.EntryBound() <= 30*10 {
		t.Errorf("bound %d: the commented entries should over-count", d.EntryBound())
	}
	if got, err := CountEntries(bytes.NewReader(b), d); err != nil || got != 30 {
		t.Errorf("CountEntries = %d, %v; want 30", got, err)
	}
	// A directory cut short is not a zip.
	d.Size -= 10
	if _, err := CountEntries(bytes.NewReader(b), d); !errors.Is(err, ErrNotZip) {
		t.Errorf("CountEntries of a cut directory: %v", err)
	}
}

// TestEntryCountBoundsLyingCount: a zip whose end record declares fewer
// entries than its directory holds is still bounded by the directory size.
func TestEntryCountBoundsLyingCount(t *testing.T) {
	b := makeZip(t, 300)
	// Find the end record and make it declare 2 entries.
	i := bytes.LastIndex(b, []byte("PK\x05\x06"))
	b[i+8], b[i+9], b[i+10], b[i+11] = 2, 0, 2, 0
	got, err := EntryCount(bytes.NewReader(b), int64(len(b)))
	if err != nil || got < 300 {
		t.Fatalf("EntryCount = %d, %v; want at least the 300 entries present", got, err)
	}
}
