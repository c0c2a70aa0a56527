package writeback

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// miniVFS drives a Manager the way internal/vfs does, for one worker whose
// keys no other worker touches, and keeps a model of what each key holds.
type miniVFS struct {
	t     *testing.T
	e     *env
	m     *Manager
	rng   *rand.Rand
	keys  []string
	model map[string][]byte // nil: absent
	modes map[string]uint32
}

func (v *miniVFS) open(key string, trunc bool) *File {
	t := tgt(key)
	if f := v.m.Get(t); f != nil {
		f.Acquire()
		if trunc {
			if err := f.Truncate(0); err != nil {
				v.t.Fatal(err)
			}
		}
		return f
	}
	// The old name of a renamed file is hidden. PendingDelete is asked
	// before the stat: a delete completing in between then shows as a
	// missing object, never as a stale one.
	hidden := v.m.PendingDelete(t)
	info, err := v.e.mem.Stat(context.Background(), key)
	if hidden {
		err = objstore.ErrNotFound
	}
	var f *File
	if err != nil || trunc || info.Size == 0 {
		mode := uint32(0o644)
		if err == nil {
			mode = v.modes[key]
		}
		f, err = v.m.Create(t, mode)
	} else {
		f, err = v.m.OpenBase(context.Background(), t, info)
		if errors.Is(err, syscall.ENOENT) { // it was a stray being deleted
			f, err = v.m.Create(t, 0o644)
		}
	}
	if err != nil {
		v.t.Fatalf("open %s: %v", key, err)
	}
	f.Acquire()
	return f
}

func (v *miniVFS) write(key string, trunc bool) {
	f := v.open(key, trunc)
	data := v.model[key]
	if data == nil {
		v.modes[key] = f.Mode()
	}
	if trunc || data == nil {
		data = []byte{}
	}
	for range 1 + v.rng.IntN(4) {
		off := v.rng.IntN(len(data) + testPart)
		if v.rng.IntN(3) == 0 {
			off = len(data) // append
		}
		p := pattern(1+v.rng.IntN(2*testPart), byte(v.rng.Uint32()))
		if _, err := f.WriteAt(p, int64(off)); err != nil {
			v.t.Fatal(err)
		}
		if end := off + len(p); end > len(data) {
			data = append(data, make([]byte, end-len(data))...)
		}
		copy(data[off:], p)
	}
	if v.rng.IntN(5) == 0 {
		n := v.rng.IntN(len(data) + 1)
		if err := f.Truncate(int64(n)); err != nil {
			v.t.Fatal(err)
		}
		data = data[:n]
	}
	v.model[key] = data
	v.trace("write %s trunc %v: %d bytes (file %s size %d)", key, trunc, len(data), f.id, f.Size())
	if err := f.Release(); err != nil {
		v.t.Fatal(err)
	}
}

func (v *miniVFS) remove(key string) {
	t := tgt(key)
	v.m.Remove(t)
	if err := v.m.Detach(context.Background(), t); err != nil {
		v.t.Fatal(err)
	}
	v.e.mem.Delete(context.Background(), key, objstore.DeleteOptions{})
	v.model[key] = nil
	delete(v.modes, key)
	v.trace("remove %s", key)
}

// trace logs one step; the log shows only when the test fails.
func (v *miniVFS) trace(format string, args ...any) {
	v.t.Logf("%s: "+format, append([]any{v.keys[0]}, args...)...)
}

func (v *miniVFS) rename(from, to string) {
	ctx := context.Background()
	f := v.m.Get(tgt(from))
	if f != nil {
		// A file that became durable meanwhile is no longer dirty: the
		// vfs then renames the clean object.
		if err := v.m.Rename(tgt(from), tgt(to)); errors.Is(err, syscall.ENOENT) {
			f = nil
		} else if err != nil {
			v.t.Fatal(err)
		}
	}
	v.trace("rename %s → %s (dirty %v)", from, to, f != nil)
	if f != nil {
		if !f.HasBase(from) {
			v.e.mem.Delete(ctx, from, objstore.DeleteOptions{})
		}
	} else {
		if v.m.Get(tgt(to)) != nil {
			v.m.Remove(tgt(to))
		}
		if err := v.m.Detach(ctx, tgt(to)); err != nil {
			v.t.Fatal(err)
		}
		if _, err := v.e.mem.Copy(ctx, from, to, objstore.CopyOptions{}); err != nil {
			v.t.Fatalf("copy %s → %s: %v", from, to, err)
		}
		if err := v.m.Detach(ctx, tgt(from)); err != nil {
			v.t.Fatal(err)
		}
		v.e.mem.Delete(ctx, from, objstore.DeleteOptions{})
	}
	v.model[to], v.model[from] = v.model[from], nil
	v.modes[to] = v.modes[from]
	delete(v.modes, from)
}

func (v *miniVFS) chmod(key string) {
	mode := uint32(0o600 + v.rng.IntN(0o100))
	f := v.open(key, false)
	v.trace("chmod %s %o (file %s)", key, mode, f.id)
	f.SetMode(mode)
	v.modes[key] = mode
	f.Release()
}

func (v *miniVFS) verify(key string) {
	want := v.model[key]
	if f := v.m.Get(tgt(key)); f != nil {
		buf := make([]byte, len(want)+10)
		n, err := f.ReadAt(context.Background(), buf, 0)
		if n != len(want) || (err != nil && err.Error() != "EOF") || !bytes.Equal(buf[:n], want) {
			v.t.Fatalf("read of dirty %s: %d bytes (%v), want %d; first difference at %d", key, n, err, len(want), firstDiff(buf[:n], want))
		}
		return
	}
	got, ok := v.e.object(key)
	if !ok || !bytes.Equal(got, want) {
		v.t.Fatalf("clean %s: %d bytes (present %v), want %d", key, len(got), ok, len(want))
	}
}

