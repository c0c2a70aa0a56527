package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// emulator is what the cloud emulators (fake-gcs-server, Azurite) have in
// common: a scratch dir and a counter for fresh bucket names.
type emulator struct {
	// Dir holds the server's log (server.log) and data, if it keeps any.
	Dir string

	seq atomic.Uint64 // bucket (container) name counter
}

// startEmulator starts the installed tool on a free loopback port with a
// fresh scratch dir named scratch (see ScratchDir) for its data and its log
// (server.log): args returns its arguments for a port and that dir, and
// readyURL a URL that answers (below 500) within timeout once it serves,
// with a Server header that starts with server (any when empty). It
// returns the dir and the port.
func startEmulator(tool, scratch string, args func(port int, dir string) []string, readyURL func(port int) string, server string, timeout time.Duration) (string, int, error) {
	bin, err := LookTool(tool)
	if err != nil {
		return "", 0, fmt.Errorf("%v (run scripts/setup.sh or make setup)", err)
	}
	dir, err := ScratchDir(scratch)
	if err != nil {
		return "", 0, err
	}
	port, err := startOnFreePort(func(port int) error {
		return startAndWait(exec.Command(bin, args(port, dir)...), filepath.Join(dir, "server.log"), func() error {
			return waitServer(readyURL(port), server, timeout)
		})
	})
	return dir, port, err
}

// create creates a bucket (what: "bucket" or "container") with a fresh
// name and returns the name: do sends the request that creates it, whose
// answer must have status want. It fails t on error.
func (e *emulator) create(t testing.TB, what string, want int, do func(name string) (*http.Response, error)) string {
	t.Helper()
	name := e.newName()
	resp, err := do(name)
	if err != nil {
		t.Fatalf("testenv: create %s %s: %v", what, name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		t.Fatalf("testenv: create %s %s: HTTP %d: %s", what, name, resp.StatusCode, msg)
	}
	return name
}

// newName returns a bucket or container name that is valid on GCS and
// Azure (lower case, digits and hyphens, at most 63 characters) and unique
// across test binaries sharing a server.
func (e *emulator) newName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("ferry-test-%d-%s", e.seq.Add(1), hex.EncodeToString(b[:]))
}
