package writeback

import (
	"syscall"
	"testing"
	"time"
)

// newNodeSchedTest is newSchedTest with the sched on the node page under
// dir and on clock (shared by the scheds of one test; it starts at the
// wall clock's now, as the page holds wall-clock times).
func newNodeSchedTest(t *testing.T, dir string, clock *fakeClock, fgLimit, heavy, light int) *schedTest {
	t.Helper()
	s := newSched(testQuiet, fgLimit, heavy, light)
	s.clock, s.epoch = clock.now, clock.now()
	if s.node = openNodeFG(dir); s.node == nil || s.node.own.Load() < 0 {
		t.Fatal("no node page, or no slot in it")
	}
	t.Cleanup(s.stop)
	return &schedTest{t: t, s: s, clock: clock, ctx: t.Context()}
}

// TestNodeForeground: while another Manager's task on the node is busy,
// uploads keep within the foreground's limits (a Drain too; a Sync lifts
// them), and run free once it is quiet.
func TestNodeForeground(t *testing.T) {
	tests := []struct {
		name  string
		hurry int // 0 none, 1 Drain, 2 Sync
		light int // light requests in flight while the other task is busy
	}{
		{name: "other task busy", light: 2},
		{name: "other task busy, a Drain waits", hurry: 1, light: 2},
		{name: "other task busy, a Sync waits", hurry: 2, light: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := &fakeClock{t: time.Now()}
			a := newNodeSchedTest(t, dir, clock, 2, 4, 8)
			b := newNodeSchedTest(t, dir, clock, 2, 4, 8)
			a.busy()
			if until := b.s.busyUntil(); until.IsZero() {
				t.Fatal("the other task's foreground is not seen")
			}
			if tc.hurry > 0 {
				defer b.s.hurry(tc.hurry == 2)()
			}
			var rs []*req
			for range 4 {
				rs = append(rs, b.acquire(b.ctx, classLight))
			}
			b.wantInflight(rs, 0, tc.light)
			b.quiet() // a's task too: the clock is one
			b.wantInflight(rs, 0, 4)
		})
	}
}

// TestNodeForegroundCountsOthers: while a task is busy, the other
// Managers' requests in flight count against the limit, and a request
// held back by them starts when they end.
func TestNodeForegroundCountsOthers(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: time.Now()}
	a := newNodeSchedTest(t, dir, clock, 2, 4, 8)
	b := newNodeSchedTest(t, dir, clock, 2, 4, 8)
	ra := []*req{a.acquire(a.ctx, classLight), a.acquire(a.ctx, classLight)}
	a.wantInflight(ra, 0, 2) // a's task is quiet
	b.busy()
	rb := b.acquire(b.ctx, classLight)
	b.wantInflight(nil, 0, 0)
	if rb.admitted(t) {
		t.Fatal("admitted beyond the node's limit")
	}
	a.s.release(classLight)
	waitFor(t, "the request held back by the other Manager's to start", func() bool { return rb.admitted(t) })
}

// TestNodeFGSlots: slots are owned while their Manager lives, taken again
// once it closes or dies, and a dead Manager's counts are cleared.
func TestNodeFGSlots(t *testing.T) {
	dir := t.TempDir()
	var ns []*nodeFG
	for range nodeSlots {
		n := openNodeFG(dir)
		if n == nil || n.own.Load() < 0 {
			t.Fatalf("slot %d: none", len(ns))
		}
		ns = append(ns, n)
	}
	extra := openNodeFG(dir)
	if extra.own.Load() >= 0 {
		t.Fatal("a slot beyond the page's")
	}
	ns[5].close()
	again := openNodeFG(dir)
	if got := again.own.Load(); got != 5 {
		t.Fatalf("reopened slot %d, want 5 (the closed one)", got)
	}
	ns[7].publishInflight(3, 1)
	if v := extra.others(time.Now()); v.total != 4 || v.heavy != 3 {
		t.Fatalf("others: %d heavy of %d; want 3 of 4", v.heavy, v.total)
	}
	// Slot 7's owner dies: the kernel drops its lock (with its mapping),
	// its counts stay.
	ns[7].lock(7, syscall.F_UNLCK)
	extra.reapAt.Store(0)    // the check above looked (the owner lived)
	extra.others(time.Now()) // reaps: the slot's quiet time is 0
	if v := extra.others(time.Now()); v.total != 0 {
		t.Fatalf("a dead Manager's %d requests still count", v.total)
	}
	// A live owner's counts are never reaped.
	ns[9].publishInflight(0, 2)
	extra.reapAt.Store(0)
	extra.others(time.Now())
	if v := extra.others(time.Now()); v.total != 2 {
		t.Fatalf("a live Manager's requests: %d, want 2", v.total)
	}
	for _, n := range append(ns, extra, again) {
		n.close()
	}
}

// TestNodeFGPeers: each Manager counts the others that hold a slot now,
// not itself, and not those that closed.
func TestNodeFGPeers(t *testing.T) {
	for _, tc := range []struct{ open, closed, want int }{
		{open: 1, want: 0},
		{open: 2, want: 1},
		{open: 8, want: 7},
		{open: 8, closed: 5, want: 2},
	} {
		dir := t.TempDir()
		var ns []*nodeFG
		for range tc.open {
			n := openNodeFG(dir)
			if n == nil || n.own.Load() < 0 {
				t.Fatal("no slot")
			}
			ns = append(ns, n)
		}
		for _, n := range ns[1 : 1+tc.closed] {
			n.close()
		}
		if got := ns[0].peers(); got != tc.want {
			t.Errorf("%d open, %d closed: %d peers, want %d", tc.open, tc.closed, got, tc.want)
		}
		for _, n := range ns {
			n.close()
		}
		if got := ns[0].peers(); got != 0 {
			t.Errorf("a closed page counts %d peers", got)
		}
	}
}