func (v *miniVFS) step() {
	var present []string
	for _, k := range v.keys {
		if v.model[k] != nil {
			present = append(present, k)
		}
	}
	pick := func(ks []string) string { return ks[v.rng.IntN(len(ks))] }
	op := v.rng.IntN(10)
	if len(present) == 0 {
		op = 0
	}

	switch op {
	case 0, 1, 2:
		v.write(pick(v.keys), false)
	case 3:
		v.write(pick(v.keys), true)
	case 4:
		v.remove(pick(present))
	case 5, 6:
		from, to := pick(present), pick(v.keys)
		if from != to {
			v.rename(from, to)
		}
	case 7:
		if f := v.m.Get(tgt(pick(present))); f != nil {
			v.trace("sync %s (file %s)", f.Target().Key, f.id)
			if err := f.Sync(context.Background()); err != nil && !errors.Is(err, faulty.ErrInjected) {
				v.t.Fatalf("Sync: %v", err)
			}
		}
	case 8:
		v.chmod(pick(present))
	case 9:
		v.verify(pick(present))
	}
}

// TestConcurrentStress runs workers that write, rewrite, rename, remove,
// chmod and fsync files through a store that fails and stalls requests
// at random, while uploads run; then drains and compares the bucket with
// the model. Run it with -race.
func TestConcurrentStress(t *testing.T) {
	for _, seed := range stressSeeds() {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { stress(t, seed, false) })
	}
}

// TestConcurrentStressCrash is TestConcurrentStress, except that at the
// end every new request to the store hangs and the manager is abandoned
// (as a SIGKILL leaves it); a new manager on the same directory must then
// make the bucket match the model.
func TestConcurrentStressCrash(t *testing.T) {
	for _, seed := range stressSeeds() {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) { stress(t, seed, true) })
	}
}

// hangWrites makes every request that changes the bucket hang.
func hangWrites() faulty.Config {
	return faulty.Config{Stall: func(op, key string) time.Duration {
		switch op {
		case faulty.OpStat, faulty.OpNewReader, faulty.OpRead, faulty.OpList:
			return 0
		}
		return faulty.Forever
	}}
}

// stressSeeds returns the seeds to run: two by default, more with
// -stress.seeds=N.
func stressSeeds() []uint64 {
	seeds := []uint64{1, 2}
	for i := uint64(3); i <= uint64(*stressRounds); i++ {
		seeds = append(seeds, i)
	}
	return seeds
}

var stressRounds = flag.Int("stress.seeds", 2, "seeds of TestConcurrentStress to run")

func stress(t *testing.T, seed uint64, crash bool) {
	e := newEnv(t)
	failing := map[string]float64{}
	for _, op := range []string{faulty.OpPut, faulty.OpUploadPart, faulty.OpCopyPart, faulty.OpComplete, faulty.OpCopy, faulty.OpCreateUpload, faulty.OpDelete} {
		failing[op] = 0.1
	}
	e.setFaults(faulty.Config{Seed: seed, FailRate: failing, StallRate: map[string]float64{faulty.AnyOp: 0.05}, StallFor: 2 * time.Millisecond})
	cfg := e.config()
	cfg.StreamAfter = 2 * testPart
	cfg.Concurrency = 3
	cfg.SmallConcurrency = 6
	resolve := func(context.Context, string, string) (objstore.Store, error) {
		return objstore.WithRetry(e.store(), objstore.RetryPolicy{Base: time.Millisecond, Max: 4 * time.Millisecond, MaxAttempts: 3}), nil
	}
	m, err := New(context.Background(), cfg, resolve)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close() }()
	const workers, steps = 6, 120
	vs := make([]*miniVFS, workers)
	var wg sync.WaitGroup
	for w := range workers {
		v := &miniVFS{t: t, e: e, m: m, rng: rand.New(rand.NewPCG(uint64(w), seed)), model: map[string][]byte{}, modes: map[string]uint32{}}
		for k := range 4 {
			v.keys = append(v.keys, "w"+strconv.Itoa(w)+"/k"+strconv.Itoa(k))
		}
		vs[w] = v
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range steps {
				v.step()
			}
		}()
	}
	wg.Wait()
	if crash {
		e.setFaults(hangWrites())
		time.Sleep(100 * time.Millisecond) // requests sent to the old store end
		m.Close()
		e.setFaults(faulty.Config{})
		if m, err = New(context.Background(), cfg, resolve); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, m)
	for _, v := range vs {
		for _, k := range v.keys {
			want := v.model[k]
			if want == nil {
				waitFor(t, "no object at "+k, func() bool { _, ok := e.object(k); return !ok })
				continue
			}
			e.wantObject(k, want)
			info, _ := e.mem.Stat(context.Background(), k)
			if got := info.Metadata[MetaMode]; got != fmt.Sprintf("%o", v.modes[k]&0o7777) {
				t.Errorf("%s: mode %q, want %o", k, got, v.modes[k])
			}
		}
	}
	waitFor(t, "no pending multipart upload", func() bool { return e.mem.PendingUploads() == 0 })
	assertStagingEmpty(t, m)
	st := m.Stats()
	t.Logf("stats %+v; injected put %d part %d complete %d", st, e.fs.Injected(faulty.OpPut), e.fs.Injected(faulty.OpUploadPart), e.fs.Injected(faulty.OpComplete))
}
