// Package faulty is an objstore.Store decorator for unit tests of the
// layers above a store: it fails, stalls or cuts short the calls of an
// inner store, by seeded rate per operation or by a programmable function,
// so retry, resume and error paths can be tested without a network.
// It imports only the standard library and pkg/objstore; production code
// must not import it.
package faulty
