// Package block is ferry's clean-data cache: object bytes on local disk in
// fixed-size blocks keyed by (store, key, version, block index), kept in
// sparse segment files, each block CRC32C-checked before it is served. It
// owns per-handle readahead, the global GET and memory budgets, fetch
// deduplication, and the evictor (byte limit, free-space floor). It imports
// objstore and the standard library only: no FUSE, no vfs. README.md
// describes the on-disk layout.
package block
