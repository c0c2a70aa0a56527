// Package block is ferry's clean-data cache: object bytes on local disk in
// fixed-size blocks keyed by (store, key, version, block index), stored in
// sparse segment files, each block checksummed (CRC32C per 64 KiB chunk)
// and verified before it is served.
// It owns per-handle sequential detection and readahead, the global budgets
// of parallel ranged GETs and in-flight memory, deduplication of identical
// fetches, and the evictor that keeps the cache under its byte limit and
// the disk above its free-space floor. It imports objstore and the standard
// library only; it knows nothing of FUSE or the vfs. See README.md for the
// on-disk layout.
package block
