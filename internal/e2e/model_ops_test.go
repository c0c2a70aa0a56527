package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// opKind is one operation of the model test.
type opKind int

const (
	opOpen opKind = iota
	opClose
	opWrite
	opRead
	opFsync
	opFtruncate
	opTruncate
	opRename
	opUnlink
	opMkdir
	opRmdir
	opSymlink
	opReadlink
	opStat
	opLstat
	opReaddir
	opLink
	opMkfifo
	opChmod
	opChown
	opUtimens
	numOpKinds
)

var opNames = [numOpKinds]string{"open", "close", "write", "read", "fsync", "ftruncate", "truncate", "rename", "unlink", "mkdir", "rmdir", "symlink", "readlink", "stat", "lstat", "readdir", "link", "mkfifo", "chmod", "lchown", "utimensat"}

// opWeights is how often the generator draws each kind.
var opWeights = [numOpKinds]int{12, 8, 16, 10, 2, 3, 3, 8, 5, 6, 4, 3, 2, 5, 3, 5, 1, 2, 3, 2, 3}

// op is one generated operation; which fields matter depends on kind.
type op struct {
	kind  opKind
	path  string // relative to the side's root
	path2 string // rename and link destination; symlink: the target
	slot  int    // handle slot
	flags int    // open flags; rename flags
	off   int64
	n     int
	data  []byte // write
	size  int64  // truncate
	attr  attrOp // mkfifo, chmod, lchown, utimensat
}

func (o op) String() string {
	switch o.kind {
	case opOpen:
		return fmt.Sprintf("open h%d %s %s", o.slot, o.path, openFlagString(o.flags))
	case opClose, opFsync:
		return fmt.Sprintf("%s h%d", opNames[o.kind], o.slot)
	case opWrite:
		return fmt.Sprintf("write h%d off=%d n=%d", o.slot, o.off, len(o.data))
	case opRead:
		return fmt.Sprintf("read h%d off=%d n=%d", o.slot, o.off, o.n)
	case opFtruncate:
		return fmt.Sprintf("ftruncate h%d %d", o.slot, o.size)
	case opTruncate:
		return fmt.Sprintf("truncate %s %d", o.path, o.size)
	case opRename:
		if o.flags&unix.RENAME_NOREPLACE != 0 {
			return fmt.Sprintf("rename(NOREPLACE) %s %s", o.path, o.path2)
		}
		return fmt.Sprintf("rename %s %s", o.path, o.path2)
	case opSymlink:
		return fmt.Sprintf("symlink %s -> %q", o.path, o.path2)
	case opLink:
		return fmt.Sprintf("link %s %s", o.path, o.path2)
	case opMkfifo, opChmod, opChown, opUtimens:
		return opNames[o.kind] + " " + o.path + " " + o.attr.String(o.kind)
	}
	return opNames[o.kind] + " " + o.path
}

func openFlagString(f int) string {
	var parts []string
	switch f & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		parts = append(parts, "RDONLY")
	case syscall.O_WRONLY:
		parts = append(parts, "WRONLY")
	default:
		parts = append(parts, "RDWR")
	}
	for _, x := range []struct {
		bit  int
		name string
	}{{syscall.O_CREAT, "CREAT"}, {syscall.O_EXCL, "EXCL"}, {syscall.O_TRUNC, "TRUNC"}, {syscall.O_APPEND, "APPEND"}} {
		if f&x.bit != 0 {
			parts = append(parts, x.name)
		}
	}
	return strings.Join(parts, "|")
}

// openFlagSets are the flag combinations the generator opens with.
var openFlagSets = []int{
	syscall.O_RDONLY,
	syscall.O_RDONLY,
	syscall.O_WRONLY | syscall.O_CREAT | syscall.O_TRUNC,
	syscall.O_RDWR | syscall.O_CREAT,
	syscall.O_RDWR,
	syscall.O_WRONLY | syscall.O_APPEND | syscall.O_CREAT,
	syscall.O_WRONLY | syscall.O_CREAT | syscall.O_EXCL,
	syscall.O_RDWR | syscall.O_TRUNC,
}

// modelNames are the path components the generator draws from: few, so
// that operations collide (EEXIST, ENOTEMPTY, ENOTDIR, …) often.
var modelNames = []string{"a", "b", "c", "d"}

// symlinkTargets are relative targets (an absolute one would differ
// between the two roots).
var symlinkTargets = []string{"a", "b", "c/d", "../a", "../b/c", "nowhere", ".", ".."}

const numSlots = 5

// slot is one open file on both sides.
type slot struct {
	open  bool
	fd    [2]int
	flags int
	path  string
	snap  []byte // the reference file's bytes at open (model.snapshots, read-only slots)
}

