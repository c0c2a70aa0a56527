package block

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// gatedStore records the ranged GETs of a store; it refuses keys in deny
// (permission denied) and holds GETs of a key at or after an offset in
// gates until release is closed (or the fetch's context ends).
type gatedStore struct {
	objstore.Store
	release chan struct{}

	mu    sync.Mutex // guards the fields below
	gets  []string   // key@block of each NewReader, in order
	deny  map[string]bool
	gates map[string]int64
}

func (s *gatedStore) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	s.mu.Lock()
	s.gets = append(s.gets, fmt.Sprintf("%s@%d", key, off>>20))
	denied := s.deny[key]
	gate, gated := s.gates[key]
	s.mu.Unlock()
	if denied {
		return nil, &objstore.Error{Provider: "mem", Op: "NewReader", Key: key, Status: 403, Code: "AccessDenied", Kind: objstore.ErrPermission}
	}
	if gated && off+length > gate {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.NewReader(ctx, key, off, length, opts)
}

func (s *gatedStore) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.gets...)
}

// stageEnv is a cache over a gatedStore holding objects of given sizes.
type stageEnv struct {
	t     *testing.T
	store *gatedStore
	cache *Cache
	refs  map[string]Ref
	data  map[string][]byte
}

func newStageEnv(t *testing.T, cfg Config, sizes map[string]int) *stageEnv {
	t.Helper()
	e := &stageEnv{t: t, store: &gatedStore{Store: mem.New(mem.Options{Bucket: "b"}), release: make(chan struct{}),
		deny: map[string]bool{}, gates: map[string]int64{}}, refs: map[string]Ref{}, data: map[string][]byte{}}
	t.Cleanup(func() {
		select {
		case <-e.store.release:
		default:
			close(e.store.release)
		}
	})
	var seed [32]byte
	rng := rand.NewChaCha8(seed)
	for k, n := range sizes {
		b := make([]byte, n)
		rng.Read(b)
		info, err := e.store.Put(context.Background(), k, bytes.NewReader(b), int64(n), objstore.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.refs[k] = Ref{Store: e.store, StoreID: "mem/b", Key: k, Version: info.Version, Size: info.Size}
		e.data[k] = b
	}
	cfg.Dir = t.TempDir()
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	cfg.MinFreeBytes = 1
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.cache = c
	return e
}

func (e *stageEnv) inputs(keys ...string) []StageInput {
	var in []StageInput
	for _, k := range keys {
		early := strings.HasSuffix(k, ".bai") || e.refs[k].Size < 4<<20
		in = append(in, StageInput{Ref: e.refs[k], Early: early})
	}
	return in
}

// read reads key [off, off+n) through a Reader as the task would (the
// Reader reports it to the stagers).
func (e *stageEnv) read(r *Reader, key string, off, n int64) {
	e.t.Helper()
	buf := make([]byte, n)
	m, err := r.ReadAt(context.Background(), buf, off)
	if err != nil && err != io.EOF {
		e.t.Fatalf("read %s at %d: %v", key, off, err)
	}
	if !bytes.Equal(buf[:m], e.data[key][off:off+int64(m)]) {
		e.t.Fatalf("read %s at %d: wrong bytes", key, off)
	}
}

// readAll reads key whole in 1 MiB reads.
func (e *stageEnv) readAll(key string) {
	r := e.cache.Open(e.refs[key])
	defer r.Close()
	for off := int64(0); off < e.refs[key].Size; off += 1 << 20 {
		e.read(r, key, off, 1<<20)
	}
}

func waitStage(t *testing.T, s *Stager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("staging did not finish: %v (%+v)", err, s.Stats())
	}
}

// until polls cond for up to 30 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (s *Stager) pausedForBudget() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting > 0
}

