package nextflow

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Trace is the content of .fusion/trace.json, the schema Nextflow's
// TaskHandler.applyFusionMetrics reads (with NXF_FUSION_TRACE=true the
// proc and cgroup blocks replace .command.trace; gpu is always read).
type Trace struct {
	Proc ProcTrace `json:"proc"`
	// Cgroup is *CgroupTrace, or an empty object when no cgroup was
	// readable (Nextflow then falls back to the proc memory figures).
	Cgroup any `json:"cgroup"`
	// GPU is always an object; empty: ferry has no GPU tracer.
	GPU map[string]any `json:"gpu"`
}

// ProcTrace are the task's process-tree figures. Units follow Nextflow's
// .command.trace after parsing: milliseconds, bytes, and percentages
// multiplied by 10 (pct_cpu 1500 = 1.5 CPUs busy on average).
type ProcTrace struct {
	Realtime   int64  `json:"realtime"` // ms from task start to exit
	PctCPU     int64  `json:"pct_cpu"`  // CPU time / realtime × 1000
	CPUName    string `json:"cpu_name"` // first "model name" of /proc/cpuinfo
	Rchar      int64  `json:"rchar"`
	Wchar      int64  `json:"wchar"`
	Syscr      int64  `json:"syscr"`
	Syscw      int64  `json:"syscw"`
	ReadBytes  int64  `json:"read_bytes"`
	WriteBytes int64  `json:"write_bytes"`
	Vmem       int64  `json:"vmem"`      // summed over the tree, last sample
	RSS        int64  `json:"rss"`       // summed over the tree, last sample
	PeakVmem   int64  `json:"peak_vmem"` // highest sampled sum (at least any VmPeak)
	PeakRSS    int64  `json:"peak_rss"`  // highest sampled sum (at least any VmHWM / ru_maxrss)
	PctMem     int64  `json:"pct_mem"`   // peak_rss / MemTotal × 1000
	VolCtxt    int64  `json:"vol_ctxt"`
	InvCtxt    int64  `json:"inv_ctxt"`
}

// CgroupTrace are the container cgroup's figures (ferry lives in the same
// cgroup, so they include ferry's own memory and CPU, as with Fusion).
// Fields whose file is missing are -1.
type CgroupTrace struct {
	Version       int   `json:"version"`
	MemoryCurrent int64 `json:"memory_current"`  // last sample while the task ran
	MemoryPeak    int64 `json:"memory_peak"`     // memory.peak / max_usage_in_bytes, else the highest sample
	MemoryRSS     int64 `json:"memory_rss"`      // anon (v2) / total_rss (v1), last sample
	MemoryPeakRSS int64 `json:"memory_peak_rss"` // highest sampled memory_rss
	MemoryLimit   int64 `json:"memory_limit"`    // MemTotal when unlimited
	CPUUsageUsec  int64 `json:"cpu_usage_usec"`  // cumulative, at task exit
	CPUUserUsec   int64 `json:"cpu_user_usec"`
	CPUSystemUsec int64 `json:"cpu_system_usec"`
	NrThrottled   int64 `json:"nr_throttled"`
	ThrottledUsec int64 `json:"throttled_usec"`
}

// TracerOptions tune a Tracer; zero values take the defaults.
type TracerOptions struct {
	ProcRoot   string        // default /proc
	CgroupRoot string        // default /sys/fs/cgroup
	Interval   time.Duration // sampling period, default 1s
	Now        func() time.Time
}

// Tracer samples a task's process tree and cgroup while it runs. Start
// launches a sampling goroutine owned by the Tracer; Stop ends it.
type Tracer struct {
	opts    TracerOptions
	rusage  func() (syscall.Rusage, error) // RUSAGE_CHILDREN; tests replace it
	cgroup  cgroupFiles
	memInfo int64

	mu        sync.Mutex // guards the fields below
	root      int
	withRoot  bool
	children  bool            // StartChildren: also use getrusage deltas
	ru0       syscall.Rusage  // RUSAGE_CHILDREN at start
	started   time.Time       // zero until started
	stopped   time.Time       // zero until stopped
	cpuTicks  int64           // highest sampled CPU ticks of the tree
	io        ioCounters      // highest sampled counters
	vol, inv  int64           // highest sampled context switches
	vmem, rss int64           // last sample (bytes)
	peakVmem  int64           // highest sampled sum or VmPeak (bytes)
	peakRSS   int64           // highest sampled sum or VmHWM (bytes)
	cg        *cgroupSample   // last cgroup sample while the task ran
	cgPeak    int64           // highest sampled memory current
	cgPeakRSS int64           // highest sampled rss
	stop      chan struct{}   // closed by Stop
	done      chan struct{}   // closed when the goroutine returns
	cgFinal   *cgroupSample   // cgroup sample at Stop
	ruFinal   *syscall.Rusage // RUSAGE_CHILDREN delta at Stop (children mode)
}

