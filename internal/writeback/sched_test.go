package writeback

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestSchedLimits(t *testing.T) {
	tests := []struct {
		name         string
		fgLimit      int
		busy, hurry  bool
		heavy, light int // in flight wanted
	}{
		{name: "quiet: each class to its limit", fgLimit: 2, heavy: 3, light: 5},
		{name: "busy: fgLimit in flight, one heavy", fgLimit: 2, busy: true, heavy: 1, light: 1},
		{name: "busy: fgLimit 4", fgLimit: 4, busy: true, heavy: 1, light: 3},
		{name: "busy: fgLimit 8, a quarter heavy", fgLimit: 8, busy: true, heavy: 2, light: 5},
		{name: "busy: fgLimit 1", fgLimit: 1, busy: true, heavy: 1, light: 0},
		{name: "busy but a Sync waits: full limits", fgLimit: 2, busy: true, hurry: true, heavy: 3, light: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newSchedTest(t, tc.fgLimit, 3, 5)
			if tc.busy {
				st.busy()
			}
			if tc.hurry {
				defer st.s.hurry(true)()
			}
			var rs []*req
			for range 8 {
				rs = append(rs, st.acquire(st.ctx, classHeavy))
			}
			if tc.busy && !tc.hurry {
				st.wantInflight(rs, 0, 0) // heavy ones wait heavyBusyWait
				st.age()
			}
			for range 8 {
				rs = append(rs, st.acquire(st.ctx, classLight))
			}
			st.wantInflight(rs, tc.heavy, tc.light)
		})
	}
}

// TestSchedHeavyWaitsWhileBusy: while the foreground is busy, a heavy
// request starts only once it waited heavyBusyWait; light ones pass it.
func TestSchedHeavyWaitsWhileBusy(t *testing.T) {
	st := newSchedTest(t, 2, 4, 8)
	st.busy()
	heavy := st.acquire(st.ctx, classHeavy)
	light := st.acquire(st.ctx, classLight)
	st.wantInflight([]*req{heavy, light}, 0, 1)
	for range 4 { // 400 ms, busy all along
		st.busyFor(heavyBusyWait / 5)
	}
	st.wantInflight([]*req{heavy, light}, 0, 1)
	st.busyFor(heavyBusyWait / 5)
	st.wantInflight([]*req{heavy, light}, 1, 1)
}

// TestSchedQuietLiftsLimit: once the foreground is quiet, every waiter
// held back by it starts up to the class limits; as soon as the
// foreground is busy again, new requests wait again.
func TestSchedQuietLiftsLimit(t *testing.T) {
	st := newSchedTest(t, 2, 4, 8)
	st.busy()
	var rs []*req
	for range 6 {
		rs = append(rs, st.acquire(st.ctx, classLight))
	}
	st.wantInflight(rs, 0, 2)
	st.quiet()
	st.wantInflight(rs, 0, 6)
	st.busy()
	more := st.acquire(st.ctx, classLight)
	if more.admitted(t) {
		t.Fatal("a request started while the foreground is busy and 6 are in flight")
	}
	for range 5 {
		st.s.release(classLight)
	}
	waitFor(t, "the request to start with 1 in flight", func() bool { return more.admitted(t) })
}

// TestSchedHurry: a Sync or Drain waiting lifts the foreground limit, and
// the limit comes back when it is done.
func TestSchedHurry(t *testing.T) {
	st := newSchedTest(t, 2, 4, 8)
	st.busy()
	var rs []*req
	for range 4 {
		rs = append(rs, st.acquire(st.ctx, classLight))
	}
	st.wantInflight(rs, 0, 2)
	done := st.s.hurry(false)
	st.wantInflight(rs, 0, 4)
	done()
	done() // idempotent
	more := st.acquire(st.ctx, classLight)
	if more.admitted(t) {
		t.Fatal("the limit did not come back after the hurry")
	}
}

