package writeback

import (
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestOpenSpares: no spare is made before the first Create; then
// prefill holds up to openSpares spares open, Create
// takes an open one (no open(2) on its path), and once fewer than half
// are open while closed spares are left, prefill opens more in the
// background without making new files.
func TestOpenSpares(t *testing.T) {
	e := newEnv(t)
	// No upload ends, so no data file is recycled.
	g := e.gate(func(op, key string) bool { return op == faulty.OpPut })
	e.setFaults(faulty.Config{Stall: g.stall})
	cfg := e.config()
	cfg.SpareFiles = 200
	m := e.open(cfg)
	counts := func() (ready, all int) {
		m.spareMu.Lock()
		defer m.spareMu.Unlock()
		return len(m.ready), m.spareCountLocked()
	}
	if _, n := counts(); n != 0 {
		t.Fatalf("%d spares before any Create, want none", n)
	}
	if _, err := m.Create(Target{Scheme: "s3", Bucket: "bkt", Key: "first"}, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the spares", func() bool { r, n := counts(); return r == openSpares && n == 199 }) // and the staged "first"

	m.spareMu.Lock()
	top := m.ready[len(m.ready)-1]
	m.spareMu.Unlock()
	f, err := m.Create(Target{Scheme: "s3", Bucket: "bkt", Key: "one"}, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if f.id != top.id || f.fd != top.fd {
		t.Errorf("Create staged in %s, want the open spare %s", f.id, top.id)
	}
	if r, _ := counts(); r != openSpares-1 {
		t.Errorf("%d spares open after one Create, want %d", r, openSpares-1)
	}

	// 40 more: fewer than half left open, so the Creates start prefill,
	// which opens closed spares (Creates after it ended may take some
	// again: at least half stay open); none is made (158 spares and 42
	// staged files).
	writeSmall(t, m, "f", 40)
	waitFor(t, "the spares opened again", func() bool { r, n := counts(); return r >= openSpares/2 && n == 158 })
	m.refill() // tops up the open ones
	waitFor(t, "all open spares", func() bool { r, n := counts(); return r == openSpares && n == 158 })
	waitFor(t, "prefill to end", func() bool {
		m.spareMu.Lock()
		defer m.spareMu.Unlock()
		return !m.refilling
	})
	if r, n := counts(); r != openSpares || n != 158 {
		t.Errorf("%d spares (%d open), want 158 (%d open)", n, r, openSpares)
	}
}
