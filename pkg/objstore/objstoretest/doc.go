// Package objstoretest is the conformance suite every objstore driver
// passes: Run(t, Harness{...}) exercises the objstore.Store and
// objstore.Multipart contracts (not-found errors, ranges, delimiter listing
// and pagination, preconditions, versions, metadata, copies, multipart).
// It imports only the standard library and pkg/objstore, never a driver.
package objstoretest
