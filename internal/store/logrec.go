package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/weirhq/weir/internal/attr"
	"github.com/weirhq/weir/internal/meta"
)

// A pack is the node's log. The group committer writes each post it packs
// as one record holding the post's rows and its stream files, so that a
// post is durable, rows and all, once its pack is flushed: the rows can go
// into the metadata database after the post is answered (store.commit:
// log), and a start after a crash puts in whatever a flush made durable
// and no transaction recorded (replay.go). The database lists the node's
// log packs in order (meta.Repo.OpenLogPack), each before any record in it
// is answered, and how far the log is recorded (meta.LogMark).
//
// A record is a frame of recordFrame bytes followed by its payload:
//
//	magic   "WLR1"
//	kind    1 byte: recPost or recPostSync
//	        3 bytes, zero
//	length  uint32, little-endian: of the payload
//	crc     uint32, little-endian: CRC-32C of bytes 4..11 and the payload
//
// A post's payload is its rows (appendRows) and then their stream files
// back to back; each row's PackOffset is where its stream file starts, and
// readers read stream files there as from any pack.
//
// The checksum tells a record whose write a crash cut short from one that
// was made durable: the records of a batch are written, then flushed, and
// the batch's posts are answered only after the flush.

const (
	recordFrame = 16
	// recPost is a post answered once its record was durable: its rows
	// are the store's to put in the database, at a start after a crash
	// too.
	recPost byte = 1
	// recPostSync is a post answered only after its rows' transaction:
	// the rows are in the database if the post succeeded, and a start
	// leaves the record alone.
	recPostSync byte = 2
	// maxRecord bounds a record's payload when it is read back: a post
	// holds at most heldPerPost*PackMax bytes in packs (16 MiB of streams
	// at the largest PackMax), and its rows far less than the same again.
	maxRecord = 64 << 20
)

var recordMagic = [4]byte{'W', 'L', 'R', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errNoRecord is returned by readRecord where no complete, intact record
// starts: the end of the log in this pack.
var errNoRecord = errors.New("no record")

// appendFrame appends the frame of a record of kind whose payload is
// payload (its first bytes, at least: crc is the checksum of the rest).
func appendFrame(dst []byte, kind byte, length int, crc uint32) []byte {
	dst = append(dst, recordMagic[:]...)
	dst = append(dst, kind, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(length))
	return binary.LittleEndian.AppendUint32(dst, crc)
}

// frameCRC starts the checksum of a record: the kind and length.
func frameCRC(kind byte, length int) uint32 {
	var b [8]byte
	b[0] = kind
	binary.LittleEndian.PutUint32(b[4:], uint32(length))
	return crc32.Update(0, castagnoli, b[:])
}

var errBadRecord = errors.New("malformed record")

// rowsHeader encodes the rows of a post record, each with its stream's
// FileSize (its stream file follows, in the same order). The node and
// pack are the pack's; offsets follow from the sizes.
func appendRows(dst []byte, rows []*meta.Stream) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(rows)))
	for _, r := range rows {
		dst = binary.AppendUvarint(dst, uint64(r.ID))
		dst = appendString(dst, r.Feed)
		dst = appendString(dst, r.Type)
		dst = binary.AppendVarint(dst, r.CreateMs)
		dst = binary.AppendVarint(dst, r.EffectiveMs)
		dst = binary.AppendVarint(dst, r.StatusMs)
		dst = appendString(dst, r.ReceiptID)
		dst = binary.AppendUvarint(dst, uint64(r.Parts))
		dst = binary.AppendUvarint(dst, uint64(r.RawSize))
		dst = binary.AppendUvarint(dst, uint64(r.FileSize))
		dst = binary.AppendUvarint(dst, uint64(r.Attributes.Len()))
		for k, v := range r.Attributes.All() {
			dst = appendString(dst, k)
			dst = appendString(dst, v)
		}
		dst = binary.AppendUvarint(dst, uint64(len(r.HopReceiptIDs)))
		for _, id := range r.HopReceiptIDs {
			dst = appendString(dst, id)
		}
		dst = appendString(dst, r.Forward.Sender)
		dst = appendString(dst, r.Forward.GUID)
	}
	return dst
}

