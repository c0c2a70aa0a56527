// Package objstoretest is the conformance suite every objstore driver
// passes: Run(t, Harness{...}) exercises the objstore.Store and
// objstore.Multipart contracts (not-found errors, ranges, delimiter listing
// and pagination, preconditions, versions, metadata, copies, multipart).
//
// It also holds what drivers' own tests share: HarnessFor builds the
// Harness from a driver's typed test helpers; Open and CannedStore set up a
// store for one test; CheckErrorMapping, CheckNetworkErrors and
// CheckShortBody check, on canned HTTP answers or a closed port, what a
// well-behaved server cannot show; CheckStaleVersion checks conditional
// operations against a really replaced version.
//
// It imports only the standard library and pkg/objstore, never a driver.
package objstoretest
