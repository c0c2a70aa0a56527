package e2e

import (
	"fmt"
	"math/rand"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// attrOp is the argument of the model's attribute operations: mkfifo,
// chmod (follows symlinks), lchown, utimensat (with nanoseconds, on the
// link itself or through it).
type attrOp struct {
	mode         uint32
	uid, gid     int
	atime, mtime unix.Timespec
	nofollow     bool
}

// Modes and owners the generator draws (the model runs as root, so no
// mode locks it out).
var (
	modelModes  = []uint32{0o600, 0o644, 0o700, 0o755, 0o711, 0o444, 0o1777, 0o2750, 0o000}
	modelOwners = []int{0, 1000, 65534}
)

func genAttrOp(rng *rand.Rand, k opKind) attrOp {
	var a attrOp
	switch k {
	case opMkfifo, opChmod:
		a.mode = modelModes[rng.Intn(len(modelModes))]
		if k == opMkfifo {
			a.mode &= 0o777
		}
	case opChown:
		a.uid, a.gid = modelOwners[rng.Intn(len(modelOwners))], modelOwners[rng.Intn(len(modelOwners))]
	case opUtimens:
		// 2001 to 2033, any nanosecond.
		ts := func() unix.Timespec {
			return unix.NsecToTimespec(time.Unix(1e9+rng.Int63n(1e9), rng.Int63n(1e9)).UnixNano())
		}
		a.atime, a.mtime, a.nofollow = ts(), ts(), rng.Intn(2) == 0
	}
	return a
}

func (a attrOp) String(k opKind) string {
	switch k {
	case opMkfifo, opChmod:
		return fmt.Sprintf("%#o", a.mode)
	case opChown:
		return fmt.Sprintf("%d:%d", a.uid, a.gid)
	}
	return fmt.Sprintf("atime=%d.%09d mtime=%d.%09d nofollow=%v", a.atime.Sec, a.atime.Nsec, a.mtime.Sec, a.mtime.Nsec, a.nofollow)
}

// do applies the operation to p; on success it returns what it changed
// as lstat (stat for chmod) shows it at once, times included.
func (a attrOp) do(k opKind, p string) (string, error) {
	var err error
	follow := false
	switch k {
	case opMkfifo:
		err = syscall.Mkfifo(p, a.mode)
	case opChmod:
		err, follow = syscall.Chmod(p, a.mode), true
	case opChown:
		err = syscall.Lchown(p, a.uid, a.gid)
	case opUtimens:
		flags := 0
		if a.nofollow {
			flags = unix.AT_SYMLINK_NOFOLLOW
		}
		err, follow = unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{a.atime, a.mtime}, flags), !a.nofollow
	}
	if err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if follow {
		err = syscall.Stat(p, &st)
	} else {
		err = syscall.Lstat(p, &st)
	}
	if err != nil {
		return "", fmt.Errorf("stat after %s: %w", opNames[k], err)
	}
	s := statText(&st)
	if k == opUtimens {
		s += fmt.Sprintf(" atime=%s mtime=%d.%09d", a.atimeText(st.Atim), st.Mtim.Sec, st.Mtim.Nsec)
	}
	return s, nil
}

// atimeText shows the access time a stat returned after the utimensat a:
// "set" when it is the time set, or when it is now and the time set is
// not (the reference's relatime updated it because the stat's path walk
// read the symlink just changed, as in d/b/b with d/b -> "."; ferry does
// not update access times on reads, as with noatime); else the time.
func (a attrOp) atimeText(got syscall.Timespec) string {
	set := time.Unix(a.atime.Sec, a.atime.Nsec)
	at := time.Unix(got.Sec, got.Nsec)
	if at.Equal(set) || (time.Since(at).Abs() < time.Minute && time.Since(set).Abs() >= time.Minute) {
		return "set"
	}
	return fmt.Sprintf("%d.%09d", got.Sec, got.Nsec)
}
