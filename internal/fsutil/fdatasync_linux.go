package fsutil

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data and the metadata needed to read it back (its
// length), not its timestamps, which would cost a journal commit.
func Fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
