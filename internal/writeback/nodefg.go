package writeback

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The node-wide foreground (README.md, "the task first"): every Manager
// that stages under one root (the ferries of one node sharing a cache
// directory, one per task) publishes in a shared page when its task's
// foreground turns quiet and how many requests it has in flight, so that
// uploads yield to every task on the node that writes, not only to their
// own: while any of them is busy, the node as a whole keeps within the
// foreground's limits, as one mount serving all the tasks would.
//
// The page is the file nodeFGName in the staging root, mapped shared. It
// holds nodeSlots slots of one cache line each; a Manager owns one by an
// open file description lock on the slot's bytes, which the kernel
// releases when the process dies, in whatever PID namespace it ran. A
// dead Manager's quiet time is soon in the past; its counts are cleared by
// whoever finds them stale and can take the slot's lock (reap).
const (
	nodeFGName   = "foreground"
	nodeSlots    = 128
	nodeSlotSize = 64
	slotQuiet    = 0  // int64: wall ns when the Manager's task turns quiet
	slotHeavy    = 8  // int32: heavy requests in flight
	slotLight    = 12 // int32: light requests in flight

	// nodePubEvery: a Manager publishes its quiet time at most this often
	// (foreground calls come at up to hundreds of thousands a second); the
	// value it publishes is late by as much, so it adds as much.
	nodePubEvery = 2 * time.Millisecond
	// nodePoll: a request held back only by other Managers' requests in
	// flight looks again this often (their releases do not wake it).
	nodePoll = 10 * time.Millisecond
	// nodeStale: counts of a slot whose task was quiet this long are
	// checked for a live owner (at most every nodeStale).
	nodeStale = time.Second
	// nodeFuture: a quiet time further ahead than this is not believed
	// (a clock step, or a damaged page).
	nodeFuture = time.Second
	// fOFDGetLK and fOFDSetLK are F_OFD_GETLK and F_OFD_SETLK (Linux
	// 3.15+); the syscall package lacks them.
	fOFDGetLK = 36
	fOFDSetLK = 37
)

// nodeFG is a Manager's view of the shared page. Its methods are safe for
// concurrent use; after close they do nothing.
type nodeFG struct {
	f      *os.File
	mem    []byte       // the page, mapped shared; never unmapped (see close)
	own    atomic.Int32 // own slot, -1: none (all taken, or closed)
	pubAt  atomic.Int64 // wall ns of the last publish of the quiet time
	reapAt atomic.Int64 // wall ns of the next check for stale counts
	closed atomic.Bool
}

// nodeView is one reading of the other Managers' slots.
type nodeView struct {
	quiet        time.Time // the latest quiet time of another task; zero: none
	heavy, total int       // their requests in flight
}

