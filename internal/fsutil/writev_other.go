//go:build !linux

package fsutil

import "os"

// WriteVAt writes bufs back to back at off in f and returns how many bytes
// it wrote.
func WriteVAt(f *os.File, bufs [][]byte, off int64) (int64, error) {
	var total int64
	for _, b := range bufs {
		n, err := f.WriteAt(b, off+total)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