// NewTracer returns a stopped tracer.
func NewTracer(opts TracerOptions) *Tracer {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Tracer{opts: opts, rusage: childrenUsage}
}

func childrenUsage() (syscall.Rusage, error) {
	var ru syscall.Rusage
	err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return ru, err
}

// ErrTracerStarted is returned by a second Start or StartChildren.
var ErrTracerStarted = errors.New("tracer already started")

// Start traces pid and its descendants until Stop.
func (t *Tracer) Start(pid int) error { return t.start(pid, true, false) }

// StartChildren traces every descendant of this process (not the process
// itself) until Stop; at Stop, getrusage(RUSAGE_CHILDREN) fills in what
// exited between samples (CPU time, context switches, peak RSS, block I/O).
// Use it when this process is the task's parent and reaps it before Stop.
func (t *Tracer) StartChildren() error { return t.start(os.Getpid(), false, true) }

func (t *Tracer) start(pid int, withRoot, children bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.started.IsZero() {
		return ErrTracerStarted
	}
	t.root, t.withRoot, t.children = pid, withRoot, children
	if children {
		ru, err := t.rusage()
		if err != nil {
			return err
		}
		t.ru0 = ru
	}
	t.cgroup = findCgroup(t.opts.ProcRoot, "self", t.opts.CgroupRoot)
	t.memInfo = memTotal(t.opts.ProcRoot)
	t.started = t.opts.Now()
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go t.loop(t.stop, t.done) // owner: t; Stop ends it
	return nil
}

func (t *Tracer) loop(stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(t.opts.Interval)
	defer tick.Stop()
	for {
		t.sampleProcs()
		t.sampleCgroup()
		select {
		case <-stop:
			t.sampleProcs() // the tree's last state, if it still runs
			return
		case <-tick.C:
		}
	}
}

// sampleProcs reads the process tree once. File reads happen without the
// lock; only the fold-in holds it.
func (t *Tracer) sampleProcs() {
	t.mu.Lock()
	root, withRoot := t.root, t.withRoot
	t.mu.Unlock()
	var (
		ticks, vmem, rss, vmPeak, vmHWM, vol, inv int64
		io                                        ioCounters
	)
	tree := procTree(t.opts.ProcRoot, root, withRoot)
	page := int64(os.Getpagesize())
	for pid, st := range tree {
		dir := filepath.Join(t.opts.ProcRoot, strconv.Itoa(pid))
		ticks += st.utime + st.stime + st.cutime + st.cstime
		vmem += st.vsize
		rss += st.rssPages * page
		if b, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
			s := parseStatus(b)
			vmPeak, vmHWM = max(vmPeak, s.vmPeak), max(vmHWM, s.vmHWM)
			vol += s.volCtxt
			inv += s.invCtxt
		}
		if b, err := os.ReadFile(filepath.Join(dir, "io")); err == nil {
			io = io.add(parseIO(b))
		}
	}
	if len(tree) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped.IsZero() {
		return
	}
	t.cpuTicks = max(t.cpuTicks, ticks)
	t.io = t.io.max(io)
	t.vol, t.inv = max(t.vol, vol), max(t.inv, inv)
	t.vmem, t.rss = vmem, rss
	t.peakVmem = max(t.peakVmem, vmem, vmPeak)
	t.peakRSS = max(t.peakRSS, rss, vmHWM)
}

// sampleCgroup reads the cgroup once, while the task runs.
func (t *Tracer) sampleCgroup() {
	cg, ok := t.cgroup.read(t.memInfo)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.IsZero() {
		t.cg = &cg
		t.cgPeak = max(t.cgPeak, cg.current)
		t.cgPeakRSS = max(t.cgPeakRSS, cg.rss)
	}
}

