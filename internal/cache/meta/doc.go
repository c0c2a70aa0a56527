// Package meta caches clean, rebuildable metadata: stat results (positive
// and negative) and directory listings, each with a TTL, in a bounded
// ristretto cache. Nothing here is ever the only copy of anything: a dropped
// or expired entry is simply fetched again. It imports objstore and
// ristretto only.
package meta
