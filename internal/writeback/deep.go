package writeback

import (
	"sync/atomic"
	"time"
)

// deepLinger: how long a deep-call worker waits for the next call before
// it ends.
const deepLinger = 2 * time.Second

// deepPool runs calls that need a deep stack on long-lived workers (see
// Manager.deep). The workers are goroutines of the manager (goFn).
type deepPool struct {
	work chan deepCall // unbuffered: from a caller to the worker it claimed
	// idle: workers waiting for a call that no caller claimed yet. A caller
	// claims one (CAS, never below 0) before it sends, so a claimed worker
	// never ends before it received the call: a worker ends only once it
	// claimed an idle slot back itself.
	idle atomic.Int32
	live atomic.Int32 // workers running (tests)
}

type deepCall struct {
	fn   func()
	done chan struct{}
}

// claim takes an idle worker slot; false if there is none.
func (p *deepPool) claim() bool {
	for {
		n := p.idle.Load()
		if n <= 0 {
			return false
		}
		if p.idle.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// deep runs fn, which needs a deep stack (a request through a store's SDK
// passes through dozens of middleware frames), on a long-lived worker
// goroutine of the manager, and waits for it. Each file's upload loop is a
// goroutine of its own; one that made the request itself grew its stack
// from a few KiB to 64 KiB, copying it (and adjusting every frame) at each
// doubling: that took 12% of ferry's CPU while 1,000 small files
// uploaded. A worker keeps its grown stack from one call to the next.
//
// An idle worker takes fn; otherwise a new worker starts (there are as
// many workers as calls in flight: a call never waits for another one).
// Workers end after deepLinger without a call, or once the manager
// closes. After Close, fn runs on the caller's goroutine.
func (m *Manager) deep(fn func()) {
	c := deepCall{fn: fn, done: make(chan struct{})}
	p := &m.deepPool
	switch {
	case p.claim():
		p.work <- c
	case !m.goFn(func() { m.deepWorker(c) }):
		fn()
		return
	}
	<-c.done
}

// deepWorker runs c, then the calls that deep hands it, until it was idle
// for deepLinger or the manager closes.
func (m *Manager) deepWorker(c deepCall) {
	p := &m.deepPool
	p.live.Add(1)
	defer p.live.Add(-1)
	linger := time.NewTimer(deepLinger)
	defer linger.Stop()
	for {
		c.fn()
		linger.Reset(deepLinger)
		p.idle.Add(1) // before the caller returns: its next call finds this worker
		close(c.done)
		select {
		case c = <-p.work:
			continue
		case <-linger.C:
		case <-m.ctx.Done():
		}
		if p.claim() {
			return // no caller counts on an idle worker now
		}
		c = <-p.work // a caller claimed this worker (or another, still busy one)
	}
}
