package fsutil

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// maxIov is how many buffers one pwritev takes (IOV_MAX on Linux).
const maxIov = 1024

// WriteVAt writes bufs back to back at off in f, in as few system calls
// as the kernel allows (pwritev), and returns how many bytes it wrote.
func WriteVAt(f *os.File, bufs [][]byte, off int64) (int64, error) {
	var total int64
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), maxIov)]
		n, err := unix.Pwritev(int(f.Fd()), chunk, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: err}
		}
		if n == 0 && len(chunk[0]) > 0 {
			return total, &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		total += int64(n)
		off += int64(n)
		// Drop what was written; a short write leaves part of a buffer.
		for n > 0 && len(bufs) > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
				continue
			}
			bufs = append([][]byte{bufs[0][n:]}, bufs[1:]...)
			n = 0
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return total, nil
}
