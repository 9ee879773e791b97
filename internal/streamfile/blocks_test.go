package streamfile

import (
	"bytes"
	"errors"
	"io/fs"
	"testing"

	"github.com/klauspost/compress/s2"
)

// TestBlocks: Blocks hands over every block of a section in order, whole
// bytes and, for the blocks stored as S2, the S2 block that decodes to
// them; StoredSize and BlockSize say what they hold. Under zstd no block
// has an S2 block. A damaged block is ErrCorrupt, fn's error comes back
// as it is, and an absent section is fs.ErrNotExist.
func TestBlocks(t *testing.T) {
	const bs = 1000
	data := append(logBytes(30, 3500), randomBytes(31, 900)...) // compressible blocks, then an incompressible one
	for name, comp := range map[string]Compression{"s2": S2, "zstd": Zstd} {
		t.Run(name, func(t *testing.T) {
			c := newTestCodecFor(t, comp)
			file := encodeStream(t, c, WriterOptions{BlockSize: bs}, []section{{Data, 0, data}, {Context, 0, nil}})
			r, err := openBytes(t, c, file)
			if err != nil {
				t.Fatal(err)
			}
			if r.BlockSize() != bs {
				t.Errorf("BlockSize() = %d, want %d", r.BlockSize(), bs)
			}
			var got []byte
			var stored int64
			blocks, s2blocks := 0, 0
			err = r.Blocks(Data, 0, func(d, blk []byte) error {
				blocks++
				got = append(got, d...)
				if blk == nil {
					stored += int64(len(d)) // raw (zstd blocks are counted below)
					return nil
				}
				s2blocks++
				stored += int64(len(blk))
				dec, err := s2.Decode(nil, blk)
				if err != nil || !bytes.Equal(dec, d) {
					t.Errorf("block %d: its S2 block decodes to %d bytes (%v), not its %d", blocks, len(dec), err, len(d))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("the blocks hold %d bytes that differ from the section's %d", len(got), len(data))
			}
			if blocks != 5 {
				t.Errorf("%d blocks, want 5", blocks)
			}
			switch comp {
			case S2:
				if s2blocks != 4 || stored != r.StoredSize(Data, 0) {
					t.Errorf("%d S2 blocks, want 4 (the incompressible one raw); %d bytes handed over, StoredSize %d", s2blocks, stored, r.StoredSize(Data, 0))
				}
			case Zstd:
				if s2blocks != 0 {
					t.Errorf("%d S2 blocks from a zstd file", s2blocks)
				}
			}
			if n := r.StoredSize(Data, 0); n <= 0 || n >= int64(len(data)) {
				t.Errorf("StoredSize = %d for %d compressible bytes", n, len(data))
			}
			if err := r.Blocks(Context, 0, func(d, _ []byte) error {
				t.Errorf("a block of %d bytes in an empty section", len(d))
				return nil
			}); err != nil {
				t.Errorf("empty section: %v", err)
			}
			if err := r.Blocks(Meta, 0, func([]byte, []byte) error { return nil }); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("absent section: %v, want fs.ErrNotExist", err)
			}
			stop := errors.New("stop")
			calls := 0
			if err := r.Blocks(Data, 0, func([]byte, []byte) error { calls++; return stop }); err != stop || calls != 1 {
				t.Errorf("fn's error: %v after %d calls, want it after 1", err, calls)
			}

			e := r.sections[0].blocks[2]
			damaged := bytes.Clone(file)
			damaged[e.fileOffset+blockHeaderLen+int64(e.clen)/2] ^= 0x20
			dr, err := openBytes(t, c, damaged)
			if err != nil {
				t.Fatal(err)
			}
			calls = 0
			err = dr.Blocks(Data, 0, func([]byte, []byte) error { calls++; return nil })
			if !errors.Is(err, ErrCorrupt) || calls != 2 {
				t.Errorf("damaged third block: %v after %d blocks, want ErrCorrupt after 2", err, calls)
			}
		})
	}
}

// TestWriteS2Block: a section's writer keeps an S2 block as it is given
// when it compresses with S2 and holds nothing buffered (the block is in
// the file, as Blocks hands it back): a full block at once, a shorter one
// only as the section's last. Otherwise, or when the block is missing,
// not smaller, larger than a block, or says it decodes to another length,
// it writes the bytes as Write does. Either way the section reads back
// exactly, the file verifies, and it has no more blocks than Write would
// make of the same bytes (a review found a sender of tiny blocks making
// one block of each, 200,000 blocks of 8 bytes for 7 of 256 KiB).
func TestWriteS2Block(t *testing.T) {
	const bs = 4000
	text := logBytes(40, 3*bs)
	best := func(b []byte) []byte { return s2.EncodeBest(nil, b) } // not what the writer would make
	a, b, c := text[:bs], text[bs:2*bs], text[2*bs:2*bs+1500]
	type write struct {
		data, block []byte
		kept        bool
	}
	tiny := bytes.Repeat([]byte("aaaaaaaa"), 2000)
	var tinyWrites []write
	for i := 0; i < len(tiny); i += 8 {
		tinyWrites = append(tinyWrites, write{tiny[i : i+8], s2.Encode(nil, tiny[i:i+8]), false})
	}
	for _, tc := range []struct {
		name   string
		comp   Compression
		writes []write
	}{
		{"full blocks and a short last one kept", S2, []write{{a, best(a), true}, {b, best(b), true}, {c, best(c), true}}},
		{"a short block with more after it", S2, []write{{c, best(c), false}, {a, best(a), false}}},
		{"after buffered bytes", S2, []write{{a[:10], nil, false}, {b, best(b), false}}},
		{"tiny blocks", S2, tinyWrites},
		{"without a block", S2, []write{{a, nil, false}}},
		{"block not smaller", S2, []write{{a[:100], randomBytes(41, 200), false}}},
		{"block of other bytes", S2, []write{{a, best(b[:bs-1]), false}}},
		{"more than a block", S2, []write{{text[:bs+1], best(text[:bs+1]), false}}},
		{"zstd", Zstd, []write{{a, best(a), false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			co := newTestCodecFor(t, tc.comp)
			var buf bytes.Buffer
			w, err := NewWriter(&buf, co, WriterOptions{BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			sw, err := w.Open(Data, 0)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			for _, wr := range tc.writes {
				n, err := sw.(interface {
					WriteS2Block(data, block []byte) (int, error)
				}).WriteS2Block(wr.data, wr.block)
				if err != nil || n != len(wr.data) {
					t.Fatalf("WriteS2Block: %d of %d bytes: %v", n, len(wr.data), err)
				}
				want = append(want, wr.data...)
			}
			if err := sw.Close(); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()), co)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Verify(); err != nil {
				t.Fatal(err)
			}
			checkSection(t, r, Data, 0, want, bs)
			for i, wr := range tc.writes {
				if len(wr.block) < 16 {
					continue // too short to look for
				}
				if kept := bytes.Contains(buf.Bytes(), wr.block); kept != wr.kept {
					t.Errorf("write %d: its block is in the file: %v, want %v", i, kept, wr.kept)
				}
			}
			blocks := 0
			if err := r.Blocks(Data, 0, func([]byte, []byte) error { blocks++; return nil }); err != nil {
				t.Fatal(err)
			}
			if most := (len(want) + bs - 1) / bs; blocks > most {
				t.Errorf("%d blocks for %d bytes; Write makes %d", blocks, len(want), most)
			}
		})
	}
}
