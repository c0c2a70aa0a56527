package hsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// probeSeq numbers self-test files.
var probeSeq atomic.Int64

// selfTest reads a byte of a sparse file through the private mount and
// expects the event for it (the kernel may take the mark and still not
// raise events for a file system or a build that lacks them).
func (l *Listener) selfTest() error {
	name := fmt.Sprintf(".hsm-probe-%d-%d", os.Getpid(), probeSeq.Add(1))
	path := filepath.Join(l.dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return unavailable("a test file in the cache dir", err)
	}
	defer os.Remove(path)
	err = f.Truncate(4096)
	f.Close()
	if err != nil {
		return unavailable("a test file in the cache dir", err)
	}
	rf, err := l.Open(name)
	if err != nil {
		return unavailable("opening a test file through the private mount", err)
	}
	defer rf.Close()
	done := make(chan error, 1)
	go func() { // owner: selfTest, which waits for it
		_, err := rf.ReadAt(make([]byte, 1), 0)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, eventBufBytes)
	got := false
	for !got && time.Now().Before(deadline) {
		fds := []unix.PollFd{{Fd: int32(l.gfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 100); err != nil || n == 0 {
			select {
			case <-done:
				return unavailable("the kernel raised no pre-content event for a read through the private mount", errors.New("no event"))
			default:
			}
			continue
		}
		n, err := unix.Read(l.gfd, buf)
		if err != nil {
			continue
		}
		for _, e := range parseEvents(buf[:n], nil) {
			if e.fd < 0 {
				continue
			}
			respond(l.gfd, e.fd, allow)
			unix.Close(int(e.fd))
			got = true
		}
	}
	if !got {
		return unavailable("no pre-content event arrived for a test read", errors.New("timed out"))
	}
	if err := <-done; err != nil {
		return unavailable("a test read through the private mount failed", err)
	}
	return nil
}
