package e2e

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestModel applies 3,000 seeded random operations (open, write at random
// offsets, append, read, truncate, rename of files and directories,
// unlink, mkdir, rmdir, symlink, readlink, stat, readdir, fsync, close,
// link, mkfifo, chmod, lchown, utimensat with nanoseconds) to a ferry
// mount and to a local directory, comparing every result, errno, byte,
// mode and owner (and the times utimensat set); it remounts (a new ferry
// on the same cache dir)
// along the way, compares the whole trees now and then, and at the end
// compares the bucket with the reference tree. A divergence prints
// FERRY_MODEL_SEED (and FERRY_MODEL_OPS) to reproduce it.
//
// TestModel runs the operations as a task of "ferry run" does: from a
// thread in the mount namespace ferry made for its task (the cache
// directory covered, the mount a slave copy of ferry's); the other read
// modes run them on "ferry mount".
//
// It runs in every read mode (readmode_test.go): with passthrough, a
// descriptor opened read-only may read the bytes the file had when it
// was opened (a passthrough open reads the cache file of that version)
// rather than what other descriptors or a truncate wrote since; the
// comparison accepts either, and only for such descriptors.
func TestModel(t *testing.T) {
	t.Parallel()
	runModel(t, modelOptions{ops: 3000, remountEvery: 1000, checkEvery: 250, maxOffset: 256 << 10, mode: modeCold, taskNS: true})
}

// TestModelWarm is TestModel with cold passthrough off.
func TestModelWarm(t *testing.T) {
	t.Parallel()
	runModel(t, modelOptions{ops: 3000, remountEvery: 1000, checkEvery: 250, maxOffset: 256 << 10, mode: modeWarm})
}

// TestModelNoPassthrough is TestModel with --passthrough off.
func TestModelNoPassthrough(t *testing.T) {
	t.Parallel()
	runModel(t, modelOptions{ops: 3000, remountEvery: 1000, checkEvery: 250, maxOffset: 256 << 10, mode: modeFUSE})
}

// TestSoakModel is TestModel with 100,000 operations and offsets past the
// multipart part size (FERRY_SOAK=1 only).
func TestSoakModel(t *testing.T) {
	if os.Getenv("FERRY_SOAK") == "" {
		t.Log("soak test: set FERRY_SOAK=1 to run it")
		return
	}
	t.Parallel()
	runModel(t, modelOptions{ops: 100000, remountEvery: 10000, checkEvery: 1000, maxOffset: 12 << 20, mode: modeCold, taskNS: true})
}

// TestSoakModelWarm is TestSoakModel with cold passthrough off.
func TestSoakModelWarm(t *testing.T) {
	if os.Getenv("FERRY_SOAK") == "" {
		t.Log("soak test: set FERRY_SOAK=1 to run it")
		return
	}
	t.Parallel()
	runModel(t, modelOptions{ops: 100000, remountEvery: 10000, checkEvery: 1000, maxOffset: 12 << 20, mode: modeWarm})
}

// TestSoakModelNoPassthrough is TestSoakModel with --passthrough off.
func TestSoakModelNoPassthrough(t *testing.T) {
	if os.Getenv("FERRY_SOAK") == "" {
		t.Log("soak test: set FERRY_SOAK=1 to run it")
		return
	}
	t.Parallel()
	runModel(t, modelOptions{ops: 100000, remountEvery: 10000, checkEvery: 1000, maxOffset: 12 << 20, mode: modeFUSE})
}

type modelOptions struct {
	ops          int
	remountEvery int
	checkEvery   int    // compare the whole trees every so many operations
	maxOffset    int64  // largest offset or size drawn (rarely)
	mode         string // read mode (readmode_test.go)
	// taskNS: the mount is ferry run's, and the operations come from its
	// task's mount namespace (see taskns_test.go).
	taskNS bool
}

// model is the state of one model run.
type model struct {
	rng       *rand.Rand
	roots     [2]string // the mount's and the reference's
	slots     [numSlots]slot
	maxOffset int64
	history   []string // the last operations, for the failure report
	// snapshots: read-only descriptors may read the bytes their file had
	// at open (passthrough on); slot.snap holds them.
	snapshots bool
}

func runModel(t *testing.T, o modelOptions) {
	seed := testSeed(t, "FERRY_MODEL_SEED")
	if s := os.Getenv("FERRY_MODEL_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("FERRY_MODEL_OPS=%q: %v", s, err)
		}
		o.ops = n
	}
	t.Logf("FERRY_MODEL_SEED=%d (%d operations)", seed, o.ops)
	e := newS3Env(t)
	// The operations work in m/r; relative symlinks of r's top level may
	// point into m ("../a"), which the comparisons cover too.
	ref := filepath.Join(t.TempDir(), "m")
	m := &model{rng: rand.New(rand.NewSource(seed)), roots: [2]string{e.path("m/r"), filepath.Join(ref, "r")}, maxOffset: o.maxOffset,
		snapshots: o.mode != modeFUSE}
	// --allow-other: ferry then serves each object's own attributes,
	// which the model compares (see vfs.Options.ExactAttrs); the model
	// runs as root, which the permissions it sets do not lock out.
	flags := append(mountModeFlags(o.mode), "--allow-other")
	leave := func() {}
	defer func() { leave() }() // back to the test's own namespace, also after a Fatal
	mount := func() *mountProc {
		if !o.taskNS {
			return startMount(t, e, e.srv.Endpoint, flags...)
		}
		mp, pid := startTaskMount(t, e, e.srv.Endpoint, flags...)
		leave = enterMountNS(t, pid)
		return mp
	}
	mp := mount()
	for _, r := range m.roots {
		if err := os.MkdirAll(r, 0o755); err != nil {
			t.Fatalf("mkdir %s: %v", r, err)
		}
	}
	watch := os.Getenv("FERRY_MODEL_WATCH") // a path under m/r to trace
	strict := os.Getenv("FERRY_MODEL_STRICT") != ""
	fail := func(i int, format string, args ...any) {
		t.Helper()
		// The bucket as the divergence found it (before the stop drains),
		// with what symlinks reach above the model root.
		bucket := strings.Join(e.keys("m/"), " ")
		leave()
		leave = func() {}
		mp.stop(t)
		log, _ := os.ReadFile(mp.log.Name())
		soak := ""
		if strings.HasPrefix(t.Name(), "TestSoak") {
			soak = "FERRY_SOAK=1 "
		}
		t.Fatalf("model diverged at operation %d (reproduce: %sFERRY_MODEL_SEED=%d FERRY_MODEL_OPS=%d go test -run '^%s$' ./internal/e2e/):\n%s\nlast operations:\n%s\nbucket at the divergence: %s\nferry's log:\n%s",
			i, soak, seed, i+1, t.Name(), fmt.Sprintf(format, args...), strings.Join(m.history, "\n"), bucket, tailStr(string(log), 3000))
	}
	t0 := time.Now()
	escaped := 0 // operations not compared (see escapes)
	for i := 0; i < o.ops; i++ {
		existing := m.refNames()
		op := m.gen(existing)
		if !strict && m.unlinkedHandle(op) {
			// POSIX keeps an unlinked open file usable; ferry gives EOF
			// or ENOENT past what the kernel cached (TestOpenUnlinked
			// pins that down): I/O on such handles is not compared
			// unless FERRY_MODEL_STRICT is set.
			m.note(fmt.Sprintf("%6d %s: skipped, the file is unlinked", i, op))
			continue
		}
		if m.escapes(op) {
			m.note(fmt.Sprintf("%6d %s: skipped, it resolves above the bucket", i, op))
			escaped++
			continue
		}
		m.note(fmt.Sprintf("%6d %s", i, op))
		msg := m.apply(op)
		if watch != "" {
			t.Logf("%6d %-50s %s: mount %s, reference %s", i, op, watch, m.describe(0, watch), m.describe(1, watch))
		}
		if msg != "" {
			fail(i, "%s: %s\npath walk:\n%s", op, msg, m.walk(op.path))
		}
		if o.checkEvery > 0 && (i+1)%o.checkEvery == 0 {
			if diffs := m.compareTrees(); len(diffs) > 0 {
				fail(i, "the trees differ after operation %d:\n%s", i, strings.Join(diffs, "\n"))
			}
		}
		if o.remountEvery > 0 && (i+1)%o.remountEvery == 0 && i+1 < o.ops {
			if msg := m.closeAll(); msg != "" {
				fail(i, "closing every handle before a remount: %s", msg)
			}
			leave()
			leave = func() {}
			if code, log := mp.term(t, 2*time.Minute); code != 0 {
				t.Fatalf("ferry exited %d at the remount after operation %d (seed %d)\n%s", code, i, seed, tailStr(log, 6000))
			}
			m.note(fmt.Sprintf("%6d remount", i))
			mp = mount()
			if diffs := m.compareTrees(); len(diffs) > 0 {
				fail(i, "the trees differ after the remount:\n%s", strings.Join(diffs, "\n"))
			}
		}
	}
	if msg := m.closeAll(); msg != "" {
		fail(o.ops, "closing every handle at the end: %s", msg)
	}
	if diffs := m.compareTrees(); len(diffs) > 0 {
		fail(o.ops, "the trees differ at the end:\n%s", strings.Join(diffs, "\n"))
	}
	t.Logf("%d operations in %v (%d not compared: they resolve above the bucket)", o.ops, time.Since(t0).Round(time.Millisecond), escaped)
	leave()
	leave = func() {}
	if code, log := mp.term(t, 3*time.Minute); code != 0 {
		t.Fatalf("ferry mount exited %d at the end (seed %d)\n%s", code, seed, tailStr(log, 6000))
	}
	tree, err := readTree(ref)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := compareBucket(e, tree, "m/"); len(diffs) > 0 {
		t.Fatalf("the bucket differs from the reference tree after ferry exited (seed %d):\n%s", seed, strings.Join(diffs, "\n"))
	}
}

