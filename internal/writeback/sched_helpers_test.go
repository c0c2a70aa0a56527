package writeback

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// schedTest drives a sched on a fake clock.
type schedTest struct {
	t     *testing.T
	s     *sched
	clock *fakeClock
	ctx   context.Context
}

const testQuiet = 20 * time.Millisecond

func newSchedTest(t *testing.T, fgLimit, heavy, light int) *schedTest {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s := newSched(testQuiet, fgLimit, heavy, light)
	s.clock, s.epoch = clock.now, clock.now()
	t.Cleanup(s.stop)
	return &schedTest{t: t, s: s, clock: clock, ctx: t.Context()}
}

// busy makes the foreground active now.
func (st *schedTest) busy() {
	for range fgBurst {
		st.s.foreground()
	}
}

// age moves the clock past heavyBusyWait, the foreground still busy, and
// lets the scheduler see it (as its timer would).
func (st *schedTest) age() { st.busyFor(heavyBusyWait) }

// busyFor moves the clock by d, the foreground busy all along, and lets
// the scheduler see it (as its timer would). The move and the
// foreground's ops are one step under the scheduler's lock: its timer
// (real time) must not see the clock moved without the ops, which is a
// quiet foreground.
func (st *schedTest) busyFor(d time.Duration) {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	st.clock.add(d)
	st.busy()
	st.s.dispatchLocked()
}

// quiet moves the clock past the quiet window and lets the scheduler see
// it (as its timer would).
func (st *schedTest) quiet() {
	st.clock.add(2 * testQuiet)
	st.s.mu.Lock()
	st.s.dispatchLocked()
	st.s.mu.Unlock()
}

// req is a request waiting for (or holding) a slot.
type req struct {
	class int
	got   chan error
}

// acquire asks for a slot in the background; it is in the queue (or
// admitted) when acquire returns.
func (st *schedTest) acquire(ctx context.Context, class int) *req {
	st.t.Helper()
	r := &req{class: class, got: make(chan error, 1)}
	before := st.requests()
	go func() { r.got <- st.s.acquire(ctx, class) }()
	waitFor(st.t, "the request to arrive", func() bool { return st.requests() > before })
	return r
}

// requests counts the requests waiting or in flight.
func (st *schedTest) requests() int {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	return st.s.queued + st.s.inflight[classHeavy] + st.s.inflight[classLight]
}

// arrivals counts the requests and attempts that arrived so far.
func (st *schedTest) arrivals() uint64 {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	return st.s.seq
}

// admitted reports whether r got its slot (without waiting).
func (r *req) admitted(t *testing.T) bool {
	t.Helper()
	select {
	case err := <-r.got:
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		r.got <- nil // keep the answer for later calls
		return true
	default:
		return false
	}
}

// inflight returns the requests in flight per class.
func (st *schedTest) inflight() (heavy, light int) {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	return st.s.inflight[classHeavy], st.s.inflight[classLight]
}

// wantInflight checks the requests in flight, and waits until the
// admitted ones returned from acquire.
func (st *schedTest) wantInflight(rs []*req, heavy, light int) {
	st.t.Helper()
	if h, l := st.inflight(); h != heavy || l != light {
		st.t.Fatalf("in flight: %d heavy, %d light; want %d and %d", h, l, heavy, light)
	}
	waitFor(st.t, "the admitted requests to return", func() bool {
		h, l := 0, 0
		for _, r := range rs {
			if r.admitted(st.t) {
				if r.class == classHeavy {
					h++
				} else {
					l++
				}
			}
		}
		return h == heavy && l == light
	})
}
