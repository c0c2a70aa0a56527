package testenv

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// GCSServer is a fake-gcs-server process serving the GCS JSON and XML APIs
// over plain HTTP on loopback. It lives as long as the test binary.
//
// It keeps objects in memory: the filesystem backend stores an object as a
// file named after its key, so it cannot hold both "a" and "a/b" (GCS can).
type GCSServer struct {
	emulator // Dir

	// Host is "127.0.0.1:PORT", the value of STORAGE_EMULATOR_HOST.
	Host string
	// URL is "http://127.0.0.1:PORT".
	URL string
}

// FakeGCS returns the test binary's fake-gcs-server, starting it on first
// use. It fails the test when the binary is missing or does not start.
func FakeGCS(t testing.TB) *GCSServer {
	t.Helper()
	return gcsServer.get(t, "fake-gcs-server", startFakeGCS)
}

func startFakeGCS() (*GCSServer, error) {
	host := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	args := func(port int, _ string) []string {
		return []string{"-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port), "-backend", "memory",
			"-public-host", host(port), "-external-url", "http://" + host(port), "-log-level", "warn"}
	}
	ready := func(port int) string { return "http://" + host(port) + "/storage/v1/b?project=p" }
	dir, port, err := startEmulator("fake-gcs-server", "gcs", args, ready, "", 20*time.Second)
	if err != nil {
		return nil, err
	}
	return &GCSServer{Host: host(port), URL: "http://" + host(port), emulator: emulator{Dir: dir}}, nil
}

// Env returns the environment that points GCS clients at the emulator:
// STORAGE_EMULATOR_HOST=127.0.0.1:PORT.
func (s *GCSServer) Env() []string {
	return []string{"STORAGE_EMULATOR_HOST=" + s.Host}
}

// NewBucket creates a bucket with a fresh name and returns the name. It
// fails the test on error.
func (s *GCSServer) NewBucket(t testing.TB) string {
	t.Helper()
	return s.create(t, "bucket", http.StatusOK, func(name string) (*http.Response, error) {
		body := `{"name":"` + name + `"}` // names need no JSON escaping
		return http.Post(s.URL+"/storage/v1/b?project=p", "application/json", strings.NewReader(body))
	})
}
