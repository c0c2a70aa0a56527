package fusefs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// Writable shared mappings of files written through passthrough.
//
// mmap of a passthrough file maps the backing file itself (the kernel
// puts the backing file in the mapping's place, fs/backing-file.c), so the
// FUSE file is released at the last close(2) while a MAP_SHARED mapping
// of it may still write the staging file. The last release was taken as
// "nothing can write it after that": the file uploaded as closed, its
// staging file was forgotten, and bytes written through the mapping after
// the close were lost (TestWritePassthrough/shared_mapping, flaky in CI).
//
// So the release of a handle that passed writes through (vfs
// Handle.Release) waits while a writable shared mapping of a file of this
// mount may exist: while /proc/PID/maps of a process shows one (a mapping
// with "w" and "s" on the mount's device; maps names the FUSE file, not
// the backing one). The handle meanwhile stays a writer: the file is not
// uploaded as closed, so the drain waits for it too. Which processes are
// looked at: Options.MapWriters, when set (the task's mapping guard knows
// which of its processes mapped a file of the mount writable and shared,
// usually none: the release is then at once), else every process in
// /proc. One scan serves every release waiting, every mapScanFirst at
// first, backing off to mapScanMax while a mapping lives. The check is
// per device, not per file: while any writable shared mapping of the
// mount lives, every such release waits. Processes ferry cannot see
// (another PID namespace) are not looked at: their mappings' later
// writes are still lost (README, Limits).

const (
	mapScanFirst = 10 * time.Millisecond
	mapScanMax   = time.Second
)

// mapWait holds the releases of passthrough writers while mappings live.
type mapWait struct {
	writers func() ([]int, bool) // Options.MapWriters
	mu      sync.Mutex           // guards dev, pending, running, ended
	dev     string               // the mount's device as maps shows it ("00:2a"; "": any device)
	pending []*handle            // releases waiting
	running bool                 // loop runs (owner: the first release queued; it returns when pending is empty)
	ended   bool                 // the session ended: releases are at once
}

// release releases h now, or queues it until no writable shared mapping
// of the mount is seen by a scan that starts after this call.
func (w *mapWait) release(h *handle) error {
	w.mu.Lock()
	now := w.ended
	if !now && w.writers != nil {
		pids, known := w.writers()
		now = known && len(pids) == 0 // the guard saw no such mapping
	}
	if now {
		w.mu.Unlock()
		return h.h.Release()
	}
	w.pending = append(w.pending, h)
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		go w.loop() // owner: w; returns when nothing waits
	}
	return nil
}

// loop releases the queued handles once a scan that started after their
// release sees no mapping.
func (w *mapWait) loop() {
	wait := mapScanFirst
	for {
		time.Sleep(wait)
		w.mu.Lock()
		n, ended, dev := len(w.pending), w.ended, w.dev
		w.mu.Unlock()
		if !ended && w.mapped(dev) {
			wait = min(2*wait, mapScanMax)
			continue
		}
		wait = mapScanFirst
		w.mu.Lock()
		n = min(n, len(w.pending)) // end may have taken them
		hs := w.pending[:n:n]
		w.pending = w.pending[n:]
		done := len(w.pending) == 0
		if done {
			w.running = false
		}
		w.mu.Unlock()
		for _, h := range hs {
			_ = h.h.Release() // a staging error shows in the drain
		}
		if done {
			return
		}
	}
}

// end takes every queued handle and makes later releases immediate (the
// session ended). mapped reports whether a mapping of the mount was still
// seen: such a mapping outlives the mount, and the caller freezes the
// files so that its later writes fail rather than vanish.
func (w *mapWait) end() (hs []*handle, mapped bool) {
	w.mu.Lock()
	w.ended = true
	hs, w.pending = w.pending, nil
	dev := w.dev
	w.mu.Unlock()
	return hs, len(hs) > 0 && w.mapped(dev)
}

// mapped reports whether a process shows a writable shared mapping of a
// file of the mount.
func (w *mapWait) mapped(dev string) bool {
	pids, known := []int(nil), false
	if w.writers != nil {
		pids, known = w.writers()
	}
	if !known {
		pids = allPids()
	}
	for _, pid := range pids {
		if mapsShared(pid, []byte(dev)) {
			return true
		}
	}
	return false
}

// mapsShared reports whether /proc/pid/maps has a writable shared
// mapping on device dev (on any device when dev is empty).
func mapsShared(pid int, dev []byte) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return false // gone, or not ours to read
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// start-end perms offset dev inode path
		l := sc.Bytes()
		fs := bytes.Fields(l)
		if len(fs) >= 4 && len(fs[1]) == 4 && fs[1][1] == 'w' && fs[1][3] == 's' && (len(dev) == 0 || bytes.Equal(fs[3], dev)) {
			return true
		}
	}
	return false
}

// allPids lists the processes in /proc.
func allPids() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// setDev sets the mount's device (Mount, once mounted).
func (w *mapWait) setDev(dev uint64) {
	w.mu.Lock()
	w.dev = mapsDev(dev)
	w.mu.Unlock()
}

// mapsDev is how maps shows device dev.
func mapsDev(dev uint64) string {
	major, minor := devNums(dev)
	return fmt.Sprintf("%02x:%02x", major, minor)
}
