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

// gcPercent is ferry's GOGC: the heap may grow by a quarter of what is
// live before a collection, not by all of it. ferry's live heap is small
// (9-13 MiB while 32 readers read a cold file: go-fuse's 1 MiB request
// buffers, fetch buffers, the stat cache's sketch) and its allocation rate
// low (a collection every second or so then), so the collector costs no
// measurable CPU more, and a ferry per task keeps less resident
// (2026-12-01: GOGC 50 against 100, peak 51 against 55 MiB, 32 fio jobs;
// 2026-12-03, bench/targets.sh read: 25 against 50, the cold jobs' peaks
// 42-45 against 42-47 MiB, cold sequential 0.81 against 0.97 CPU-s/GiB).
const gcPercent = 25

// setGCPercent applies gcPercent unless GOGC is set (the runtime has read
// it already).
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
