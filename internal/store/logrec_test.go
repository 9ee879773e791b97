package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
)

// postRecord builds a post record of rows whose stream files are files.
func postRecord(kind byte, rows []*meta.Stream, files [][]byte) []byte {
	for i, r := range rows {
		r.FileSize = int64(len(files[i]))
	}
	head := appendRows(nil, rows)
	length := len(head)
	for _, f := range files {
		length += len(f)
	}
	crc := crc32.Update(frameCRC(kind, length), castagnoli, head)
	for _, f := range files {
		crc = crc32.Update(crc, castagnoli, f)
	}
	rec := appendFrame(nil, kind, length, crc)
	rec = append(rec, head...)
	for _, f := range files {
		rec = append(rec, f...)
	}
	return rec
}

// TestLogRecordRoundTrip: post records read back as written, rows placed
// where their stream files are; a record cut short, or with a byte
// changed, is no record.
func TestLogRecordRoundTrip(t *testing.T) {
	a := &attr.Map{}
	a.Put("Feed", "FEED-1")
	a.Put("Système", "ünïcode")
	rows := []*meta.Stream{
		{ID: 7, Feed: "FEED-1", Type: "Raw Events", CreateMs: 1796000000000, EffectiveMs: -5, StatusMs: 1796000000001,
			ReceiptID: "1796000000000_0000_S_n1", Parts: 2, RawSize: 12, Attributes: a,
			HopReceiptIDs: []string{"x_0000_P_p1"}, Forward: meta.ForwardKey{Sender: "TOKEN:p", GUID: "g"}},
		{ID: 8, Feed: "FEED-2", Attributes: &attr.Map{}},
	}
	files := [][]byte{[]byte("first stream file"), []byte("second")}
	first := postRecord(recPostSync, []*meta.Stream{{ID: 6, Feed: "FEED-0", Attributes: &attr.Map{}}}, [][]byte{[]byte("before")})
	pack := append(append([]byte{}, first...), postRecord(recPost, rows, files)...)
	r := bytes.NewReader(pack)
	size := int64(len(pack))

	kind, payload, err := readRecord(r, 0, size, nil)
	if err != nil || kind != recPostSync {
		t.Fatalf("first record: kind %d, %v", kind, err)
	}
	off := int64(recordFrame + len(payload))
	kind, payload, err = readRecord(r, off, size, nil)
	if err != nil || kind != recPost {
		t.Fatalf("post: kind %d, %v", kind, err)
	}
	got, err := parseRows(payload, "n1", "p.wpk", off+recordFrame)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		w := *rows[i]
		if g.ID != w.ID || g.Feed != w.Feed || g.Type != w.Type || g.CreateMs != w.CreateMs || g.EffectiveMs != w.EffectiveMs ||
			g.StatusMs != w.StatusMs || g.ReceiptID != w.ReceiptID || g.Parts != w.Parts || g.RawSize != w.RawSize ||
			g.FileSize != w.FileSize || !reflect.DeepEqual(g.Attributes.Sorted(), w.Attributes.Sorted()) ||
			len(g.HopReceiptIDs) != len(w.HopReceiptIDs) || g.Forward != w.Forward || g.Node != "n1" || g.Pack != "p.wpk" || g.Status != meta.Unlocked {
			t.Errorf("row %d: %+v, wrote %+v", i, g, w)
		}
		if !bytes.Equal(pack[g.PackOffset:g.PackOffset+g.FileSize], files[i]) {
			t.Errorf("row %d at %d: %q", i, g.PackOffset, pack[g.PackOffset:g.PackOffset+g.FileSize])
		}
	}
	if end := off + recordFrame + int64(len(payload)); end != size {
		t.Fatalf("record ends at %d, pack at %d", end, size)
	}
	if _, _, err := readRecord(r, size, size, nil); !errors.Is(err, errNoRecord) {
		t.Fatalf("past the end: %v", err)
	}
	// Cut short, and damaged anywhere: no record.
	for cut := off + 1; cut < size; cut += 7 {
		if _, _, err := readRecord(bytes.NewReader(pack[:cut]), off, cut, nil); !errors.Is(err, errNoRecord) {
			t.Fatalf("cut at %d: %v", cut, err)
		}
	}
	for i := off; i < size; i++ {
		bad := bytes.Clone(pack)
		bad[i] ^= 0x20
		if _, _, err := readRecord(bytes.NewReader(bad), off, size, nil); !errors.Is(err, errNoRecord) {
			t.Fatalf("byte %d changed: %v", i, err)
		}
	}
}

// FuzzLogRecord: whatever bytes a pack holds, reading records from it
// fails cleanly or gives rows that lie inside their record.
func FuzzLogRecord(f *testing.F) {
	a := &attr.Map{}
	a.Put("Feed", "F")
	f.Add(postRecord(recPost, []*meta.Stream{{ID: 1, Feed: "F", Attributes: a}}, [][]byte{[]byte("data")}))
	f.Add(postRecord(recPostSync, []*meta.Stream{{ID: 2, Attributes: &attr.Map{}}, {ID: 3, Attributes: &attr.Map{}}}, [][]byte{nil, []byte("x")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Damaged records are refused by their checksum; to reach the
		// decoders, make the checksum right.
		if len(b) >= recordFrame {
			n := int(binary.LittleEndian.Uint32(b[8:]))
			if n <= len(b)-recordFrame {
				binary.LittleEndian.PutUint32(b[12:], crc32.Update(frameCRC(b[4], n), castagnoli, b[recordFrame:recordFrame+n]))
			}
		}
		_, payload, err := readRecord(bytes.NewReader(b), 0, int64(len(b)), nil)
		if err != nil {
			return
		}
		rows, err := parseRows(payload, "n", "p", recordFrame)
		if err != nil {
			return
		}
		for _, r := range rows {
			if r.PackOffset < recordFrame || r.PackOffset+r.FileSize > int64(recordFrame+len(payload)) || r.ID <= 0 {
				t.Fatalf("row %+v outside its record of %d bytes", r, len(payload))
			}
		}
	})
}