// gen draws the next operation. existing lists the reference's names
// (relative paths) so that half the paths hit something.
func (m *model) gen(existing []string) op {
	rng := m.rng
	pick := func() string {
		if len(existing) > 0 && rng.Intn(2) == 0 {
			return existing[rng.Intn(len(existing))]
		}
		depth := 1 + rng.Intn(3)
		parts := make([]string, depth)
		for i := range parts {
			parts[i] = modelNames[rng.Intn(len(modelNames))]
		}
		return strings.Join(parts, "/")
	}
	var open, free []int
	for i, s := range m.slots {
		if s.open {
			open = append(open, i)
		} else {
			free = append(free, i)
		}
	}
	total := 0
	for _, w := range opWeights {
		total += w
	}
	x := rng.Intn(total)
	k := opKind(0)
	for ; x >= opWeights[k]; k++ {
		x -= opWeights[k]
	}
	switch k {
	case opOpen:
		if len(free) == 0 {
			k = opClose
		}
	case opClose, opWrite, opRead, opFsync, opFtruncate:
		if len(open) == 0 {
			k = opOpen
		}
	}
	o := op{kind: k}
	switch k {
	case opOpen:
		o.slot = free[rng.Intn(len(free))]
		o.path = pick()
		o.flags = openFlagSets[rng.Intn(len(openFlagSets))]
	case opClose, opFsync:
		o.slot = open[rng.Intn(len(open))]
	case opWrite:
		o.slot = open[rng.Intn(len(open))]
		o.off = m.offset()
		n := 1 + rng.Intn(16<<10)
		if rng.Intn(8) == 0 {
			n = 1 + rng.Intn(256<<10)
		}
		o.data = make([]byte, n)
		rng.Read(o.data)
	case opRead:
		o.slot = open[rng.Intn(len(open))]
		o.off = m.offset()
		o.n = 1 + rng.Intn(128<<10)
	case opFtruncate:
		o.slot = open[rng.Intn(len(open))]
		o.size = m.offset()
	case opTruncate:
		o.path = pick()
		o.size = m.offset()
	case opRename, opLink:
		o.path, o.path2 = pick(), pick()
		if k == opRename && rng.Intn(5) == 0 {
			o.flags = unix.RENAME_NOREPLACE
		}
	case opSymlink:
		o.path = pick()
		o.path2 = symlinkTargets[rng.Intn(len(symlinkTargets))]
	case opMkfifo, opChmod, opChown, opUtimens:
		o.path = pick()
		o.attr = genAttrOp(rng, k)
	default:
		o.path = pick()
	}
	return o
}

// offset draws a file offset or size: mostly small, sometimes past a
// multipart part size (m.maxOffset).
func (m *model) offset() int64 {
	switch m.rng.Intn(10) {
	case 0:
		return 0
	case 1:
		return m.rng.Int63n(m.maxOffset + 1)
	}
	return m.rng.Int63n(64 << 10)
}

// outcome is what one side answered.
type outcome struct {
	errno syscall.Errno
	n     int
	data  []byte
	fd    int
	text  string // normalised: stat, readdir, readlink
	eintr int    // EINTR answers retried before this one
}

