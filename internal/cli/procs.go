package cli

import (
	"os"
	"runtime"
)

// spareProcs is how many Ps a server runs beyond the CPUs it may use.
//
// A post's path is mostly short bursts of CPU between waits in the kernel:
// the pack's fdatasync, the metadata transaction's writes and flush, the
// log line, the socket. A thread in such a system call keeps its P until
// the runtime notices and hands the P on, and a thread the kernel
// preempts for its own work (writeback, the journal, the network stack,
// which take a third of a small machine under load) keeps its P for as
// long as it waits for a CPU. With as many Ps as CPUs, each such wait
// leaves a CPU with no Go code to run while handlers queue for a P. Two
// spare Ps, one for each of the store's flushing stages, keep the CPUs
// busy: on 2 CPUs, 1 KiB posts went from 11,000 to 12,500 posts/s and 45
// KiB posts from 4,300 to 5,300 in the same runs (docs/performance.md,
// "Spare Ps"); more than two gained no more.
const spareProcs = 2

// ServerProcs returns the GOMAXPROCS a server runs with, given the
// runtime's default (cur, the CPUs the process may use) and the GOMAXPROCS
// environment variable (env): cur plus spareProcs, or, when env is set,
// what the operator chose (ok false: leave it).
func ServerProcs(env string, cur int) (n int, ok bool) {
	if env != "" {
		return cur, false
	}
	return cur + spareProcs, true
}

// setServerProcs applies ServerProcs to this process and returns the
// GOMAXPROCS it runs with and the one it started with.
func setServerProcs() (n, was int) {
	was = runtime.GOMAXPROCS(0)
	n, ok := ServerProcs(os.Getenv("GOMAXPROCS"), was)
	if ok {
		runtime.GOMAXPROCS(n)
	}
	return n, was
}
