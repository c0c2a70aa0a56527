package cli

import (
	"log/slog"
	"runtime/debug"
)

// setMemoryLimit applies cfg's soft memory limit to the Go runtime
// (runtime/debug.SetMemoryLimit): the collector then runs as often as it
// takes to keep ferry's memory under it, instead of letting the heap grow
// to twice what is live (go-fuse's request buffers and readahead come and
// go in bursts of 1 MiB buffers). It is soft: memory that is live stays,
// and the collector never takes more than about half the CPU. GOMEMLIMIT,
// when set, wins (the runtime has read it already).
func setMemoryLimit(limit int64, getenv func(string) string, log *slog.Logger) {
	if getenv("GOMEMLIMIT") != "" {
		log.Debug("memory limit from GOMEMLIMIT", "limit", getenv("GOMEMLIMIT"))
		return
	}
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
}
