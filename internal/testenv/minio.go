package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MinIO credentials and settings of the shared test server.
const (
	minioAccessKey = "minioadmin"
	minioSecretKey = "minioadmin"
	minioRegion    = "us-east-1"
	// minioKMSKey is the name of MinIO's built-in static KMS key, so that
	// SSE-S3 and SSE-KMS requests work against the test server.
	minioKMSKey = "ferry-test-key"
	// minioReadyTimeout bounds server start-up (the machine is small and
	// shared, so be generous).
	minioReadyTimeout = 90 * time.Second
)

// S3Server is a running MinIO server shared by the tests of one binary.
// The exported fields are fixed once MinIO returns it.
type S3Server struct {
	Endpoint  string // "http://127.0.0.1:PORT"
	AccessKey string
	SecretKey string
	Region    string // "us-east-1"
	// KMSKeyID names the server's built-in KMS key, for SSE-KMS tests.
	KMSKeyID string

	bin     string
	dataDir string
	logDir  string
	port    int
	console int

	// mu serialises Stop/Start/Pause/Resume and guards pid, starts and
	// state.
	mu     sync.Mutex
	pid    int
	starts int
	state  serverState
}

type serverState int

const (
	stateRunning serverState = iota
	statePaused
	stateStopped
)

// MinIO returns the test binary's MinIO server, starting it on first use
// (binary `minio` from the tools dir; data in a scratch dir). It fails the
// test when the binary is missing or the server does not become ready.
// Tests that Stop or Pause the server must not run in parallel with other
// tests that use it.
func MinIO(t testing.TB) *S3Server {
	t.Helper()
	return sharedMinIO.get(t, "MinIO", startMinIO)
}

func startMinIO() (*S3Server, error) {
	bin, err := LookTool("minio")
	if err != nil {
		return nil, fmt.Errorf("%v (run scripts/setup.sh minio)", err)
	}
	root, err := ownedScratchDir("minio")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	console, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &S3Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", port),
		AccessKey: minioAccessKey,
		SecretKey: minioSecretKey,
		Region:    minioRegion,
		KMSKeyID:  minioKMSKey,
		bin:       bin,
		dataDir:   filepath.Join(root, "data"),
		logDir:    root,
		port:      port,
		console:   console,
	}
	if err := s.launch(); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts the server process and waits until it is ready. The caller
// holds s.mu or owns s exclusively.
func (s *S3Server) launch() error {
	s.starts++
	cmd := exec.Command(s.bin, "server", s.dataDir,
		"--address", fmt.Sprintf("127.0.0.1:%d", s.port),
		"--console-address", fmt.Sprintf("127.0.0.1:%d", s.console),
		"--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_REGION="+s.Region,
		// A static KMS key (32 zero bytes, base64) enables SSE-S3/SSE-KMS.
		"MINIO_KMS_SECRET_KEY="+minioKMSKey+":AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
		"MINIO_BROWSER=off",
	)
	logFile := filepath.Join(s.logDir, fmt.Sprintf("minio-%d.log", s.starts))
	err := startAndWait(cmd, logFile, func() error {
		if err := WaitHTTP(s.Endpoint+"/minio/health/ready", minioReadyTimeout); err != nil {
			return err
		}
		// "ready" can come before the object layer is initialised (S3
		// requests then fail with 503 XMinioServerNotInitialized): wait
		// until a signed ListBuckets succeeds too.
		return s.waitS3(minioReadyTimeout)
	})
	if cmd.Process != nil { // it started (and was killed again if it did not become ready)
		s.pid = cmd.Process.Pid
		s.state = stateRunning
	}
	if err != nil {
		return fmt.Errorf("minio: %w", err)
	}
	return nil
}

// waitS3 polls ListBuckets until it answers 200.
func (s *S3Server) waitS3(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := s.Do(ctx, http.MethodGet, "/", nil, nil, nil)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, tail(b, 300))
		} else {
			last = err.Error()
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("minio S3 API not ready within %v (last: %s)", timeout, last)
}

// CreateBucket creates bucket name, failing the test on error (an existing
// bucket owned by us is fine).
func (s *S3Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.Do(ctx, http.MethodPut, "/"+name, nil, nil, nil)
	if err != nil {
		t.Fatalf("testenv: create bucket %s: %v", name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && !strings.Contains(string(body), "BucketAlreadyOwnedByYou") {
		t.Fatalf("testenv: create bucket %s: HTTP %d: %s", name, resp.StatusCode, body)
	}
}

// NewBucket creates a bucket with a fresh random name derived from the test
// name, removes it (with its contents) when the test ends, and returns the
// name.
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := BucketName(t)
	s.CreateBucket(t, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// MinIO deletes a non-empty bucket when asked to force it.
		h := http.Header{"X-Minio-Force-Delete": {"true"}}
		resp, err := s.Do(ctx, http.MethodDelete, "/"+name, nil, h, nil)
		if err != nil {
			t.Logf("testenv: delete bucket %s: %v", name, err)
			return
		}
		resp.Body.Close()
	})
	return name
}

