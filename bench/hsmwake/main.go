package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferry-fs/ferry/bench/internal/floor"
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
	gfd, err := unix.FanotifyInit(unix.FAN_CLASS_PRE_CONTENT|unix.FAN_CLOEXEC|unix.FAN_UNLIMITED_QUEUE, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fanotify_init: %w", err)
	}
	defer unix.Close(gfd)
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	dot := [2]byte{'.', 0}
	if _, _, e := unix.Syscall6(unix.SYS_FANOTIFY_MARK, uintptr(gfd), uintptr(unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT),
		uintptr(unix.FAN_PRE_ACCESS), uintptr(tree), uintptr(unsafe.Pointer(&dot[0])), 0); e != 0 {
		return fmt.Errorf("fanotify_mark: %w", e)
	}
	go answer(gfd) // owner: run; it ends with the process
	for _, n := range counts {
		rate, cpu, err := measure(tree, filepath.Base(name), int(n), secs)
		if err != nil {
			return err
		}
		fmt.Printf("%d readers: %.0f reads/s, %.1f CPU ms per 1000 reads\n", n, rate, cpu)
	}
	return nil
}

// answer allows every event of the group gfd as soon as it is read.
func answer(gfd int) {
	buf := make([]byte, 64<<10)
	var resp [8]byte
	for {
		n, err := unix.Read(gfd, buf)
		if err != nil {
			continue
		}
		for b := buf[:n]; len(b) >= 24; {
			el := int(binary.LittleEndian.Uint32(b))
			if el < 24 || el > len(b) {
				break
			}
			if fd := int32(binary.LittleEndian.Uint32(b[16:])); fd >= 0 {
				binary.LittleEndian.PutUint32(resp[0:], uint32(fd))
				binary.LittleEndian.PutUint32(resp[4:], unix.FAN_ALLOW)
				unix.Write(gfd, resp[:])
				unix.Close(int(fd))
			}
			b = b[el:]
		}
	}
}

// measure runs n readers of name (through the marked clone tree) for d
// and returns their reads per second and the process's CPU milliseconds
// per 1,000 reads.
func measure(tree int, name string, n int, d time.Duration) (rate, cpuPerK float64, err error) {
	fds := make([]int, n)
	for i := range fds {
		if fds[i], err = unix.Openat(tree, name, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return 0, 0, fmt.Errorf("open through the clone: %w", err)
		}
		defer unix.Close(fds[i])
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
