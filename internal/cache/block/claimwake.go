package block

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"syscall"
)

// Waking the workers that wait for another process's fetch.
//
// A worker that finds a block claimed by another process (claim.go)
// waits until the block is present or the claim is free. Polling alone
// costs either latency (a task's read of that block waits up to the poll
// interval after the block landed: with one ferry per task on one node,
// most of a shared reference is fetched by another ferry) or CPU (each
// poll reads the record and tries the lock). So the wait also sleeps on
// the index file itself: an inotify watch (IN_MODIFY, IN_CLOSE_WRITE) on
// the index file of the object waited on. Every fetch writes the block's
// record into that file once the bytes are in the data file, and a
// process that dies closes it, so both ends of a claim wake the waiters
// at once; they then look again, as a poll would. A claim dropped
// without a record (a failed fetch) raises nothing: the poll, now every
// 8 to 64 ms, still finds it. Without inotify (refused, or out of
// watches) the wait polls every 1 to 8 ms as before.
//
// One inotify instance per Cache, made at the first wait; its events are
// read by one goroutine (owner: the Cache, counted in wg; it returns when
// Close closes the instance). A watch lives while a worker waits on it.

// claimWaker is the Cache's inotify instance and its watches.
type claimWaker struct {
	mu     sync.Mutex // guards every field, and each wakeWatch's users and ch
	file   *os.File   // the inotify instance (non-blocking, on the runtime's poller); nil until the first wait
	fd     int        // file's descriptor (file.Fd would make it blocking); valid while file is set and !closed
	failed bool       // inotify refused: waits only poll
	closed bool       // Close ran: no new instance
	byWD   map[int32]*wakeWatch
}

// wakeWatch is one watched index file.
type wakeWatch struct {
	wd     int32
	users  int           // waits using it; the watch is removed at 0
	ch     chan struct{} // closed, and replaced, at every event on the file
	closes uint64        // events that may end a claim without a record: a close, the file gone
}

const wakeMask = syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF

// wakeOn returns a watch on o's index file, or nil when there can be none
// (the wait then polls). Each non-nil result is dropped with unwake.
func (c *Cache) wakeOn(o *object) *wakeWatch {
	w := &c.waker
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed || w.closed {
		return nil
	}
	if w.file == nil && !c.startWakerLocked() {
		return nil
	}
	wd, err := syscall.InotifyAddWatch(w.fd, o.idxPath(), wakeMask)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOMEM) {
			c.log.Debug("block cache: no inotify watch for a claim wait; polling", "err", err)
		}
		return nil // the file went away (evicted), or no watch left: poll
	}
	ww := w.byWD[int32(wd)]
	if ww == nil {
		ww = &wakeWatch{wd: int32(wd), ch: make(chan struct{})}
		w.byWD[ww.wd] = ww
	}
	ww.users++
	return ww
}

// startWakerLocked makes the inotify instance and starts its reader.
// c.waker.mu must be held.
func (c *Cache) startWakerLocked() bool {
	w := &c.waker
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		w.failed = true
		c.log.Info("block cache: no inotify; waits for other processes' fetches poll", "err", err)
		return false
	}
	w.fd = fd
	w.file = os.NewFile(uintptr(fd), "inotify")
	w.byWD = map[int32]*wakeWatch{}
	c.wg.Add(1)
	go c.wakeLoop(w.file) // owner: c (wg); returns when closeWaker closes the file
	return true
}

// changed returns a channel closed at the next event on the watched file
// (nil for a nil watch: a receive from it blocks, and the wait's timer
// ends it) and the count of closes so far: a wait woken by a record
// written (IN_MODIFY) looks for its block only, and tries the claim again
// (two lock calls) only when a close or its timer says the holder may be
// gone. With a ferry per task every record of a shared reference wakes
// every wait on it, in every ferry.
func (ww *wakeWatch) changed(w *claimWaker) (<-chan struct{}, uint64) {
	if ww == nil {
		return nil, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return ww.ch, ww.closes
}

// unwake drops a wait's use of ww, removing the watch after its last use.
func (c *Cache) unwake(ww *wakeWatch) {
	if ww == nil {
		return
	}
	w := &c.waker
	w.mu.Lock()
	defer w.mu.Unlock()
	if ww.users--; ww.users > 0 || w.byWD[ww.wd] != ww {
		return
	}
	delete(w.byWD, ww.wd)
	if w.file != nil && !w.closed {
		_, _ = syscall.InotifyRmWatch(w.fd, uint32(ww.wd))
	}
}

// wakeLoop reads the instance's events and wakes the waiters of each
// watched file they name.
func (c *Cache) wakeLoop(f *os.File) {
	defer c.wg.Done()
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+255+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed by closeWaker (or broken: waits poll)
		}
		w := &c.waker
		w.mu.Lock()
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += syscall.SizeofInotifyEvent + nameLen
			ww := w.byWD[wd]
			if ww == nil {
				continue
			}
			close(ww.ch)
			ww.ch = make(chan struct{})
			if mask&^syscall.IN_MODIFY != 0 {
				ww.closes++
			}
			if mask&syscall.IN_IGNORED != 0 {
				delete(w.byWD, wd) // the kernel dropped the watch (file deleted)
			}
		}
		w.mu.Unlock()
	}
}

// closeWaker closes the inotify instance, ending wakeLoop; waits still
// running end on the Cache's context.
func (c *Cache) closeWaker() {
	w := &c.waker
	w.mu.Lock()
	w.closed = true
	f := w.file
	w.mu.Unlock()
	if f != nil {
		_ = f.Close()
	}
}
