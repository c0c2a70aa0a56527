// Package block is ferry's clean-data cache: object bytes on local disk,
// one sparse data file per object version at the object's own offsets
// (so that a whole one can back a FUSE passthrough open), with an index
// file beside it that records which blocks are present and their CRC32C
// checksums. Each block is checked before ferry serves it; a whole file
// is checked (and sealed) before the kernel is handed it. The package
// owns per-handle readahead, the fetches of directory readahead and input
// staging with their accounting, the global GET and memory budgets, fetch
// deduplication (within a process and, with fetch claims, across the
// processes sharing a directory), and the evictor (byte limit, free-space
// floor). It imports objstore and the standard library only: no FUSE, no
// vfs. README.md describes the on-disk layout.
package block
