// Package mem is a complete in-memory objstore driver for unit tests.
//
// It implements objstore.Store and objstore.Multipart with the semantics of
// the real drivers (versions, preconditions, delimiter listing with
// pagination, metadata, multipart part-size rules) and passes objstoretest.
// It imports only the standard library and pkg/objstore.
package mem