// TestSchedTrickle: while the foreground stays busy, requests keep
// starting as others end, each class in arrival order, until all did.
func TestSchedTrickle(t *testing.T) {
	st := newSchedTest(t, 2, 4, 8)
	st.busy()
	classes := []int{classHeavy, classHeavy, classLight, classHeavy, classLight, classLight, classHeavy}
	var rs []*req
	for _, c := range classes {
		rs = append(rs, st.acquire(st.ctx, c))
	}
	st.age()
	var order []int // of admission
	seen := map[int]bool{}
	collect := func() {
		st.s.mu.Lock()
		want := len(rs) - st.s.queued
		st.s.mu.Unlock()
		waitFor(t, "the admitted requests", func() bool {
			n := 0
			for _, r := range rs {
				if r.admitted(t) {
					n++
				}
			}
			return n == want
		})
		for i, r := range rs {
			if !seen[i] && r.admitted(t) {
				seen[i] = true
				order = append(order, i)
			}
		}
	}
	collect()
	for done := 0; done < len(order); done++ {
		if h, l := st.inflight(); h > 1 || h+l > 2 {
			t.Fatalf("%d heavy and %d light in flight while busy", h, l)
		}
		st.busyFor(testQuiet / 4)
		st.s.release(classes[order[done]])
		collect()
	}
	if len(order) != len(rs) {
		t.Fatalf("admitted %v, want all %d", order, len(rs))
	}
	last := map[int]int{classHeavy: -1, classLight: -1}
	for _, i := range order {
		if i < last[classes[i]] {
			t.Fatalf("admission order %v: not in arrival order within a class", order)
		}
		last[classes[i]] = i
	}
}

// TestSchedStartersBounded: while the foreground is busy, attempts start
// only while few requests wait, so their preparation is not spent in the
// task's time; when it is quiet, all start.
func TestSchedStartersBounded(t *testing.T) {
	st := newSchedTest(t, 2, 4, 8)
	st.busy()
	type start struct {
		tk  *ticket
		err error
	}
	got := make(chan start, 10)
	for range 10 {
		go func() {
			tk, err := st.s.start(st.ctx)
			got <- start{tk, err}
		}()
	}
	waitFor(t, "the attempts to arrive", func() bool { return st.arrivals() == 10 })
	var tks []*ticket
	recv := func() {
		s := <-got
		if s.err != nil {
			t.Fatal(s.err)
		}
		tks = append(tks, s.tk)
	}
	recv()
	recv()
	select {
	case <-got:
		t.Fatal("a third attempt started while two have not asked for a slot yet")
	case <-time.After(20 * time.Millisecond):
	}
	// The first attempt asks for its slot: it is admitted (nothing in
	// flight), so the queue is empty and one more attempt may start.
	r := st.acquire(withTicket(st.ctx, tks[0]), classLight)
	waitFor(t, "the first request", func() bool { return r.admitted(t) })
	recv()
	tks[1].done() // the second attempt ends without a request
	recv()
	st.quiet()
	for range 6 {
		recv()
	}
	for _, tk := range tks {
		tk.done()
	}
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	if st.s.tickets != 0 || st.s.starters.Len() != 0 {
		t.Fatalf("%d tickets, %d attempts waiting; want none", st.s.tickets, st.s.starters.Len())
	}
}

