package supervise

import (
	"encoding/json"
	"math"
	"os"
	"syscall"
	"time"
)

// SummaryType is the "type" field of the exit summary, for log pipelines
// that pick the line out of stderr.
const SummaryType = "ferry.summary"

// Summary is the one-line JSON record ferry writes to stderr at exit (and
// under Nextflow to $FUSION_WORK/.fusion/summary.json). finish fills it;
// JSON encodes it. Durations are seconds, sizes bytes.
type Summary struct {
	Type     string `json:"type"` // always SummaryType
	ExitCode int    `json:"exit_code"`
	// WallSeconds is ferry's whole run: mount, task, drain, unmount.
	WallSeconds float64 `json:"wall_seconds"`
	// TaskSeconds is the task's own wall time, start to exit.
	TaskSeconds float64 `json:"task_seconds"`
	// UserSeconds and SysSeconds are the CPU time of the task's process
	// tree (see TaskCPU); ComputeSeconds is their sum.
	UserSeconds    float64 `json:"cpu_user_seconds"`
	SysSeconds     float64 `json:"cpu_sys_seconds"`
	ComputeSeconds float64 `json:"compute_seconds"`
	// Efficiency is the data-handling efficiency: ComputeSeconds /
	// WallSeconds, the share of the run the task spent computing rather
	// than waiting for data (Fusion's headline figure). A multithreaded
	// task can exceed 1. Set by Finalize.
	Efficiency float64 `json:"efficiency"`
	// BytesReadCache are bytes the task read that were in the block
	// cache; BytesReadNetwork are bytes it read that had to be fetched
	// first. Their sum is what the task read through the cache.
	BytesReadCache   int64 `json:"bytes_read_cache"`
	BytesReadNetwork int64 `json:"bytes_read_network"`
	// PassthroughFiles counts opens served by the kernel from cache files
	// (FUSE passthrough); their reads never reach ferry, so
	// BytesPassthrough is the files' sizes, the most they can have read.
	PassthroughFiles int64 `json:"passthrough_files"`
	BytesPassthrough int64 `json:"bytes_passthrough"`
	// ColdFiles counts, of PassthroughFiles, the opens of files not yet
	// wholly cached (cold passthrough); their reads the kernel asked ferry
	// about are counted in BytesReadCache and BytesReadNetwork, and
	// ReadsDenied of them failed with EIO.
	ColdFiles   int64 `json:"passthrough_cold_files,omitempty"`
	ReadsDenied int64 `json:"reads_denied,omitempty"`
	// BytesDownloaded are all payload bytes received from the object
	// store (readahead beyond what was read included).
	BytesDownloaded int64 `json:"bytes_downloaded"`
	// BytesUploaded and ObjectsUploaded come from the write-back queue.
	BytesUploaded   int64 `json:"bytes_uploaded"`
	ObjectsUploaded int64 `json:"objects_uploaded"`
	// NotDurableFiles is the number of files still pending after the
	// drain (non-zero goes with exit code 174).
	NotDurableFiles int     `json:"not_durable_files"`
	DrainSeconds    float64 `json:"drain_seconds"`
	// Retries are retried backend attempts; Errors are backend calls that
	// failed for good (permission, throttled, other), not "not found".
	Retries int64 `json:"retries"`
	Errors  int64 `json:"errors"`
	// Stage is the input staging of a Nextflow task (absent when off).
	Stage *StageSummary `json:"stage,omitempty"`
	// DirReadahead is what directory readahead fetched (absent when off).
	DirReadahead *DirReadaheadSummary `json:"dir_readahead,omitempty"`
}

// DirReadaheadSummary is the "dir_readahead" object of the exit summary:
// files fetched before the task opened them (whole cache blocks).
type DirReadaheadSummary struct {
	Files          int64 `json:"files"`           // files predicted
	PredictedBytes int64 `json:"predicted_bytes"` // fetched before the task read them
	HitBytes       int64 `json:"hit_bytes"`       // of those, read by the task without waiting
	WastedBytes    int64 `json:"wasted_bytes"`    // of those, never read
}

// CPUTimes is user and system CPU time.
type CPUTimes struct {
	User, Sys time.Duration
}

// Total returns User + Sys.
func (c CPUTimes) Total() time.Duration { return c.User + c.Sys }

// ChildrenCPU returns getrusage(RUSAGE_CHILDREN): the CPU time of every
// child of this process that has ended and been waited for, with their
// own waited-for descendants. Call it before starting the task and pass
// the result to TaskCPU.
func ChildrenCPU() (CPUTimes, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return CPUTimes{}, err
	}
	return rusageCPU(&ru), nil
}

// TaskCPU returns the CPU time of the task's process tree once the task
// was waited for: the larger of the task's own rusage (ps.SysUsage(),
// which includes the descendants the task waited for) and the growth of
// RUSAGE_CHILDREN since before (which also includes orphans this process
// reaped, e.g. as a subreaper). The two overlap (the task is one of our
// children), so they are not added. ps may be nil (the task never ran).
func TaskCPU(ps *os.ProcessState, before CPUTimes) CPUTimes {
	var own CPUTimes
	if ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
			own = rusageCPU(ru)
		}
	}
	now, err := ChildrenCPU()
	if err != nil {
		return own
	}
	delta := CPUTimes{User: now.User - before.User, Sys: now.Sys - before.Sys}
	if delta.Total() > own.Total() {
		return delta
	}
	return own
}

func rusageCPU(ru *syscall.Rusage) CPUTimes {
	return CPUTimes{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}
}

// SetCPU fills the CPU fields from c.
func (s *Summary) SetCPU(c CPUTimes) {
	s.UserSeconds = c.User.Seconds()
	s.SysSeconds = c.Sys.Seconds()
	s.ComputeSeconds = c.Total().Seconds()
}

// Finalize sets Type, derives Efficiency from ComputeSeconds and
// WallSeconds (0 when WallSeconds is 0), and rounds the seconds to
// milliseconds and Efficiency to four digits.
func (s *Summary) Finalize() {
	s.Type = SummaryType
	s.Efficiency = 0
	if s.WallSeconds > 0 {
		s.Efficiency = math.Round(s.ComputeSeconds/s.WallSeconds*1e4) / 1e4
	}
	for _, f := range []*float64{&s.WallSeconds, &s.TaskSeconds, &s.UserSeconds, &s.SysSeconds, &s.ComputeSeconds, &s.DrainSeconds} {
		*f = math.Round(*f*1e3) / 1e3
	}
}

// JSON returns the summary as one line of JSON ending in a newline, after
// Finalize. The encoding of this struct cannot fail.
func (s Summary) JSON() []byte {
	s.Finalize()
	b, err := json.Marshal(s)
	if err != nil { // only plain numbers and strings: unreachable
		return []byte(`{"type":"` + SummaryType + `","error":"summary encoding failed"}` + "\n")
	}
	return append(b, '\n')
}
