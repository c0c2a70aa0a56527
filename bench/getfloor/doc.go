// Command getfloor reads one object with parallel ranged GETs into
// io.Discard, C at a time in parts of PART bytes, and prints the
// throughput and its own CPU time per GiB: the floor a client without
// FUSE, cache or checksums reaches against the benchmark's object store
// through the same proxy (the cold-read baseline of bench/run.sh and
// bench/targets.sh read).
//
//	getfloor ENDPOINT BUCKET KEY C PART [CACHEFILE]
//
// With CACHEFILE, the cache floor instead: each part is written into that
// (sparse) file at its offset as it arrives, and a reader in the same
// process reads the file in order, 1 MiB at a time, each range once its
// part has landed: the least a client that keeps a local copy and hands
// it to a reader does (no FUSE, no checksums, no events). The CPU time
// then includes the writes and the reader's.
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. The
// output is one line: "<MiB/s> MiB/s <cpu s> CPU s <cpu s per GiB> CPU s/GiB".
package main