// openNodeFG maps the page under root and takes a slot. It returns nil
// when that cannot be done (the Manager then yields to its own task
// only).
func openNodeFG(root string) *nodeFG {
	f, err := os.OpenFile(filepath.Join(root, nodeFGName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil
	}
	size := int64(nodeSlots * nodeSlotSize)
	if st, err := f.Stat(); err != nil || (st.Size() < size && f.Truncate(size) != nil) {
		f.Close()
		return nil
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil
	}
	n := &nodeFG{f: f, mem: mem}
	n.own.Store(-1)
	for i := range nodeSlots {
		if n.lock(i, syscall.F_WRLCK) {
			n.clear(i)
			n.own.Store(int32(i))
			break
		}
	}
	return n
}

// lock takes (F_WRLCK) or releases (F_UNLCK) slot i's lock without
// waiting, and reports whether it could.
func (n *nodeFG) lock(i int, typ int16) bool {
	lk := syscall.Flock_t{Type: typ, Whence: 0, Start: int64(i * nodeSlotSize), Len: nodeSlotSize}
	return syscall.FcntlFlock(n.f.Fd(), fOFDSetLK, &lk) == nil
}

func (n *nodeFG) i64(i, off int) *int64 {
	return (*int64)(unsafe.Pointer(&n.mem[i*nodeSlotSize+off]))
}

func (n *nodeFG) i32(i, off int) *int32 {
	return (*int32)(unsafe.Pointer(&n.mem[i*nodeSlotSize+off]))
}

func (n *nodeFG) clear(i int) {
	atomic.StoreInt64(n.i64(i, slotQuiet), 0)
	atomic.StoreInt32(n.i32(i, slotHeavy), 0)
	atomic.StoreInt32(n.i32(i, slotLight), 0)
}

// publishQuiet publishes when the task turns quiet, unless it did so
// less than nodePubEvery before now.
func (n *nodeFG) publishQuiet(now time.Time, quiet func() (time.Time, bool)) {
	i := n.own.Load()
	if i < 0 {
		return
	}
	ns, last := now.UnixNano(), n.pubAt.Load()
	if ns-last < int64(nodePubEvery) && ns >= last {
		return
	}
	q, ok := quiet()
	if !ok || !n.pubAt.CompareAndSwap(last, ns) {
		return // never busy yet (the ring is not full), or another call publishes
	}
	atomic.StoreInt64(n.i64(int(i), slotQuiet), q.Add(nodePubEvery).UnixNano())
}

// publishInflight publishes the requests in flight.
func (n *nodeFG) publishInflight(heavy, light int) {
	if i := n.own.Load(); i >= 0 {
		atomic.StoreInt32(n.i32(int(i), slotHeavy), int32(heavy))
		atomic.StoreInt32(n.i32(int(i), slotLight), int32(light))
	}
}

// others reads the other Managers' slots as of now.
func (n *nodeFG) others(now time.Time) nodeView {
	var v nodeView
	if n.closed.Load() {
		return v
	}
	own := int(n.own.Load())
	ns := now.UnixNano()
	var latest int64
	reap := false
	for i := range nodeSlots {
		if i == own {
			continue
		}
		q := atomic.LoadInt64(n.i64(i, slotQuiet))
		if q > latest && q < ns+int64(nodeFuture) {
			latest = q
		}
		h := max(atomic.LoadInt32(n.i32(i, slotHeavy)), 0)
		l := max(atomic.LoadInt32(n.i32(i, slotLight)), 0)
		if h+l > 0 && q < ns-int64(nodeStale) {
			reap = true
		}
		v.heavy += int(h)
		v.total += int(h + l)
	}
	if latest > 0 {
		v.quiet = time.Unix(0, latest)
	}
	if reap {
		n.reap(ns, own)
	}
	return v
}

// peers counts the slots other Managers hold now: the live processes
// staging under the same root, whatever their tasks are doing.
func (n *nodeFG) peers() int {
	if n.closed.Load() {
		return 0
	}
	own := int(n.own.Load())
	c := 0
	for i := range nodeSlots {
		if i == own {
			continue
		}
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(i * nodeSlotSize), Len: nodeSlotSize}
		if syscall.FcntlFlock(n.f.Fd(), fOFDGetLK, &lk) == nil && lk.Type != syscall.F_UNLCK {
			c++
		}
	}
	return c
}

// reap clears the counts of slots whose owner died (their lock can be
// taken), at most every nodeStale.
func (n *nodeFG) reap(ns int64, own int) {
	at := n.reapAt.Load()
	if ns < at || !n.reapAt.CompareAndSwap(at, ns+int64(nodeStale)) {
		return
	}
	for i := range nodeSlots {
		if i == own || atomic.LoadInt32(n.i32(i, slotHeavy))+atomic.LoadInt32(n.i32(i, slotLight)) == 0 {
			continue
		}
		if n.lock(i, syscall.F_WRLCK) {
			n.clear(i)
			n.lock(i, syscall.F_UNLCK)
		}
	}
}

// close gives up the slot (clearing it and dropping its lock) and closes
// the file. The mapping stays (a few KiB), so that a call racing close
// never touches unmapped memory.
func (n *nodeFG) close() {
	if n.closed.Swap(true) {
		return
	}
	i := n.own.Swap(-1)
	if i >= 0 {
		n.clear(int(i))
		n.lock(int(i), syscall.F_UNLCK) // the mapping holds the file open
	}
	n.f.Close()
}

// busyUntilFor is busyUntil with the Sync and Drain calls waiting: a
// Sync lifts every limit (the task waits on it); a Drain only its own
// task's (the task has ended: the node's other tasks still come first).
func (v fgView) busyUntilFor(hurries, syncs int) time.Time {
	switch {
	case hurries == 0:
		return v.busyUntil()
	case syncs > 0 || !v.now.Before(v.node.quiet):
		return time.Time{}
	}
	return v.node.quiet
}

// publishLocked publishes the requests in flight to the node. Caller
// holds mu.
func (s *sched) publishLocked() {
	if s.node != nil {
		s.node.publishInflight(s.inflight[classHeavy], s.inflight[classLight])
	}
}
