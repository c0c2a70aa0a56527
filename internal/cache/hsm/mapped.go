package hsm

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountRef names ferry's FUSE mount (its device) for Mapped.
type mountRef struct{ major, minor uint32 }

// SetMount tells the Listener which mount its backing files serve (the
// FUSE mount at dir), for Mapped.
func (l *Listener) SetMount(dir string) error {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_BASIC_STATS, &sx); err != nil {
		return err
	}
	l.mnt.Store(&mountRef{major: sx.Dev_major, minor: sx.Dev_minor})
	return nil
}

// Mapped reports whether any process this one can see maps a file of the
// mount SetMount named (true when it was not named: a mapping cannot be
// ruled out). A file mapped through a passthrough open keeps reading its
// backing file after the open is closed.
func (l *Listener) Mapped() bool {
	m := l.mnt.Load()
	if m == nil {
		return true
	}
	dev := fmt.Sprintf(" %02x:%02x ", m.major, m.minor)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err == nil && mapsDevice("/proc/"+p.Name()+"/maps", dev) {
			return true
		}
	}
	return false
}

// mapsDevice reports whether the maps file lists a mapping of dev
// (" MM:mm ").
func mapsDevice(path, dev string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if strings.Contains(line, dev) {
			return true
		}
		if err != nil {
			return false
		}
	}
}
