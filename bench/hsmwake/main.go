package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-fs/ferry/bench/internal/floor"
	"github.com/ferry-fs/ferry/internal/cache/hsm"
)

const fileSize = 64 << 20

func main() { floor.Main("hsmwake", run) }

func run(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: hsmwake DIR SECONDS READERS...")
	}
	dir := args[0]
	nums, err := floor.Positive(args[1:])
	if err != nil {
		return err
	}
	secs, counts := time.Duration(nums[0])*time.Second, nums[1:]
	name := filepath.Join(dir, fmt.Sprintf(".hsmwake-%d", os.Getpid()))
	if err := os.WriteFile(name, make([]byte, fileSize), 0o600); err != nil {
		return err
	}
	defer os.Remove(name)
	l, err := hsm.Open(dir, nil)
	if err != nil {
		return err
	}
	defer l.Close()
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := l.Watch(f, present{})
	if err != nil {
		return err
	}
	defer w.Close(true)
	for _, n := range counts {
		rate, cpu, err := measure(l, filepath.Base(name), int(n), secs)
		if err != nil {
			return err
		}
		fmt.Printf("%d readers: %.0f reads/s, %.1f CPU ms per 1000 reads\n", n, rate, cpu)
	}
	return nil
}

// present is the Filler of the marked file: every range is there, so
// each event is answered at once, on the listener's reading goroutine.
type present struct{}

func (present) Ready(off, n int64, pid int32) bool { return true }

func (present) Fill(ctx context.Context, off, n int64, pid int32) error { return nil }

// measure runs n readers of name (opened through l's private mount) for d
// and returns their reads per second and the process's CPU milliseconds
// per 1,000 reads.
func measure(l *hsm.Listener, name string, n int, d time.Duration) (rate, cpuPerK float64, err error) {
	fds := make([]int, n)
	for i := range fds {
		f, err := l.Open(name)
		if err != nil {
			return 0, 0, err
		}
		defer f.Close()
		fds[i] = int(f.Fd())
	}
	var reads atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	c0, t0 := cpuTime(), time.Now()
	for i, fd := range fds {
		wg.Add(1)
		go func() { // owner: measure, which waits for it
			defer wg.Done()
			b := make([]byte, 4096)
			for off := int64(i) * fileSize / int64(n) &^ 4095; !stop.Load(); off = (off + 4096) % fileSize {
				unix.Pread(fd, b, off)
				reads.Add(1)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	r, el, cpu := reads.Load(), time.Since(t0).Seconds(), (cpuTime() - c0).Seconds()
	return float64(r) / el, cpu * 1e6 / float64(r), nil
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
