// Command getfloor reads one object with parallel ranged GETs into
// io.Discard, C at a time in parts of PART bytes, and prints the
// throughput and its own CPU time per GiB: the floor a client without
// FUSE, cache or checksums reaches against the benchmark's object store
// through the same proxy (the cold-read baseline of bench/run.sh and
// bench/targets.sh read).
//
//	getfloor ENDPOINT BUCKET KEY C PART
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. The
// output is one line: "<MiB/s> MiB/s <cpu s> CPU s <cpu s per GiB> CPU s/GiB".
package main