// Stop ends sampling (after one last sample) and fixes the task's end
// time. It is idempotent; calling it on a tracer never started is a no-op.
func (t *Tracer) Stop() {
	t.mu.Lock()
	if t.started.IsZero() || !t.stopped.IsZero() {
		t.mu.Unlock()
		return
	}
	stop, done := t.stop, t.done
	t.mu.Unlock()
	close(stop)
	<-done
	cg, cgOK := t.cgroup.read(t.memInfo)
	var ru *syscall.Rusage
	if t.children {
		if r, err := t.rusage(); err == nil {
			ru = &r
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = t.opts.Now()
	if cgOK {
		t.cgFinal = &cg
	}
	if ru != nil {
		d := rusageDelta(*ru, t.ru0)
		t.ruFinal = &d
	}
}

// rusageDelta subtracts the counters of b from a. Maxrss is a high-water
// mark over every child ever reaped, so it is kept only when it grew (then
// it belongs to a child reaped in between), else 0.
func rusageDelta(a, b syscall.Rusage) syscall.Rusage {
	if a.Maxrss <= b.Maxrss {
		a.Maxrss = 0
	}
	return syscall.Rusage{
		Utime:   syscall.NsecToTimeval(a.Utime.Nano() - b.Utime.Nano()),
		Stime:   syscall.NsecToTimeval(a.Stime.Nano() - b.Stime.Nano()),
		Maxrss:  a.Maxrss,
		Nvcsw:   a.Nvcsw - b.Nvcsw,
		Nivcsw:  a.Nivcsw - b.Nivcsw,
		Inblock: a.Inblock - b.Inblock,
		Oublock: a.Oublock - b.Oublock,
	}
}

// Trace returns the figures so far (final after Stop).
func (t *Tracer) Trace() Trace {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := Trace{Cgroup: struct{}{}, GPU: map[string]any{}}
	p := &tr.Proc
	p.CPUName = cpuName(t.opts.ProcRoot)
	if t.started.IsZero() {
		return tr
	}
	end := t.stopped
	if end.IsZero() {
		end = t.opts.Now()
	}
	p.Realtime = end.Sub(t.started).Milliseconds()
	cpuMs := t.cpuTicks * 1000 / clockTicks
	p.Rchar, p.Wchar, p.Syscr, p.Syscw = t.io.rchar, t.io.wchar, t.io.syscr, t.io.syscw
	p.ReadBytes, p.WriteBytes = t.io.readBytes, t.io.writeBytes
	p.Vmem, p.RSS, p.PeakVmem, p.PeakRSS = t.vmem, t.rss, t.peakVmem, t.peakRSS
	p.VolCtxt, p.InvCtxt = t.vol, t.inv
	if ru := t.ruFinal; ru != nil {
		cpuMs = max(cpuMs, (ru.Utime.Nano()+ru.Stime.Nano())/1e6)
		p.PeakRSS = max(p.PeakRSS, ru.Maxrss*1024)
		p.VolCtxt, p.InvCtxt = max(p.VolCtxt, ru.Nvcsw), max(p.InvCtxt, ru.Nivcsw)
		p.ReadBytes = max(p.ReadBytes, ru.Inblock*512)
		p.WriteBytes = max(p.WriteBytes, ru.Oublock*512)
	}
	if p.Realtime > 0 {
		p.PctCPU = cpuMs * 1000 / p.Realtime
	}
	if t.memInfo > 0 {
		p.PctMem = p.PeakRSS * 1000 / t.memInfo
	}
	if t.cg != nil || t.cgFinal != nil {
		tr.Cgroup = t.cgroupTraceLocked()
	}
	return tr
}

func (t *Tracer) cgroupTraceLocked() *CgroupTrace {
	last, final := t.cg, t.cgFinal
	if last == nil {
		last = final
	}
	if final == nil {
		final = last
	}
	c := &CgroupTrace{
		Version:       t.cgroup.version,
		MemoryCurrent: last.current,
		MemoryPeak:    max(final.peak, t.cgPeak),
		MemoryRSS:     last.rss,
		MemoryPeakRSS: max(t.cgPeakRSS, last.rss),
		MemoryLimit:   final.limit,
		CPUUsageUsec:  final.usageUsec,
		CPUUserUsec:   final.userUsec,
		CPUSystemUsec: final.systemUsec,
		NrThrottled:   final.nrThrottled,
		ThrottledUsec: final.throttledUsec,
	}
	if final.peak < 0 && t.cgPeak == 0 {
		c.MemoryPeak = -1
	}
	return c
}

// WriteJSON writes Trace() as JSON.
func (t *Tracer) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	return enc.Encode(t.Trace())
}
