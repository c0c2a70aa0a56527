package nextflow

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// procStat is what the tracer uses of /proc/<pid>/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
	vsize                        int64 // bytes
	rssPages                     int64
}

// parseStat parses the content of /proc/<pid>/stat. The command name is in
// parentheses and may itself hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no ')'")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 22 {
		return procStat{}, errors.New("stat: too few fields")
	}
	num := func(n int) int64 {
		v, _ := strconv.ParseInt(f[n-3], 10, 64)
		return v
	}
	return procStat{
		ppid:  int(num(4)),
		utime: num(14), stime: num(15), cutime: num(16), cstime: num(17),
		vsize: num(23), rssPages: num(24),
	}, nil
}

// procStatus is what the tracer uses of /proc/<pid>/status.
type procStatus struct {
	vmPeak, vmHWM    int64 // bytes
	volCtxt, invCtxt int64
}

// parseStatus parses /proc/<pid>/status.
func parseStatus(b []byte) procStatus {
	kv := parseKV(b)
	return procStatus{
		vmPeak: kv["VmPeak"], vmHWM: kv["VmHWM"],
		volCtxt: kv["voluntary_ctxt_switches"], invCtxt: kv["nonvoluntary_ctxt_switches"],
	}
}

// parseKV parses "Key:  value [kB]" lines (status, meminfo, io); values
// in kB are returned in bytes, lines of another shape are skipped.
func parseKV(b []byte) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		out[strings.TrimSpace(k)] = n
	}
	return out
}

// ioCounters are the fields of /proc/<pid>/io.
type ioCounters struct {
	rchar, wchar, syscr, syscw, readBytes, writeBytes int64
}

func (a ioCounters) add(b ioCounters) ioCounters {
	return ioCounters{
		rchar: a.rchar + b.rchar, wchar: a.wchar + b.wchar,
		syscr: a.syscr + b.syscr, syscw: a.syscw + b.syscw,
		readBytes: a.readBytes + b.readBytes, writeBytes: a.writeBytes + b.writeBytes,
	}
}

func (a ioCounters) max(b ioCounters) ioCounters {
	return ioCounters{
		rchar: max(a.rchar, b.rchar), wchar: max(a.wchar, b.wchar),
		syscr: max(a.syscr, b.syscr), syscw: max(a.syscw, b.syscw),
		readBytes: max(a.readBytes, b.readBytes), writeBytes: max(a.writeBytes, b.writeBytes),
	}
}

// parseIO parses /proc/<pid>/io.
func parseIO(b []byte) ioCounters {
	kv := parseKV(b)
	return ioCounters{
		rchar: kv["rchar"], wchar: kv["wchar"], syscr: kv["syscr"], syscw: kv["syscw"],
		readBytes: kv["read_bytes"], writeBytes: kv["write_bytes"],
	}
}

// procTree returns the pids of root's descendants (and root itself when
// withRoot), with their parsed stat, by scanning procRoot.
func procTree(procRoot string, root int, withRoot bool) map[int]procStat {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	stats := map[int]procStat{}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		st, err := parseStat(b)
		if err != nil {
			continue
		}
		stats[pid] = st
		children[st.ppid] = append(children[st.ppid], pid)
	}
	out := map[int]procStat{}
	if st, ok := stats[root]; ok && withRoot {
		out[root] = st
	}
	queue := append([]int(nil), children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if _, seen := out[pid]; seen || pid == root {
			continue
		}
		out[pid] = stats[pid]
		queue = append(queue, children[pid]...)
	}
	return out
}

// cpuName returns the first "model name" of /proc/cpuinfo ("" if none).
func cpuName(procRoot string) string {
	b, err := os.ReadFile(filepath.Join(procRoot, "cpuinfo"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memTotal returns MemTotal of /proc/meminfo in bytes (0 if unknown).
func memTotal(procRoot string) int64 {
	b, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return 0
	}
	return parseKV(b)["MemTotal"]
}
