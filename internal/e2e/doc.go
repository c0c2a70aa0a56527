// Package e2e holds the end-to-end tests: the real ferry binary, run as a
// subprocess against real servers (MinIO, fake-gcs-server, Azurite started
// by internal/testenv), through a real FUSE mount, with real tools (sh,
// coreutils, dd, tar, find). It has no non-test code.
package e2e
