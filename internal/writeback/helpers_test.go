package writeback

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// Test sizes: small parts so that multipart paths run on little data.
const (
	testMinPart = 4 << 10
	testPart    = 16 << 10
)

// env is a test bucket ("s3://bkt") on the mem driver, seen through a
// faulty decorator (for faults and call counts) and a recorder.
type env struct {
	t      *testing.T
	dir    string
	mem    *mem.Store
	faults faulty.Config
	fs     *faulty.Store
	rec    *recorder
	logBuf *syncBuffer
	// landing: Puts ignore cancellation (a request already sent lands).
	landing bool

	mu    sync.Mutex // guards gates, and rec against setFaults (see store)
	gates []*gate
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), logBuf: &syncBuffer{}}
	e.mem = mem.New(mem.Options{Bucket: "bkt", MinPartSize: testMinPart})
	e.setFaults(faulty.Config{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("writeback log:\n%s", e.logBuf)
		}
	})
	return e
}

// setFaults replaces the fault decorator (and resets the call counts).
func (e *env) setFaults(cfg faulty.Config) {
	e.faults = cfg
	var inner objstore.Store = e.mem
	if e.landing {
		inner = &landingStore{Store: e.mem}
	}
	fs := faulty.New(inner, cfg)
	e.mu.Lock()
	e.fs = fs
	e.rec = &recorder{Store: fs, mp: fs}
	e.mu.Unlock()
}

// store returns the current recorder (setFaults may replace it while
// uploads run).
func (e *env) store() *recorder {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rec
}

// gate holds back the calls it matches until it is released. It blocks in
// faulty's Stall hook, which ignores the caller's context: a call
// cancelled meanwhile still reaches the store once the gate opens (where
// the mem driver fails it if its context is done, unless env.landing).
type gate struct {
	match func(op, key string) bool
	open  chan struct{}
	once  sync.Once
	held  atomic.Int32 // calls waiting now
	seen  atomic.Int32 // calls held so far
}

// gate returns a closed gate for the calls match selects; the env releases
// it before closing its managers. Pass g.stall as a faulty Stall hook.
func (e *env) gate(match func(op, key string) bool) *gate {
	g := &gate{match: match, open: make(chan struct{})}
	e.mu.Lock()
	e.gates = append(e.gates, g)
	e.mu.Unlock()
	return g
}

func (g *gate) stall(op, key string) time.Duration {
	if g.match(op, key) {
		select {
		case <-g.open:
		default:
			g.seen.Add(1)
			g.held.Add(1)
			<-g.open
			g.held.Add(-1)
		}
	}
	return 0
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (e *env) releaseGates() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, g := range e.gates {
		g.release()
	}
}

// opKey matches calls of op on key.
func opKey(op, key string) func(string, string) bool {
	return func(o, k string) bool { return o == op && k == key }
}

// landingStore is a mem store whose Puts complete even when their context
// is cancelled: the request had been sent.
type landingStore struct{ *mem.Store }

func (s *landingStore) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	return s.Store.Put(context.WithoutCancel(ctx), key, src, size, opts)
}

// CreateUpload creates the upload even when ctx is cancelled, but then
// fails: the request was sent, its answer is lost.
func (s *landingStore) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	up, err := s.Store.CreateUpload(context.WithoutCancel(ctx), key, opts)
	if err == nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return up, err
}

func (e *env) config() Config {
	return Config{
		Dir:          e.dir,
		PartSize:     testPart,
		MinFreeBytes: -1,
		SpareFiles:   4,
		RetryMin:     5 * time.Millisecond,
		RetryMax:     50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(e.logBuf, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
}

// open starts a Manager on the env's directory; it is closed at cleanup.
func (e *env) open(cfg Config) *Manager {
	e.t.Helper()
	rec := e.rec
	m, err := New(context.Background(), cfg, func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		return rec, nil
	})
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Cleanup(func() {
		e.releaseGates()
		m.Close()
	})
	return m
}

func (e *env) manager() *Manager { return e.open(e.config()) }

// object returns the bytes of key in the bucket, or nil and false.
func (e *env) object(key string) ([]byte, bool) {
	e.t.Helper()
	r, err := e.mem.NewReader(context.Background(), key, 0, -1, objstore.ReadOptions{})
	if err != nil {
		return nil, false
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		e.t.Fatalf("read %s: %v", key, err)
	}
	return b, true
}

func (e *env) wantObject(key string, want []byte) {
	e.t.Helper()
	got, ok := e.object(key)
	if !ok {
		e.t.Fatalf("object %s missing", key)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("object %s: %d bytes, want %d (first difference at %d)", key, len(got), len(want), firstDiff(got, want))
	}
}

func (e *env) wantNoObject(key string) {
	e.t.Helper()
	if _, ok := e.object(key); ok {
		e.t.Fatalf("object %s exists, want none", key)
	}
}

func (e *env) putObject(key string, data []byte) objstore.ObjectInfo {
	e.t.Helper()
	info, err := e.mem.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func tgt(key string) Target { return Target{Scheme: "s3", Bucket: "bkt", Key: key} }

// writeFile creates key, writes data and closes it.
func writeFile(t *testing.T, m *Manager, key string, data []byte) *File {
	t.Helper()
	f, err := m.Create(tgt(key), 0o644)
	if err != nil {
		t.Fatalf("Create %s: %v", key, err)
	}
	f.Acquire()
	if len(data) > 0 {
		if n, err := f.WriteAt(data, 0); err != nil || n != len(data) {
			t.Fatalf("WriteAt %s: %d, %v", key, n, err)
		}
	}
	if err := f.Release(); err != nil {
		t.Fatalf("Release %s: %v", key, err)
	}
	return f
}

func drain(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Drain(ctx); err != nil {
		var de *DrainError
		if errors.As(err, &de) {
			for _, f := range de.Failures {
				t.Logf("not durable: %s: %v", f.Target, f.Err)
			}
		}
		t.Fatalf("Drain: %v", err)
	}
}

// pattern returns n deterministic bytes that differ per seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// waitFor polls cond until it holds or the test times out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// recorder records the keys of successful Puts, Completes, Copies and
// Deletes, in the order they finished.
type recorder struct {
	objstore.Store
	mp objstore.Multipart

	mu  sync.Mutex // guards log
	log []string   // "put k", "complete k", "copy k", "delete k"
}

// Unwrap returns the decorated store (where an UploadLister is found).
func (r *recorder) Unwrap() objstore.Store { return r.Store }

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

func (r *recorder) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	info, err := r.Store.Put(ctx, key, src, size, opts)
	if err == nil {
		r.add("put " + key)
	}
	return info, err
}

func (r *recorder) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	info, err := r.Store.Copy(ctx, src, dst, opts)
	if err == nil {
		r.add("copy " + dst)
	}
	return info, err
}

func (r *recorder) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	err := r.Store.Delete(ctx, key, opts)
	if err == nil {
		r.add("delete " + key)
	}
	return err
}

func (r *recorder) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	up, err := r.mp.CreateUpload(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &recUpload{Upload: up, r: r, key: key}, nil
}

func (r *recorder) AbortUpload(ctx context.Context, key, id string) error {
	return r.mp.AbortUpload(ctx, key, id)
}

type recUpload struct {
	objstore.Upload
	r   *recorder
	key string
}

func (u *recUpload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	info, err := u.Upload.Complete(ctx)
	if err == nil {
		u.r.add("complete " + u.key)
	}
	return info, err
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
