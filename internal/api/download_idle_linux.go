package api

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bytesAcked is how many bytes of the connection's output its peer has
// acknowledged (TCP_INFO).
func bytesAcked(c syscall.Conn) (uint64, bool) {
	sc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n uint64
	var gerr error
	if err := sc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		if info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); gerr == nil {
			n = info.Bytes_acked
		}
	}); err != nil || gerr != nil {
		return 0, false
	}
	return n, true
}