func (m *model) note(s string) {
	m.history = append(m.history, s)
	if len(m.history) > 40 {
		m.history = m.history[len(m.history)-40:]
	}
}

// refNames lists the reference tree's names, sorted (the generator's
// draws depend on the order).
func (m *model) refNames() []string {
	var out []string
	_ = filepath.WalkDir(m.roots[1], func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == m.roots[1] {
			return nil
		}
		rel, _ := filepath.Rel(m.roots[1], p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	sort.Strings(out)
	return out
}

// apply runs o on both sides and returns "" when they agree, else what
// differs. It keeps the handle slots in step.
func (m *model) apply(o op) string {
	mnt := m.do(0, o)
	for mnt.errno == syscall.EINTR && mnt.eintr < 10 {
		// A FUSE request interrupted by a signal (the Go runtime's
		// preemption signals reach this process too) fails with EINTR;
		// like the os package, try again.
		n := mnt.eintr + 1
		mnt = m.do(0, o)
		mnt.eintr = n
	}
	ref := m.do(1, o)
	ok, why := same(o, mnt, ref)
	if !ok && o.kind == opRead && m.slots[o.slot].snap != nil && mnt.errno == 0 {
		ok = bytes.Equal(mnt.data, snapRange(m.slots[o.slot].snap, o.off, o.n))
	}
	m.history[len(m.history)-1] += " -> " + ref.String()
	switch o.kind {
	case opOpen:
		if mnt.errno == 0 && ref.errno == 0 {
			m.slots[o.slot] = slot{open: true, fd: [2]int{mnt.fd, ref.fd}, flags: o.flags, path: o.path}
			if m.snapshots && o.flags&syscall.O_ACCMODE == syscall.O_RDONLY {
				m.slots[o.slot].snap = fileBytes(ref.fd)
			}
		} else {
			// Keep the sides in step: close what one side opened.
			if mnt.errno == 0 {
				syscall.Close(mnt.fd)
			}
			if ref.errno == 0 {
				syscall.Close(ref.fd)
			}
		}
	case opClose:
		m.slots[o.slot] = slot{}
	case opLink:
		if ref.errno == 0 {
			// The reference made a hard link the mount cannot have: undo it.
			_ = os.Remove(filepath.Join(m.roots[1], o.path2))
		}
	}
	if !ok {
		return fmt.Sprintf("%s\n  mount:     %v\n  reference: %v", why, mnt, ref)
	}
	return ""
}

// fileBytes reads the whole file open at fd.
func fileBytes(fd int) []byte {
	var out []byte
	buf := make([]byte, 256<<10)
	for off := int64(0); ; {
		n, err := syscall.Pread(fd, buf, off)
		if n <= 0 || err != nil {
			return append([]byte{}, out...)
		}
		out = append(out, buf[:n]...)
		off += int64(n)
	}
}

// snapRange is what a read of n bytes at off returns from a file holding
// snap.
func snapRange(snap []byte, off int64, n int) []byte {
	if off >= int64(len(snap)) {
		return []byte{}
	}
	return snap[off:min(int64(len(snap)), off+int64(n))]
}

// describe renders lstat of rel on side i, for FERRY_MODEL_WATCH.
func (m *model) describe(i int, rel string) string {
	var st syscall.Stat_t
	p := filepath.Join(m.roots[i], rel)
	if err := syscall.Lstat(p, &st); err != nil {
		return err.Error()
	}
	if t, err := os.Readlink(p); err == nil {
		return statText(&st) + " -> " + strconv.Quote(t)
	}
	return statText(&st)
}

// walk describes each prefix of rel on both sides (lstat, then stat
// through symlinks), for a divergence report.
func (m *model) walk(rel string) string {
	var b strings.Builder
	parts := strings.Split(rel, "/")
	for k := range parts {
		p := strings.Join(parts[:k+1], "/")
		for i, side := range []string{"mount", "reference"} {
			var st syscall.Stat_t
			follow := "stat: ok"
			if err := syscall.Stat(filepath.Join(m.roots[i], p), &st); err != nil {
				follow = "stat: " + err.Error()
			} else {
				follow = "stat: " + statText(&st)
			}
			fmt.Fprintf(&b, "  %-12s %-9s lstat: %s; %s\n", p, side, m.describe(i, p), follow)
		}
	}
	return b.String()
}

// unlinkedHandle reports whether o is I/O (not close) on a handle whose
// file the reference has unlinked (st_nlink 0).
func (m *model) unlinkedHandle(o op) bool {
	switch o.kind {
	case opWrite, opRead, opFsync, opFtruncate:
	default:
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(m.slots[o.slot].fd[1], &st); err != nil {
		return false
	}
	return st.Nlink == 0
}

// closeAll closes every open handle on both sides.
func (m *model) closeAll() string {
	for i, s := range m.slots {
		if !s.open {
			continue
		}
		o := op{kind: opClose, slot: i}
		m.note("       " + o.String() + " (closing all)")
		if msg := m.apply(o); msg != "" {
			return fmt.Sprintf("%s: %s", o, msg)
		}
	}
	return ""
}

// compareTrees walks both trees and compares every name: type, size,
// symlink target and file content (read through the mount).
func (m *model) compareTrees() []string {
	var diffs []string
	walk := func(root string) (map[string]string, error) {
		out := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == root {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil {
				return fmt.Errorf("lstat %s: %w", rel, err)
			}
			desc := statText(&st)
			switch st.Mode & syscall.S_IFMT {
			case syscall.S_IFLNK:
				t, err := os.Readlink(p)
				if err != nil {
					return fmt.Errorf("readlink %s: %w", rel, err)
				}
				desc += " -> " + t
			case syscall.S_IFREG:
				b, err := os.ReadFile(p)
				if err != nil {
					return fmt.Errorf("read %s: %w", rel, err)
				}
				desc += fmt.Sprintf(" read=%d sha=%.16s", len(b), sha(b))
			}
			out[filepath.ToSlash(rel)] = desc
			return nil
		})
		return out, err
	}
	got, err := walk(filepath.Dir(m.roots[0]))
	if err != nil {
		return []string{"walking the mount: " + err.Error()}
	}
	want, err := walk(filepath.Dir(m.roots[1]))
	if err != nil {
		return []string{"walking the reference: " + err.Error()}
	}
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: missing on the mount (reference: %s)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: mount %s, reference %s", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: only on the mount (%s)", k, g))
		}
	}
	sort.Strings(diffs)
	return diffs
}
