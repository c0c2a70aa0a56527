package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/azure"
	"github.com/ferry-fs/ferry/pkg/objstore/gcs"
	"github.com/ferry-fs/ferry/pkg/objstore/s3"
)

// ferryBin is the binary under test, built once by TestMain.
var ferryBin string

func TestMain(m *testing.M) {
	if os.Getenv(denyUnshareEnv) != "" {
		denyUnshareAndExec()
	}
	os.Unsetenv("AWS_CA_BUNDLE")
	dir, err := os.MkdirTemp("", "ferry-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ferryBin = filepath.Join(dir, "ferry")
	build := exec.Command("go", "build", "-o", ferryBin, "./cmd/ferry")
	build.Dir = testenv.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build ferry: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// s3env is one test's world on one backend: a fresh bucket (or
// container), a store to check it directly, a mount point and a cache dir.
// (The name stays from when S3 was the only backend.)
type s3env struct {
	t      *testing.T
	srv    *testenv.S3Server // the shared MinIO (also for S3-only helpers)
	scheme string            // "s3", "gs" or "az"
	bucket string
	store  objstore.Store
	mnt    string
	cache  string
	env    []string // the environment of ferry for this backend
	extra  []string // extra environment for ferry
}

// backends are the three backends every portable test runs on.
var backends = []string{"s3", "gs", "az"}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, e *s3env)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, b))
		})
	}
}

func newS3Env(t *testing.T) *s3env { return newEnv(t, "s3") }

func newEnv(t *testing.T, scheme string) *s3env {
	t.Helper()
	srv := testenv.MinIO(t)
	e := &s3env{t: t, srv: srv, scheme: scheme}
	dir := t.TempDir()
	e.mnt = filepath.Join(dir, "mnt")
	e.cache = filepath.Join(dir, "cache")
	ctx := context.Background()
	var st objstore.Store
	var err error
	switch scheme {
	case "s3":
		e.bucket = srv.NewBucket(t)
		e.env = srv.Env()
		st = e.newStore(srv.Endpoint)
	case "gs":
		g := testenv.FakeGCS(t)
		e.bucket = g.NewBucket(t)
		e.env = append(srv.Env(), g.Env()...)
		st, err = gcs.New(ctx, gcs.Config{Bucket: e.bucket, Endpoint: g.Host, Emulator: true})
	case "az":
		a := testenv.Azurite(t)
		e.bucket = a.NewContainer(t)
		e.env = append(srv.Env(), a.Env()...)
		st, err = azure.New(ctx, azure.Config{Account: a.Account, Container: e.bucket, ConnectionString: a.ConnectionString})
	default:
		t.Fatalf("unknown backend %q", scheme)
	}
	if err != nil {
		t.Fatalf("%s store: %v", scheme, err)
	}
	if st != nil && scheme != "s3" {
		t.Cleanup(func() { st.Close() })
	}
	e.store = st
	return e
}

func (e *s3env) newStore(endpoint string) objstore.Store {
	e.t.Helper()
	st, err := s3.New(context.Background(), s3.Config{
		Bucket: e.bucket, Endpoint: endpoint, Region: e.srv.Region,
		AccessKeyID: e.srv.AccessKey, SecretAccessKey: e.srv.SecretKey,
	})
	if err != nil {
		e.t.Fatalf("s3 store: %v", err)
	}
	e.t.Cleanup(func() { st.Close() })
	return st
}

// path is the mount path of a key.
func (e *s3env) path(key string) string {
	return filepath.Join(e.mnt, e.scheme, e.bucket, key)
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs "ferry run" with script under sh -c.
func (e *s3env) run(script string, flags ...string) result {
	e.t.Helper()
	args := append([]string{"run", "--mount-point", e.mnt, "--cache-dir", e.cache}, flags...)
	args = append(args, "--", "sh", "-c", script)
	return e.ferry(2*time.Minute, args...)
}

func (e *s3env) ferry(timeout time.Duration, args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, args...)
	cmd.Env = append(append([]string{}, e.env...), e.extra...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	if ctx.Err() != nil {
		e.t.Fatalf("ferry %v timed out after %v\nstderr:\n%s", args, timeout, r.stderr)
	}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
	} else if err != nil {
		e.t.Fatalf("ferry %v: %v", args, err)
	}
	return r
}

// mustRun runs script and fails the test unless ferry exits 0.
func (e *s3env) mustRun(script string, flags ...string) string {
	e.t.Helper()
	r := e.run(script, flags...)
	if r.code != 0 {
		e.t.Fatalf("ferry run exited %d\nscript: %s\nstdout:\n%s\nstderr:\n%s", r.code, script, r.stdout, r.stderr)
	}
	return r.stdout
}

func (e *s3env) put(key string, data []byte) {
	e.t.Helper()
	if _, err := e.store.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		e.t.Fatalf("put %s: %v", key, err)
	}
}

func (e *s3env) get(key string) ([]byte, error) {
	r, err := e.store.NewReader(context.Background(), key, 0, -1, objstore.ReadOptions{})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func (e *s3env) mustGet(key string) []byte {
	e.t.Helper()
	b, err := e.get(key)
	if err != nil {
		e.t.Fatalf("get %s: %v", key, err)
	}
	return b
}

func (e *s3env) stat(key string) (objstore.ObjectInfo, error) {
	return e.store.Stat(context.Background(), key)
}

func (e *s3env) keys(prefix string) []string {
	e.t.Helper()
	objs, _, err := objstore.ListAll(context.Background(), e.store, objstore.ListOptions{Prefix: prefix})
	if err != nil {
		e.t.Fatalf("list %s: %v", prefix, err)
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// writeTemp writes data to a file in the test's temp dir and returns its path.
func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
