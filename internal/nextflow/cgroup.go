package nextflow

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// unlimitedV1 is the smallest cgroup v1 memory limit taken as "no limit"
// (the kernel reports PAGE_COUNTER_MAX pages, about 2^63 bytes).
const unlimitedV1 = int64(1) << 60

// cgroupFiles locates the memory and cpu accounting files of this
// process's cgroup, v2 or v1.
type cgroupFiles struct {
	version int    // 0 when none was found
	mem     string // v2: the cgroup dir; v1: the memory controller dir
	cpu     string // v1: the cpuacct controller dir ("" if none)
}

// findCgroup resolves the cgroup of the process named by self (a /proc
// entry such as "self") under cgroupRoot (usually /sys/fs/cgroup). A path
// from /proc/<self>/cgroup that is not visible under cgroupRoot (a
// container without cgroup namespaces) falls back to the root of the
// hierarchy, which is the container's own cgroup in that case.
func findCgroup(procRoot, self, cgroupRoot string) cgroupFiles {
	paths := map[string]string{} // controller ("" for v2) -> path
	if b, err := os.ReadFile(filepath.Join(procRoot, self, "cgroup")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if parts[1] == "" {
				paths[""] = parts[2]
			}
			for _, c := range strings.Split(parts[1], ",") {
				paths[c] = parts[2]
			}
		}
	}
	pick := func(base, rel string) string {
		if rel != "" {
			if d := filepath.Join(base, rel); isDir(d) {
				return d
			}
		}
		return base
	}
	if exists(filepath.Join(cgroupRoot, "cgroup.controllers")) {
		return cgroupFiles{version: 2, mem: pick(cgroupRoot, paths[""])}
	}
	memBase := filepath.Join(cgroupRoot, "memory")
	if !isDir(memBase) {
		return cgroupFiles{}
	}
	cg := cgroupFiles{version: 1, mem: pick(memBase, paths["memory"])}
	for _, name := range []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
		if d := filepath.Join(cgroupRoot, name); isDir(d) {
			cg.cpu = pick(d, paths["cpuacct"])
			break
		}
	}
	return cg
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func isDir(p string) bool { fi, err := os.Stat(p); return err == nil && fi.IsDir() }

// cgroupSample is one reading of the cgroup's accounting files; a field is
// -1 when its file is missing.
type cgroupSample struct {
	current, peak, rss, limit       int64 // bytes
	usageUsec, userUsec, systemUsec int64
	nrThrottled, throttledUsec      int64
}

// read samples the cgroup. memTotal replaces an unlimited memory limit.
func (c cgroupFiles) read(memTotal int64) (cgroupSample, bool) {
	s := cgroupSample{current: -1, peak: -1, rss: -1, limit: -1, usageUsec: -1, userUsec: -1, systemUsec: -1, nrThrottled: -1, throttledUsec: -1}
	switch c.version {
	case 2:
		s.current = readInt(filepath.Join(c.mem, "memory.current"))
		s.peak = readInt(filepath.Join(c.mem, "memory.peak"))
		if st := readKV(filepath.Join(c.mem, "memory.stat")); st != nil {
			s.rss = valueOr(st, "anon", -1)
		}
		switch v := readString(filepath.Join(c.mem, "memory.max")); v {
		case "":
		case "max":
			s.limit = memTotal
		default:
			s.limit, _ = strconv.ParseInt(v, 10, 64)
		}
		if st := readKV(filepath.Join(c.mem, "cpu.stat")); st != nil {
			s.usageUsec = valueOr(st, "usage_usec", -1)
			s.userUsec = valueOr(st, "user_usec", -1)
			s.systemUsec = valueOr(st, "system_usec", -1)
			s.nrThrottled = valueOr(st, "nr_throttled", -1)
			s.throttledUsec = valueOr(st, "throttled_usec", -1)
		}
	case 1:
		s.current = readInt(filepath.Join(c.mem, "memory.usage_in_bytes"))
		s.peak = readInt(filepath.Join(c.mem, "memory.max_usage_in_bytes"))
		if st := readKV(filepath.Join(c.mem, "memory.stat")); st != nil {
			s.rss = valueOr(st, "total_rss", valueOr(st, "rss", -1))
		}
		if s.limit = readInt(filepath.Join(c.mem, "memory.limit_in_bytes")); s.limit >= unlimitedV1 {
			s.limit = memTotal
		}
		if c.cpu != "" {
			if ns := readInt(filepath.Join(c.cpu, "cpuacct.usage")); ns >= 0 {
				s.usageUsec = ns / 1000
			}
			if st := readKV(filepath.Join(c.cpu, "cpuacct.stat")); st != nil {
				if v, ok := st["user"]; ok {
					s.userUsec = v * (1e6 / clockTicks)
				}
				if v, ok := st["system"]; ok {
					s.systemUsec = v * (1e6 / clockTicks)
				}
			}
		}
	default:
		return s, false
	}
	return s, s.current >= 0
}

func valueOr(m map[string]int64, k string, def int64) int64 {
	if v, ok := m[k]; ok {
		return v
	}
	return def
}

func readString(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readInt reads a file holding one integer; -1 when missing or malformed.
func readInt(p string) int64 {
	n, err := strconv.ParseInt(readString(p), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// readKV reads "key value" lines (memory.stat, cpu.stat); nil if missing.
func readKV(p string) map[string]int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0]] = n
		}
	}
	return out
}
