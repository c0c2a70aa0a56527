package nextflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	line := "42 (my (odd) cmd) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 100 8192000 300 18446744073709551615\n"
	st, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{ppid: 7, utime: 250, stime: 50, cutime: 30, cstime: 20, vsize: 8192000, rssPages: 300}
	if st != want {
		t.Fatalf("got %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) should fail", bad)
		}
	}
}

func TestParseStatusAndIO(t *testing.T) {
	s := parseStatus([]byte("Name:\tbash\nVmPeak:\t   1000 kB\nVmHWM:\t  200 kB\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t6\n"))
	if s != (procStatus{vmPeak: 1000 << 10, vmHWM: 200 << 10, volCtxt: 5, invCtxt: 6}) {
		t.Fatalf("status = %+v", s)
	}
	io := parseIO([]byte("rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 6\ncancelled_write_bytes: 7\n"))
	if io != (ioCounters{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("io = %+v", io)
	}
}

// fakeProc builds a /proc with processes pid -> (ppid, utime ticks, rss pages).
type fakeProc struct {
	pid, ppid   int
	utime, rssP int64
	vmHWMkB     int64
	rchar       int64
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func buildProc(t *testing.T, procs []fakeProc, selfCgroup string) string {
	root := t.TempDir()
	for _, p := range procs {
		d := filepath.Join(root, fmt.Sprint(p.pid))
		writeFile(t, filepath.Join(d, "stat"), fmt.Sprintf("%d (p%d) S %d 1 1 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 0 %d %d 0\n", p.pid, p.pid, p.ppid, p.utime, 1<<20, p.rssP))
		writeFile(t, filepath.Join(d, "status"), fmt.Sprintf("VmPeak:\t%d kB\nVmHWM:\t%d kB\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t2\n", 2048, p.vmHWMkB))
		writeFile(t, filepath.Join(d, "io"), fmt.Sprintf("rchar: %d\nwchar: 1\nsyscr: 1\nsyscw: 1\nread_bytes: 0\nwrite_bytes: 4096\n", p.rchar))
	}
	writeFile(t, filepath.Join(root, "cpuinfo"), "processor\t: 0\nmodel name\t: Fake CPU @ 3.00GHz\n")
	writeFile(t, filepath.Join(root, "meminfo"), "MemTotal:       1000 kB\nMemFree: 1 kB\n")
	writeFile(t, filepath.Join(root, "self", "cgroup"), selfCgroup)
	writeFile(t, filepath.Join(root, "notapid", "stat"), "junk")
	return root
}

// clock is a fake clock advanced by hand.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func TestTracerProcTree(t *testing.T) {
	procs := []fakeProc{
		{pid: 1, ppid: 0, utime: 5000, rssP: 1},
		{pid: 10, ppid: 1, utime: 100, rssP: 10, vmHWMkB: 100, rchar: 1000},
		{pid: 11, ppid: 10, utime: 50, rssP: 20, vmHWMkB: 300, rchar: 10},
		{pid: 12, ppid: 11, utime: 50, rssP: 30, rchar: 1},
		{pid: 20, ppid: 1, utime: 7000, rssP: 1000, rchar: 1 << 30},
	}
	tests := []struct {
		name       string
		cgroupRoot func(t *testing.T) string
		selfCg     string
		wantCg     *CgroupTrace
	}{
		{name: "no cgroup", cgroupRoot: func(t *testing.T) string { return t.TempDir() }, selfCg: "0::/\n"},
		{name: "cgroup v2 in a namespace", selfCg: "0::/\n", cgroupRoot: func(t *testing.T) string {
			d := t.TempDir()
			writeFile(t, filepath.Join(d, "cgroup.controllers"), "cpu memory\n")
			writeFile(t, filepath.Join(d, "memory.current"), "5000\n")
			writeFile(t, filepath.Join(d, "memory.peak"), "9000\n")
			writeFile(t, filepath.Join(d, "memory.max"), "max\n")
			writeFile(t, filepath.Join(d, "memory.stat"), "anon 3000\nfile 2000\n")
			writeFile(t, filepath.Join(d, "cpu.stat"), "usage_usec 700\nuser_usec 500\nsystem_usec 200\nnr_throttled 0\nthrottled_usec 0\n")
			return d
		}, wantCg: &CgroupTrace{Version: 2, MemoryCurrent: 5000, MemoryPeak: 9000, MemoryRSS: 3000, MemoryPeakRSS: 3000,
			MemoryLimit: 1000 << 10, CPUUsageUsec: 700, CPUUserUsec: 500, CPUSystemUsec: 200}},
		{name: "cgroup v1 with a visible path", selfCg: "4:memory:/job/1\n2:cpu,cpuacct:/job/1\n", cgroupRoot: func(t *testing.T) string {
			d := t.TempDir()
			m := filepath.Join(d, "memory", "job", "1")
			writeFile(t, filepath.Join(m, "memory.usage_in_bytes"), "6000\n")
			writeFile(t, filepath.Join(m, "memory.max_usage_in_bytes"), "8000\n")
			writeFile(t, filepath.Join(m, "memory.limit_in_bytes"), "4096000\n")
			writeFile(t, filepath.Join(m, "memory.stat"), "rss 1\ntotal_rss 4000\n")
			c := filepath.Join(d, "cpu,cpuacct", "job", "1")
			writeFile(t, filepath.Join(c, "cpuacct.usage"), "2000000\n")
			writeFile(t, filepath.Join(c, "cpuacct.stat"), "user 3\nsystem 1\n")
			writeFile(t, filepath.Join(d, "memory", "memory.usage_in_bytes"), "1\n") // the host's: not ours
			return d
		}, wantCg: &CgroupTrace{Version: 1, MemoryCurrent: 6000, MemoryPeak: 8000, MemoryRSS: 4000, MemoryPeakRSS: 4000,
			MemoryLimit: 4096000, CPUUsageUsec: 2000, CPUUserUsec: 30000, CPUSystemUsec: 10000, NrThrottled: -1, ThrottledUsec: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: time.Unix(1000, 0)}
			tr := NewTracer(TracerOptions{ProcRoot: buildProc(t, procs, tc.selfCg), CgroupRoot: tc.cgroupRoot(t), Interval: time.Hour, Now: clk.Now})
			if err := tr.Start(10); err != nil {
				t.Fatal(err)
			}
			if err := tr.Start(10); err != ErrTracerStarted {
				t.Fatalf("second Start = %v", err)
			}
			waitFor(t, func() bool { return tr.Trace().Proc.RSS > 0 })
			clk.now = clk.now.Add(2 * time.Second)
			tr.Stop()
			tr.Stop() // idempotent
			got := tr.Trace()
			page := int64(os.Getpagesize())
			want := ProcTrace{
				Realtime: 2000, PctCPU: 1000, CPUName: "Fake CPU @ 3.00GHz", // 200 ticks = 2 s CPU in 2 s
				Rchar: 1011, Wchar: 3, Syscr: 3, Syscw: 3, WriteBytes: 3 * 4096,
				Vmem: 3 << 20, RSS: 60 * page, PeakVmem: 3 << 20, PeakRSS: max(60*page, 300<<10),
				VolCtxt: 3, InvCtxt: 6,
			}
			want.PctMem = want.PeakRSS * 1000 / (1000 << 10)
			if got.Proc != want {
				t.Fatalf("proc = %+v\nwant   %+v", got.Proc, want)
			}
			if tc.wantCg == nil {
				if _, ok := got.Cgroup.(struct{}); !ok {
					t.Fatalf("cgroup = %#v, want empty", got.Cgroup)
				}
			} else if cg, ok := got.Cgroup.(*CgroupTrace); !ok || *cg != *tc.wantCg {
				t.Fatalf("cgroup = %+v, want %+v", got.Cgroup, tc.wantCg)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTracerChildrenRusage(t *testing.T) {
	clk := &clock{now: time.Unix(0, 0)}
	tr := NewTracer(TracerOptions{ProcRoot: t.TempDir(), CgroupRoot: t.TempDir(), Interval: time.Hour, Now: clk.Now})
	calls := 0
	tr.rusage = func() (syscall.Rusage, error) {
		calls++
		if calls == 1 {
			return syscall.Rusage{Utime: syscall.Timeval{Sec: 10}, Nvcsw: 100, Maxrss: 10}, nil
		}
		return syscall.Rusage{Utime: syscall.Timeval{Sec: 12}, Stime: syscall.Timeval{Sec: 1}, Nvcsw: 150, Nivcsw: 7, Maxrss: 2048, Inblock: 2, Oublock: 4}, nil
	}
	if err := tr.StartChildren(); err != nil {
		t.Fatal(err)
	}
	clk.now = clk.now.Add(6 * time.Second)
	tr.Stop()
	p := tr.Trace().Proc
	if p.Realtime != 6000 || p.PctCPU != 500 || p.VolCtxt != 50 || p.InvCtxt != 7 || p.PeakRSS != 2048<<10 || p.ReadBytes != 1024 || p.WriteBytes != 2048 {
		t.Fatalf("proc = %+v", p)
	}
}

func TestTracerJSONShape(t *testing.T) {
	tr := NewTracer(TracerOptions{ProcRoot: t.TempDir(), CgroupRoot: t.TempDir()})
	tr.Stop() // never started: a no-op
	var buf bytes.Buffer
	if err := tr.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	for _, k := range []string{"realtime", "pct_cpu", "cpu_name", "rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes",
		"vmem", "rss", "peak_vmem", "peak_rss", "pct_mem", "vol_ctxt", "inv_ctxt"} {
		if _, ok := doc["proc"][k]; !ok {
			t.Errorf("proc.%s missing in %s", k, buf.Bytes())
		}
	}
	if doc["gpu"] == nil || len(doc["gpu"]) != 0 || doc["cgroup"] == nil {
		t.Errorf("gpu and cgroup must be objects: %s", buf.Bytes())
	}
}

// TestTracerLive traces a real busy child of this process.
func TestTracerLive(t *testing.T) {
	tr := NewTracer(TracerOptions{Interval: 20 * time.Millisecond})
	if err := tr.StartChildren(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; head -c 100000 /dev/zero > /dev/null`)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	tr.Stop()
	var buf bytes.Buffer
	if err := tr.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	p := tr.Trace().Proc
	if p.Realtime <= 0 || p.PctCPU <= 0 || p.PeakRSS <= 0 {
		t.Fatalf("implausible live trace: %s", buf.Bytes())
	}
	t.Logf("%s", buf.Bytes())
}
