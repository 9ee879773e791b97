//go:build !linux

package api

import "syscall"

// bytesAcked is not known here: a download's writes have only their own
// deadlines (see idleResponseWriter).
func bytesAcked(syscall.Conn) (uint64, bool) { return 0, false }