// TestSchedStarterNotStarved: a stream of new heavy requests (the parts of
// a file being written) does not hold back an attempt that arrived before
// them; its first request takes its place in the queue from the attempt's
// arrival.
func TestSchedStarterNotStarved(t *testing.T) {
	st := newSchedTest(t, 2, 4, 8)
	st.busy()
	var parts []*req
	for range 4 {
		parts = append(parts, st.acquire(st.ctx, classHeavy))
	}
	st.age()
	st.wantInflight(parts, 1, 0)
	started := make(chan *ticket, 1)
	go func() {
		tk, err := st.s.start(st.ctx)
		if err != nil {
			t.Error(err)
		}
		started <- tk
	}()
	waitFor(t, "the attempt to arrive", func() bool { return st.arrivals() == 5 })
	for range 3 {
		parts = append(parts, st.acquire(st.ctx, classHeavy))
	}
	// Parts 0..3 arrived before the attempt: they go first.
	for i := 1; i <= 3; i++ {
		select {
		case <-started:
			t.Fatalf("the attempt started before part %d", i)
		default:
		}
		st.busy()
		st.s.release(classHeavy)
		waitFor(t, "the next part", func() bool { return parts[i].admitted(t) })
	}
	var tk *ticket
	select {
	case tk = <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt did not start once the parts older than it were admitted")
	}
	r := st.acquire(withTicket(st.ctx, tk), classHeavy)
	st.busyFor(heavyBusyWait) // the attempt's request and parts 4..6 are old enough
	st.s.release(classHeavy)
	waitFor(t, "the attempt's request", func() bool { return r.admitted(t) })
	if parts[4].admitted(t) {
		t.Fatal("a part that arrived after the attempt started before its request")
	}
}

// TestSchedCancel: a waiter whose context ends leaves the queue without
// holding anyone back; a slot admitted as the context ended is returned.
func TestSchedCancel(t *testing.T) {
	st := newSchedTest(t, 1, 4, 8)
	st.busy()
	first := st.acquire(st.ctx, classLight)
	ctx, cancel := context.WithCancel(st.ctx)
	gone := st.acquire(ctx, classLight)
	third := st.acquire(st.ctx, classLight)
	cancel()
	waitFor(t, "the cancelled request to fail", func() bool {
		select {
		case err := <-gone.got:
			if err == nil {
				t.Fatal("acquire succeeded after its context ended")
			}
			return true
		default:
			return false
		}
	})
	if !first.admitted(t) {
		t.Fatal("first request not admitted")
	}
	st.s.release(classLight)
	waitFor(t, "the third request", func() bool { return third.admitted(t) })
	st.s.release(classLight)
	if h, l := st.inflight(); h != 0 || l != 0 {
		t.Fatalf("in flight after all released: %d heavy, %d light", h, l)
	}
	if _, err := st.s.start(ctx); err == nil {
		t.Fatal("start succeeded with a context that ended")
	}
}

// TestSchedTimer: with the real clock, waiters held back by a busy
// foreground start by themselves once it has been quiet for the window.
func TestSchedTimer(t *testing.T) {
	s := newSched(testQuiet, 1, 4, 8)
	t.Cleanup(s.stop)
	for range fgBurst {
		s.foreground()
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Go(func() {
			if err := s.acquire(t.Context(), classLight); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d < testQuiet/2 {
		t.Errorf("4 requests started in %v with the foreground busy", d)
	}
}

// TestSchedHeavyRamp: once the foreground is quiet, light requests start
// up to their limit at once, heavy ones double every heavyRamp (a task
// pausing a moment does not find every large part started).
func TestSchedHeavyRamp(t *testing.T) {
	st := newSchedTest(t, 2, 16, 8)
	st.busy()
	var heavy, light []*req
	for range 20 {
		heavy = append(heavy, st.acquire(st.ctx, classHeavy))
	}
	for range 6 {
		light = append(light, st.acquire(st.ctx, classLight))
	}
	st.wantInflight(append(heavy, light...), 0, 2)
	st.clock.add(testQuiet + time.Millisecond) // quiet for 1ms
	steps := []struct {
		after time.Duration
		heavy int
	}{
		{0, 2},
		{heavyRamp, 4},
		{heavyRamp, 8},
		{heavyRamp / 2, 8},
		{heavyRamp / 2, 16},
	}
	for _, s := range steps {
		st.clock.add(s.after)
		st.s.mu.Lock()
		st.s.dispatchLocked()
		st.s.mu.Unlock()
		st.wantInflight(append(heavy, light...), s.heavy, 6)
	}
}