func (a outcome) String() string {
	s := "ok"
	if a.errno != 0 {
		s = fmt.Sprintf("%s (%d)", unix.ErrnoName(a.errno), int(a.errno))
	}
	if a.data != nil {
		s += fmt.Sprintf(" n=%d sha=%.12s", a.n, sha(a.data))
	} else if a.n != 0 {
		s += fmt.Sprintf(" n=%d", a.n)
	}
	if a.text != "" {
		s += " " + a.text
	}
	if a.eintr > 0 {
		s += fmt.Sprintf(" (after %d EINTR)", a.eintr)
	}
	return s
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// do applies o on side i (0 the mount, 1 the reference).
func (m *model) do(i int, o op) outcome {
	root := m.roots[i]
	p := filepath.Join(root, o.path)
	var err error
	var out outcome
	switch o.kind {
	case opOpen:
		// O_NONBLOCK: an open of a FIFO returns at once (ENXIO for a
		// writer without a reader) instead of waiting for the other end.
		out.fd, err = syscall.Open(p, o.flags|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0o644)
	case opClose:
		err = syscall.Close(m.slots[o.slot].fd[i])
	case opWrite:
		fd := m.slots[o.slot].fd[i]
		if m.slots[o.slot].flags&syscall.O_APPEND != 0 {
			out.n, err = syscall.Write(fd, o.data)
		} else {
			out.n, err = syscall.Pwrite(fd, o.data, o.off)
		}
	case opRead:
		buf := make([]byte, o.n)
		out.n, err = syscall.Pread(m.slots[o.slot].fd[i], buf, o.off)
		if err == nil {
			out.data = buf[:out.n]
		}
	case opFsync:
		err = syscall.Fsync(m.slots[o.slot].fd[i])
	case opFtruncate:
		err = syscall.Ftruncate(m.slots[o.slot].fd[i], o.size)
	case opTruncate:
		err = syscall.Truncate(p, o.size)
	case opRename:
		err = unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, filepath.Join(root, o.path2), uint(o.flags))
	case opUnlink:
		err = syscall.Unlink(p)
	case opMkdir:
		err = syscall.Mkdir(p, 0o755)
	case opRmdir:
		err = syscall.Rmdir(p)
	case opSymlink:
		err = syscall.Symlink(o.path2, p)
	case opReadlink:
		var t string
		t, err = os.Readlink(p)
		out.text = t
	case opStat, opLstat:
		var st syscall.Stat_t
		if o.kind == opStat {
			err = syscall.Stat(p, &st)
		} else {
			err = syscall.Lstat(p, &st)
		}
		if err == nil {
			out.text = statText(&st)
		}
	case opReaddir:
		var ents []fs.DirEntry
		ents, err = os.ReadDir(p)
		if err == nil {
			out.text = direntText(ents)
		}
	case opLink:
		err = syscall.Link(p, filepath.Join(root, o.path2))
	case opMkfifo, opChmod, opChown, opUtimens:
		out.text, err = o.attr.do(o.kind, p)
	}
	out.errno = errnoOf(err)
	return out
}

// statText renders what the model compares of a stat: the type, the
// size of files and symlinks (not directories: ferry reports 4096 like
// many file systems, but not all), the permission bits and the owner.
// Times are compared right after utimensat only (writes set them to
// each side's clock); st_nlink and inode numbers are ferry's own
// (README: Semantics, Limits).
func statText(st *syscall.Stat_t) string {
	perm := fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode&0o7777, st.Uid, st.Gid)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "dir " + perm
	case syscall.S_IFLNK:
		return fmt.Sprintf("symlink size=%d uid=%d gid=%d", st.Size, st.Uid, st.Gid)
	case syscall.S_IFREG:
		return fmt.Sprintf("file size=%d %s", st.Size, perm)
	case syscall.S_IFIFO:
		return "fifo " + perm
	}
	return fmt.Sprintf("type=%o %s", st.Mode&syscall.S_IFMT, perm)
}

// direntText renders a listing: sorted names with their types. A symlink
// may show as a file through ferry (README: a zero-size object is a file
// in readdir until stat'ed); sameListing allows it.
func direntText(ents []fs.DirEntry) string {
	var parts []string
	for _, e := range ents {
		t := "file"
		switch {
		case e.IsDir():
			t = "dir"
		case e.Type()&fs.ModeSymlink != 0:
			t = "symlink"
		}
		parts = append(parts, e.Name()+":"+t)
	}
	sort.Strings(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// same reports whether the mount's outcome matches the reference's, with
// the documented differences normalised, and says why not.
func same(o op, mnt, ref outcome) (bool, string) {
	if o.kind == opLink {
		// Hard links: ENOTSUP where the reference succeeds.
		want := ref.errno
		if want == 0 {
			want = syscall.ENOTSUP
		}
		if mnt.errno != want {
			return false, fmt.Sprintf("errno %v, want %v", mnt.errno, want)
		}
		return true, ""
	}
	if mnt.errno != ref.errno {
		if o.kind == opRename && sameRenameErr(mnt.errno, ref.errno) {
			return true, ""
		}
		return false, "errno differs"
	}
	if mnt.n != ref.n || !bytes.Equal(mnt.data, ref.data) {
		return false, "data differs"
	}
	if mnt.text != ref.text {
		if o.kind == opReaddir && sameListing(mnt.text, ref.text) {
			return true, ""
		}
		return false, "result differs"
	}
	return true, ""
}

// sameRenameErr allows the two errnos POSIX allows for a directory
// renamed over a non-empty one.
func sameRenameErr(a, b syscall.Errno) bool {
	ok := func(e syscall.Errno) bool { return e == syscall.ENOTEMPTY || e == syscall.EEXIST }
	return ok(a) && ok(b)
}

// sameListing compares listings entry by entry; a symlink of the
// reference may be a file on the mount.
func sameListing(mnt, ref string) bool {
	a := strings.Fields(strings.Trim(mnt, "[]"))
	b := strings.Fields(strings.Trim(ref, "[]"))
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(strings.HasSuffix(b[i], ":symlink") && a[i] == strings.TrimSuffix(b[i], "symlink")+"file") {
			return false
		}
	}
	return true
}
