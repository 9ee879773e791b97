package api

import (
	"context"
	"io"
	"strings"
	"testing"
)

// eofAtEnd is a ReaderAt that, as io.ReaderAt allows, returns io.EOF
// with the last bytes of its input.
type eofAtEnd struct{ b []byte }

func (r eofAtEnd) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r.b)) {
		return 0, io.EOF
	}
	n := copy(p, r.b[off:])
	if off+int64(n) == int64(len(r.b)) {
		return n, io.EOF
	}
	return n, nil
}

// TestReadTextTotalWhenEOFComesWithData: a source may hand back the
// last bytes with io.EOF in the same call (io.ReaderAt allows it); the
// total is then exact and counts the characters after the range too (it was
// offset+length: found by a review).
func TestReadTextTotalWhenEOFComesWithData(t *testing.T) {
	text := strings.Repeat("abcdefghij", 250) // 2,500 characters
	cs, err := lookupCharset("UTF-8")
	if err != nil {
		t.Fatal(err)
	}
	got, err := readTextRange(context.Background(), eofAtEnd{[]byte(text)}, 0, int64(len(text)), cs, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !got.exact || got.total != 2500 {
		t.Errorf("total %d (exact %v), want 2500 exact", got.total, got.exact)
	}
}
