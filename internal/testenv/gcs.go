package testenv

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// GCSServer is a fake-gcs-server process serving the GCS JSON and XML APIs
// over plain HTTP on loopback. It lives as long as the test binary.
//
// It keeps objects in memory: the filesystem backend stores an object as a
// file named after its key, so it cannot hold both "a" and "a/b" (GCS can).
type GCSServer struct {
	// Host is "127.0.0.1:PORT", the value of STORAGE_EMULATOR_HOST.
	Host string
	// URL is "http://127.0.0.1:PORT".
	URL string
	// Dir holds the server's log (server.log).
	Dir string

	seq atomic.Uint64 // bucket name counter
}

// gcsServer is the one fake-gcs-server of this test binary. It is the
// package's only mutable global: a process-lifetime singleton, started on
// first use and killed with the binary (Pdeathsig).
var gcsServer struct {
	once sync.Once
	srv  *GCSServer
	err  error
}

// FakeGCS returns the test binary's fake-gcs-server, starting it on first
// use. It fails the test when the binary is missing or does not start.
func FakeGCS(t testing.TB) *GCSServer {
	t.Helper()
	bin := Tool(t, "fake-gcs-server")
	gcsServer.once.Do(func() { gcsServer.srv, gcsServer.err = startFakeGCS(bin) })
	if gcsServer.err != nil {
		t.Fatalf("testenv: fake-gcs-server: %v", gcsServer.err)
	}
	return gcsServer.srv
}

func startFakeGCS(bin string) (*GCSServer, error) {
	dir, err := ScratchDir("gcs")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before we bind it
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		host := "127.0.0.1:" + strconv.Itoa(port)
		cmd := exec.Command(bin,
			"-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
			"-backend", "memory",
			"-public-host", host, "-external-url", "http://"+host,
			"-log-level", "warn")
		logFile := filepath.Join(dir, "server.log")
		if err := StartProcess(cmd, logFile); err != nil {
			return nil, err
		}
		url := "http://" + host
		if err := WaitHTTP(url+"/storage/v1/b?project=p", 20*time.Second); err != nil {
			_ = cmd.Process.Kill()
			lastErr = fmt.Errorf("%w; log: %s", err, emuLogTail(logFile))
			continue
		}
		return &GCSServer{Host: host, URL: url, Dir: dir}, nil
	}
	return nil, lastErr
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
	name := emuBucketName("ferry-test", s.seq.Add(1))
	body, err := json.Marshal(map[string]string{"name": name})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(s.URL+"/storage/v1/b?project=p", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("testenv: create bucket %s: %v", name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: create bucket %s: HTTP %d: %s", name, resp.StatusCode, msg)
	}
	return name
}

// emuBucketName returns a bucket or container name that is valid on GCS and
// Azure (lower case, digits and hyphens, at most 63 characters) and unique
// across test binaries sharing a server.
func emuBucketName(prefix string, n uint64) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", prefix, n, hex.EncodeToString(b[:]))
}

// emuLogTail returns the last lines of a log file, for failure messages.
func emuLogTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 2000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return strings.TrimSpace(string(data))
}
