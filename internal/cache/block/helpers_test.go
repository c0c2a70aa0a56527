package block

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// countingStore wraps a Store and records its ranged reads.
type countingStore struct {
	objstore.Store

	mu          sync.Mutex // guards the fields below
	reads       int
	ranges      [][2]int64 // off, length of each NewReader
	bytes       int64
	inflight    int
	maxInflight int
	delay       time.Duration // before each NewReader returns
	bodyDelay   time.Duration // before each Read of a body returns
	shortOnce   int           // the next shortOnce bodies are cut in half
	failOnce    int           // the next failOnce NewReaders fail with a transient error
}

func (s *countingStore) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	s.mu.Lock()
	s.reads++
	s.ranges = append(s.ranges, [2]int64{off, length})
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	delay, short, fail := s.delay, s.shortOnce > 0, s.failOnce > 0
	if short {
		s.shortOnce--
	}
	if fail {
		s.failOnce--
	}
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if fail {
		done()
		return nil, &objstore.Error{Provider: "mem", Op: "NewReader", Key: key, Status: 503, Err: errors.New("injected")}
	}
	rd, err := s.Store.NewReader(ctx, key, off, length, opts)
	if err != nil {
		done()
		return nil, err
	}
	var body io.Reader = rd
	if short {
		body = io.LimitReader(rd, length/2) // a body that ends early with io.EOF
	}
	return &countingReader{Reader: rd, body: body, s: s, done: done}, nil
}

func (s *countingStore) stats() (reads int, bytes int64, maxInflight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.bytes, s.maxInflight
}

func (s *countingStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads, s.ranges, s.bytes, s.maxInflight = 0, nil, 0, 0
}

type countingReader struct {
	objstore.Reader
	body io.Reader
	s    *countingStore
	once sync.Once
	done func()
}

func (r *countingReader) Read(p []byte) (int, error) {
	r.s.mu.Lock()
	d := r.s.bodyDelay
	r.s.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
		p = p[:min(len(p), 64<<10)] // a slow body: 64 KiB per delay
	}
	n, err := r.body.Read(p)
	r.s.mu.Lock()
	r.s.bytes += int64(n)
	r.s.mu.Unlock()
	return n, err
}

func (r *countingReader) Close() error {
	r.once.Do(r.done)
	return r.Reader.Close()
}

// fixture is a mem store holding one random object and a cache over it.
type fixture struct {
	t     *testing.T
	store *countingStore
	cache *Cache
	data  []byte
	ref   Ref
}

func randBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0], key[1], key[2] = byte(seed), byte(seed>>8), byte(seed>>16)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// newFixture stores size random bytes under "obj" and opens a cache in a
// temporary directory (cfg.Dir, when empty).
func newFixture(t *testing.T, size int, cfg Config) *fixture {
	t.Helper()
	ms := mem.New(mem.Options{Bucket: "b"})
	f := &fixture{t: t, store: &countingStore{Store: ms}, data: randBytes(uint64(size), size)}
	f.ref = f.put("obj", f.data)
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	f.cache = f.open(cfg)
	return f
}

func (f *fixture) open(cfg Config) *Cache {
	f.t.Helper()
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	if cfg.MinFreeBytes == 0 {
		cfg.MinFreeBytes = 1 // tests must not depend on the host's free space
	}
	c, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) put(key string, data []byte) Ref {
	f.t.Helper()
	info, err := f.store.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return Ref{Store: f.store, StoreID: "mem/b", Key: key, Version: info.Version, Size: info.Size}
}

// readAll reads the object through r in reads of n bytes and compares.
func (f *fixture) readAll(r *Reader, n int, want []byte) {
	f.t.Helper()
	got := make([]byte, 0, len(want))
	buf := make([]byte, n)
	for off := int64(0); ; {
		m, err := r.ReadAt(context.Background(), buf, off)
		got = append(got, buf[:m]...)
		off += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			f.t.Fatalf("ReadAt(%d): %v", off, err)
		}
	}
	if !bytes.Equal(got, want) {
		f.t.Fatalf("read %d bytes, mismatch with the source (%d bytes)", len(got), len(want))
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
