package supervise

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountEntry is one line of /proc/<pid>/mountinfo (proc(5)).
type mountEntry struct {
	id, parent int
	dev        string   // "major:minor"
	root       string   // the mount's root within its file system
	point      string   // the mount point
	tags       []string // optional fields: shared:N, master:N, ...
	fstype     string
	source     string
}

// slave reports whether the mount receives propagation from a master.
func (m mountEntry) slave() bool {
	for _, t := range m.tags {
		if strings.HasPrefix(t, "master:") {
			return true
		}
	}
	return false
}

// fuse reports whether the mount is a FUSE file system.
func (m mountEntry) fuse() bool {
	return m.fstype == "fuse" || m.fstype == "fuseblk" || strings.HasPrefix(m.fstype, "fuse.")
}

// readMountinfo parses the mount table of the calling thread's mount
// namespace (/proc/thread-self/mountinfo: the process's file names the
// namespace of its main thread, which a task's forking thread left).
func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if len(f) < 7 || sep < 0 || sep+2 >= len(f) {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		out = append(out, mountEntry{
			id: id, parent: parent, dev: f[2],
			root: unescapeOctal(f[3]), point: unescapeOctal(f[4]),
			tags: f[6:sep], fstype: f[sep+1], source: unescapeOctal(f[sep+2]),
		})
	}
	return out, sc.Err()
}

// unescapeOctal undoes mountinfo's \ooo escapes (space, tab, newline,
// backslash).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tops returns, for each mount point, the mount on top of it (the one
// path lookups reach): a mount that is not the parent of another mount at
// the same point.
func tops(ms []mountEntry) map[string]mountEntry {
	under := map[int]bool{} // ids with another mount on their root at the same point
	byID := map[int]mountEntry{}
	for _, m := range ms {
		byID[m.id] = m
	}
	for _, m := range ms {
		if p, ok := byID[m.parent]; ok && p.point == m.point {
			under[p.id] = true
		}
	}
	out := map[string]mountEntry{}
	for _, m := range ms {
		if !under[m.id] {
			out[m.point] = m
		}
	}
	return out
}

// within reports whether path p is dir or below it (both clean, absolute).
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// mountOf returns the mount whose tree holds path p (clean, absolute,
// symlinks resolved): the top mount at the longest mount point above p.
func mountOf(top map[string]mountEntry, p string) (mountEntry, bool) {
	best, found := mountEntry{}, false
	for point, m := range top {
		if within(p, point) && (!found || len(point) > len(best.point)) {
			best, found = m, true
		}
	}
	return best, found
}

// selfBind reports whether m is a bind mount of its own mount point (its
// root is that directory of its parent's file system), as bindMountPoint
// makes and a killed ferry may leave.
func selfBind(ms []mountEntry, m mountEntry) bool {
	for _, p := range ms {
		if p.id != m.parent {
			continue
		}
		rel, err := filepath.Rel(p.point, m.point)
		if err != nil || strings.HasPrefix(rel, "..") {
			return false
		}
		return p.dev == m.dev && filepath.Join(p.root, rel) == m.root
	}
	return false
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor (false when it cannot tell).
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