// BucketName returns a fresh, valid bucket name (3-63 characters of
// [a-z0-9-]) that contains a readable part of the test's name.
func BucketName(t testing.TB) string {
	var b strings.Builder
	b.WriteString("t-")
	dash := true
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() >= 40 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	if !dash {
		b.WriteByte('-')
	}
	var rnd [5]byte
	_, _ = rand.Read(rnd[:])
	b.WriteString(hex.EncodeToString(rnd[:]))
	return b.String()
}

// Do sends one request signed with the server's credentials. path starts
// with "/" and is the unescaped "/bucket/key"; query and header may be nil.
// The caller closes the response body.
func (s *S3Server) Do(ctx context.Context, method, path string, query url.Values, header http.Header, body []byte) (*http.Response, error) {
	cred := s3Cred{accessKey: s.AccessKey, secretKey: s.SecretKey, region: s.Region}
	req, err := signedRequest(ctx, cred, method, s.Endpoint, path, query, header, body)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// Env returns a complete environment for a subprocess (a ferry binary)
// that talks to this server: the current environment without the AWS and
// FUSION_AWS variables that could point elsewhere (notably AWS_CA_BUNDLE,
// which this machine exports, AWS_PROFILE and AWS_SESSION_TOKEN), plus
// AWS_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION
// for this server. Use it as exec.Cmd.Env.
func (s *S3Server) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "FUSION_AWS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"AWS_S3_ENDPOINT="+s.Endpoint,
		"AWS_ACCESS_KEY_ID="+s.AccessKey,
		"AWS_SECRET_ACCESS_KEY="+s.SecretKey,
		"AWS_REGION="+s.Region,
		"AWS_EC2_METADATA_DISABLED=true",
	)
}

// Stop kills the server so that connections are refused, simulating an
// outage; Start brings it back on the same port with the same data. If the
// test ends with the server stopped, it is restarted.
func (s *S3Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateStopped {
		return
	}
	// SIGKILL also ends a paused (SIGSTOPped) process.
	if err := syscall.Kill(-s.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("testenv: stop minio: %v", err)
	}
	if err := waitGone(s.pid, 15*time.Second); err != nil {
		t.Fatalf("testenv: stop minio: %v", err)
	}
	s.state = stateStopped
	t.Cleanup(func() { s.restartIfStopped(t) })
}

// Start restarts a server that Stop stopped (no-op when it runs).
func (s *S3Server) Start(t testing.TB) {
	t.Helper()
	s.restartIfStopped(t)
}

func (s *S3Server) restartIfStopped(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStopped {
		return
	}
	if err := s.launch(); err != nil {
		t.Fatalf("testenv: restart minio: %v", err)
	}
}

// Pause freezes the server (SIGSTOP): connections are accepted by the
// kernel but never answered, simulating a hung server. Resume thaws it; a
// test that ends with the server paused resumes it.
func (s *S3Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateRunning {
		return
	}
	if err := syscall.Kill(-s.pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("testenv: pause minio: %v", err)
	}
	s.state = statePaused
	// kill returns before the group stop completes: a thread still
	// running could answer one more request. Wait until all are stopped.
	if err := waitStopped(s.pid, 10*time.Second); err != nil {
		t.Fatalf("testenv: pause minio: %v", err)
	}
	t.Cleanup(func() { s.Resume(t) })
}

// Resume thaws a server that Pause froze (no-op otherwise).
func (s *S3Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != statePaused {
		return
	}
	if err := syscall.Kill(-s.pid, syscall.SIGCONT); err != nil {
		t.Fatalf("testenv: resume minio: %v", err)
	}
	s.state = stateRunning
}

// waitStopped polls /proc until every thread of process pid is in the
// stopped state ('T').
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := runningThreads(pid)
		if err == nil && running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d: %d threads not stopped after %v (%v)", pid, running, timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runningThreads counts the threads of pid whose state is not stopped.
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	running := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name in parentheses, which may
		// itself contain ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("%s: unexpected stat %q", dir, b)
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			running++
		}
	}
	return running, nil
}

// waitGone polls until process pid has exited and been reaped.
func waitGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("process %d still alive after %v", pid, timeout)
}
