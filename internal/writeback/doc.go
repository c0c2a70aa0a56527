// Package writeback owns dirty data: files written through the mount are
// staged on local disk, journaled, and uploaded in the background with
// bounded concurrency (streaming multipart for sequential writers, server-side
// part copies for partial rewrites of large objects). Drain is the barrier
// that makes every closed file durable before ferry exits; a journal lets a
// restarted ferry finish uploads of a killed one. See README.md for the
// journal format and the state machine.
//
// It imports only pkg/objstore and the standard library; never vfs or fuse.
package writeback
