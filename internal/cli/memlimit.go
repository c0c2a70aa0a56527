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
	setGCPercent(getenv)
	if getenv("GOMEMLIMIT") != "" {
		log.Debug("memory limit from GOMEMLIMIT", "limit", getenv("GOMEMLIMIT"))
		return
	}
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
}

// gcPercent is ferry's GOGC: the heap may grow by half of what is live
// before a collection, not by all of it. ferry's live heap is small (12-15
// MiB while 32 readers read a cold file: fetch buffers, go-fuse's request
// buffers, the stat cache's sketch) and its allocation rate low, so the
// collector costs no measurable CPU more, and a ferry per task keeps 2-4
// MiB less resident (2026-12-01: peak 51 against 55 MiB, 32 fio jobs).
const gcPercent = 50

// setGCPercent applies gcPercent unless GOGC is set (the runtime has read
// it already).
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