func TestStageOrder(t *testing.T) {
	const mib = 1 << 20
	e := newStageEnv(t, Config{MaxConcurrency: 4}, map[string]int{
		"a.bam": 24 * mib, "b.bam": 20 * mib, "c.bam": 24*mib + 5, "c.bam.bai": mib + 3, "tiny.txt": 100,
	})
	s := e.cache.Stage(e.inputs("a.bam", "b.bam", "c.bam", "c.bam.bai", "tiny.txt"), StageOptions{})
	waitStage(t, s)
	st := s.Stop()
	var total int64
	for k, ref := range e.refs {
		total += ref.Size
		if got := e.cache.Cached(ref); got != ref.Size {
			t.Errorf("%s: %d of %d bytes cached", k, got, ref.Size)
		}
	}
	if st.Inputs != 5 || st.Staged != 5 || st.StagedBytes != total || st.HitBytes != 0 || st.WastedBytes != total {
		t.Errorf("stats %+v, want 5 staged, %d bytes, all wasted (nothing read)", st, total)
	}
	// The early inputs were fetched before any large one; the large ones
	// one after the other, in order.
	first, last := map[string]int{}, map[string]int{}
	for i, g := range e.store.log() {
		k := g[:strings.IndexByte(g, '@')]
		if _, ok := first[k]; !ok {
			first[k] = i
		}
		last[k] = i
	}
	for _, early := range []string{"c.bam.bai", "tiny.txt"} {
		if first[early] > first["a.bam"] {
			t.Errorf("%s fetched after a.bam started: %v", early, e.store.log())
		}
	}
	if !(last["a.bam"] < first["b.bam"] && last["b.bam"] < first["c.bam"]) {
		t.Errorf("large inputs not staged one after the other in order: %v", e.store.log())
	}
}

