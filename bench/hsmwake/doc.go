// Command hsmwake measures what a fanotify pre-content event costs as the
// number of processes reading one marked file at once grows: the cost of
// cold passthrough's events (internal/cache/hsm) when many readers of one
// file are waiting, apart from any fetch.
//
//	hsmwake DIR SECONDS READERS...
//
// DIR is a directory on a file system that takes pre-content marks (ext4,
// xfs, btrfs); hsmwake writes a 64 MiB file there and watches it with
// ferry's own pre-content listener (hsm.Open: one FAN_CLASS_PRE_CONTENT
// group on a private clone of DIR's mount), whose Filler finds every range
// present, so each event is answered at once from the listener's reading
// goroutine. For each count in READERS, that many threads read the file,
// opened through the listener, in
// 4 KiB preads, sequentially, for SECONDS; the output is one line per
// count: reads per second and this process's CPU time per 1,000 reads.
//
// The kernel keeps one wait queue per group for the readers waiting on
// their answers and wakes all of them at each answer, so the cost of an
// event grows with the readers that wait at once. It needs root
// (CAP_SYS_ADMIN) and Linux 6.14+.
package main
