// Package meta caches clean, rebuildable metadata: stat results (positive
// and negative) and directory listings, each with a TTL, in a bounded
// ristretto cache. Nothing here is ever the only copy of anything: a dropped
// or expired entry is simply fetched again. A fresh listing is complete: it
// answers for the names it holds and for those it lacks. LoadList shares one
// load of a directory among concurrent callers (a lookup storm lists once)
// and does not cache a load that a change overtook. It imports objstore and
// ristretto only.
package meta