func TestStageCachedCostsNothing(t *testing.T) {
	e := newStageEnv(t, Config{}, map[string]int{"ref.fa": 9<<20 + 1})
	if err := e.cache.Prefetch(context.Background(), e.refs["ref.fa"], nil); err != nil {
		t.Fatal(err)
	}
	before := len(e.store.log())
	s := e.cache.Stage(e.inputs("ref.fa", "ref.fa"), StageOptions{})
	waitStage(t, s)
	e.readAll("ref.fa")
	st := s.Stop()
	if n := len(e.store.log()) - before; n != 0 {
		t.Errorf("%d GETs for a cached input", n)
	}
	want := StageStats{Inputs: 1, Cached: 1, CachedBytes: 9<<20 + 1, Done: true}
	if st.Finished.IsZero() {
		t.Error("Finished not set")
	}
	if st.Finished = (time.Time{}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestStageHitsAndWaste(t *testing.T) {
	e := newStageEnv(t, Config{}, map[string]int{"read.bam": 24 << 20, "half.bam": 10 << 20, "unread.bam": 8 << 20})
	s := e.cache.Stage(e.inputs("read.bam", "half.bam", "unread.bam"), StageOptions{})
	waitStage(t, s)
	e.readAll("read.bam")
	r := e.cache.Open(e.refs["half.bam"])
	for off := int64(0); off < 5<<20; off += 256 << 10 { // 5 MiB in 256 KiB reads
		e.read(r, "half.bam", off, 256<<10)
	}
	r.Close()
	// A read that fetched a staged block again (it was evicted) is no hit
	// and leaves it wasted; one that waited for the fetch staging ran is
	// no hit either, but the block was read.
	e.cache.stageRead(e.refs["unread.bam"], 7<<20, 4096, waitFetched)
	e.cache.stageRead(e.refs["unread.bam"], 6<<20, 4096, waitJoined)
	st := s.Stop()
	if st.StagedBytes != 42<<20 || st.HitBytes != 29<<20 || st.WastedBytes != 12<<20 {
		t.Errorf("staged %d, hits %d, wasted %d; want 42, 29, 12 MiB", st.StagedBytes>>20, st.HitBytes>>20, st.WastedBytes>>20)
	}
	// Reads after Stop are not counted; Stop again returns the same.
	e.readAll("unread.bam")
	if again := s.Stop(); again != st {
		t.Errorf("second Stop %+v, first %+v", again, st)
	}
}

// TestStageBudget: staged bytes the task has not read stay within the
// budget; staging goes on as the task reads.
func TestStageBudget(t *testing.T) {
	const mib = 1 << 20
	e := newStageEnv(t, Config{MaxBytes: 64 * mib}, map[string]int{"a": 24 * mib, "b": 24 * mib, "c": 24 * mib})
	s := e.cache.Stage(e.inputs("a", "b", "c"), StageOptions{})
	check := func(when string) {
		t.Helper()
		s.mu.Lock()
		pending, budget := s.st.StagedBytes-s.used, s.opts.Budget
		s.mu.Unlock()
		if budget != 32*mib || pending > budget {
			t.Errorf("%s: %d MiB staged and not read, budget %d MiB", when, pending>>20, budget>>20)
		}
	}
	until(t, "staging to pause for budget", s.pausedForBudget)
	check("paused")
	if st := s.Stats(); st.Done || st.StagedBytes >= 72*mib {
		t.Fatalf("staging did not pause: %+v", st)
	}
	e.readAll("a")
	check("after reading a")
	e.readAll("b")
	waitStage(t, s)
	check("done")
	e.readAll("c")
	st := s.Stop()
	// b may have been staged whole, or stopped once the reads of b
	// overtook it; a and c are staged whole either way.
	if st.Staged+st.Stopped != 3 || st.Staged < 2 || st.WastedBytes != 0 || st.HitBytes != st.StagedBytes || st.StagedBytes < 48*mib {
		t.Errorf("stats %+v, want a and c staged, b staged or stopped, all read", st)
	}
}

// TestStageReadJoinsStaging: a read that waits for the fetch staging has
// running uses the staged bytes: no hit, but not wasted either.
func TestStageReadJoinsStaging(t *testing.T) {
	const mib = 1 << 20
	e := newStageEnv(t, Config{}, map[string]int{"x": 4 * mib})
	e.store.gates["x"] = 0 // staging's GET of x waits for release
	s := e.cache.Stage(e.inputs("x"), StageOptions{})
	until(t, "staging to request x", func() bool { return len(e.store.log()) == 1 })
	done := make(chan struct{})
	go func() { // owned by this test: it ends when the read returns
		defer close(done)
		e.readAll("x")
	}()
	until(t, "the read to wait for staging's fetch", func() bool {
		e.cache.mu.Lock()
		defer e.cache.mu.Unlock()
		for _, fl := range e.cache.inflight {
			if fl.waiters > 0 {
				return true
			}
		}
		return false
	})
	close(e.store.release)
	<-done
	waitStage(t, s)
	st := s.Stop()
	if n := len(e.store.log()); n != 1 {
		t.Errorf("%d GETs, want staging's one", n)
	}
	if st.WastedBytes != 0 || st.HitBytes > st.StagedBytes {
		t.Errorf("stats %+v: want nothing wasted", st)
	}
}

// TestStageStopsWhenReadPast: once the task reads an input sequentially
// past the staged point, its staging stops and the next input starts.
func TestStageStopsWhenReadPast(t *testing.T) {
	const mib = 1 << 20
	e := newStageEnv(t, Config{MaxConcurrency: 8}, map[string]int{"big": 64 * mib, "next": 16 * mib})
	e.store.gates["big"] = 16 * mib // staging of big cannot get past 16 MiB
	s := e.cache.Stage(e.inputs("big", "next"), StageOptions{})
	f := s.files[keyOf(e.refs["big"])]
	cursor := func() int64 { s.mu.Lock(); defer s.mu.Unlock(); return f.cursor }
	until(t, "big to be staged up to the gate", func() bool { return cursor() == 16*mib })
	// A header read and random reads far ahead do not stop it...
	e.cache.stageRead(e.refs["big"], 0, 64<<10, waitNone)
	for _, off := range []int64{40, 17, 63, 30} {
		e.cache.stageRead(e.refs["big"], off*mib, 4096, waitFetched)
	}
	if st := s.Stats(); st.Stopped != 0 {
		t.Fatalf("random reads stopped staging: %+v", st)
	}
	// ... a stream passing the staged point does.
	for off := int64(0); off < 32*mib; off += mib {
		w := waitNone
		if off >= 16*mib {
			w = waitFetched
		}
		e.cache.stageRead(e.refs["big"], off, mib, w)
	}
	waitStage(t, s)
	st := s.Stop()
	if st.Stopped != 1 || st.Staged != 1 || e.cache.Cached(e.refs["next"]) != 16*mib {
		t.Errorf("stats %+v: want big stopped, next staged", st)
	}
	if st.StagedBytes != 32*mib || st.HitBytes != 16*mib {
		t.Errorf("staged %d MiB, hits %d MiB; want 32 and 16", st.StagedBytes>>20, st.HitBytes>>20)
	}
}

// TestStageFailures: inputs that are missing, denied or changed are
// skipped with a log line; the others are staged.
func TestStageFailures(t *testing.T) {
	e := newStageEnv(t, Config{}, map[string]int{"ok": 3 << 20, "denied": 1 << 20, "changed": 2 << 20})
	e.store.deny["denied"] = true
	missing := e.refs["ok"]
	missing.Key = "missing"
	changed := e.refs["changed"]
	changed.Version = "an-old-version"
	var logs bytes.Buffer
	in := []StageInput{{Ref: missing, Early: true}, {Ref: e.refs["denied"]}, {Ref: changed}, {Ref: e.refs["ok"]}}
	s := e.cache.Stage(in, StageOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitStage(t, s)
	st := s.Stop()
	if st.Failed != 3 || st.Staged != 1 || st.StagedBytes != 3<<20 {
		t.Errorf("stats %+v, want 3 failed and ok staged", st)
	}
	for _, want := range []string{"missing", "not found", "denied", "permission denied", "changed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "\n"); n != 3 {
		t.Errorf("%d log lines, want one per failed input:\n%s", n, logs.String())
	}
}

// TestStageStopMidway: Stop ends staging held up by a slow store at once.
func TestStageStopMidway(t *testing.T) {
	e := newStageEnv(t, Config{}, map[string]int{"slow": 32 << 20, "never": 8 << 20})
	e.store.gates["slow"] = 8 << 20
	s := e.cache.Stage(e.inputs("slow", "never"), StageOptions{})
	until(t, "8 MiB staged", func() bool { return s.Stats().StagedBytes == 8<<20 })
	done := make(chan StageStats)
	go func() { done <- s.Stop() }()
	select {
	case st := <-done:
		if !st.Done || st.WastedBytes != 8<<20 || st.Staged != 0 || st.Failed != 0 {
			t.Errorf("stats %+v", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Stop blocked on a held fetch")
	}
	if p := e.cache.stagers.Load(); p != nil {
		t.Errorf("%d stagers still registered", len(*p))
	}
}

// TestStageParallel: Early inputs (small files, a directory's objects)
// are fetched side by side with the parallelism of the fetch workers
// (the download budget), not a few at a time.
func TestStageParallel(t *testing.T) {
	const workers, n = 12, 30
	sizes := map[string]int{}
	var keys []string
	for i := range n {
		k := fmt.Sprintf("dir/f%02d", i)
		sizes[k] = 3000
		keys = append(keys, k)
	}
	e := newStageEnv(t, Config{MaxConcurrency: workers}, sizes)
	for _, k := range keys {
		e.store.gates[k] = 0 // every GET waits for the release
	}
	s := e.cache.Stage(e.inputs(keys...), StageOptions{})
	until(t, fmt.Sprintf("%d GETs at once", workers), func() bool { return len(e.store.log()) >= workers })
	close(e.store.release)
	waitStage(t, s)
	if st := s.Stop(); st.Staged != n {
		t.Errorf("stats %+v, want %d staged", st, n)
	}
}