// parseRows decodes a post record's payload into its rows, placed in pack
// at offsets counted from payloadAt, where the payload starts in the pack.
func parseRows(p []byte, node, pack string, payloadAt int64) ([]meta.Stream, error) {
	d := decoder{b: p}
	n := d.count(8)
	rows := make([]meta.Stream, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		r := meta.Stream{Status: meta.Unlocked, Node: node, Pack: pack}
		r.ID = d.int()
		r.Feed, r.Type = d.string(), d.string()
		r.CreateMs, r.EffectiveMs, r.StatusMs = d.varint(), d.varint(), d.varint()
		r.ReceiptID = d.string()
		r.Parts, r.RawSize, r.FileSize = int(d.int()), d.int(), d.int()
		r.Attributes = &attr.Map{}
		for range d.count(2) {
			k, v := d.string(), d.string()
			r.Attributes.Put(k, v)
		}
		if k := d.count(1); k > 0 {
			r.HopReceiptIDs = make([]string, 0, k)
			for range k {
				r.HopReceiptIDs = append(r.HopReceiptIDs, d.string())
			}
		}
		r.Forward.Sender, r.Forward.GUID = d.string(), d.string()
		rows = append(rows, r)
	}
	if d.err != nil {
		return nil, fmt.Errorf("post record: %w", d.err)
	}
	// The stream files fill the rest of the payload exactly.
	off := payloadAt + int64(len(p)-len(d.b))
	left := int64(len(d.b))
	for i := range rows {
		if rows[i].ID <= 0 || rows[i].FileSize > left {
			return nil, fmt.Errorf("post record: %w", errBadRecord)
		}
		rows[i].PackOffset = off
		off += rows[i].FileSize
		left -= rows[i].FileSize
	}
	if left != 0 {
		return nil, fmt.Errorf("post record: %w", errBadRecord)
	}
	return rows, nil
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decoder reads what appendRows wrote; the first fault
// sticks, and every read after it returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a non-negative int64.
func (d *decoder) int() int64 {
	v := d.uvarint()
	if v > 1<<62 {
		d.err = errBadRecord
		return 0
	}
	return int64(v)
}

// count reads a number of items each taking at least min bytes, which
// bounds it by what is left.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/min) {
		d.err = errBadRecord
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errBadRecord
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// readRecord reads the record at off in r (of size bytes): its kind and
// payload, or errNoRecord where none starts (zeros written ahead, a
// record a crash cut short, a pack of the old format), or the error of a
// read that failed.
func readRecord(r io.ReaderAt, off, size int64, buf []byte) (kind byte, payload []byte, err error) {
	if size-off < recordFrame {
		return 0, nil, errNoRecord
	}
	var fr [recordFrame]byte
	if _, err := r.ReadAt(fr[:], off); err != nil {
		return 0, nil, fmt.Errorf("read record at %d: %w", off, err)
	}
	if [4]byte(fr[:4]) != recordMagic || fr[5]|fr[6]|fr[7] != 0 {
		return 0, nil, errNoRecord
	}
	kind = fr[4]
	n := int64(binary.LittleEndian.Uint32(fr[8:]))
	if kind < recPost || kind > recPostSync || n > maxRecord || n > size-off-recordFrame {
		return 0, nil, errNoRecord
	}
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	payload = buf[:n]
	if _, err := r.ReadAt(payload, off+recordFrame); err != nil {
		return 0, nil, fmt.Errorf("read record at %d: %w", off, err)
	}
	if crc32.Update(frameCRC(kind, int(n)), castagnoli, payload) != binary.LittleEndian.Uint32(fr[12:]) {
		return 0, nil, errNoRecord
	}
	return kind, payload, nil
}
