// Package testenv starts the real servers that integration tests run
// against (MinIO for S3, fake-gcs-server for GCS, Azurite for Azure) on free
// loopback ports, once per test binary. Server processes die with the test
// binary (Pdeathsig), so nothing is left running.
//
// The binaries come from the project-local tools dir that scripts/setup.sh
// fills (.tools/bin), or from PATH. A missing binary fails the test: an
// integration test never skips (CI counts a skip as a failure).
package testenv
