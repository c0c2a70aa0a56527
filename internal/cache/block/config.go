package block

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// Defaults used for zero fields of Config.
const (
	DefaultBlockSize      = 1 << 20   // 1 MiB: the cache, checksum-file and random-read unit
	DefaultPartSize       = 8 << 20   // 8 MiB: the largest ranged GET of readahead and Prefetch
	DefaultMaxConcurrency = 32        // parallel ranged GETs, all readers together
	DefaultReadaheadMax   = 128 << 20 // per-handle readahead window
	DefaultMemoryBudget   = 256 << 20 // bytes of fetch buffers in RAM, all fetches together
	defaultMinFreeCap     = 1 << 30   // MinFreeBytes default: min(1 GiB, 5% of the disk)
	minDefaultMaxBytes    = 256 << 20 // the default MaxBytes never goes below this
	bufSize               = 64 << 10  // one fetch's RAM buffer (data streams through it to disk; 128 KiB cost 2 MiB more RSS with 32 fetches in flight for no speed, 256 KiB 5 MiB)
)

// Config configures a Cache. The zero value of every field but Dir selects
// its default.
type Config struct {
	// Dir is the cache root (the vfs passes <cache-dir>/blocks). It is
	// created with mode 0700; block files are 0600. Several processes may
	// share one Dir: blocks written by one are served to the others.
	Dir string
	// MaxBytes is the byte limit of cached blocks (on-disk size). 0 means
	// half of the free space of Dir's file system minus MinFreeBytes (at
	// least 256 MiB).
	MaxBytes int64
	// MinFreeBytes is the free space the evictor keeps on Dir's file
	// system. 0 means min(1 GiB, 5% of the file system).
	MinFreeBytes int64
	// BlockSize is the size of one cached block, a multiple of 4 KiB
	// between 64 KiB and 64 MiB; default 1 MiB. A random read fetches the
	// one block holding it. Processes sharing a Dir with different block
	// sizes do not share blocks.
	BlockSize int64
	// PartSize is the largest ranged GET issued by readahead and Prefetch
	// (a multiple of BlockSize, rounded up); default 8 MiB.
	PartSize int64
	// MaxConcurrency is the number of parallel ranged GETs, all readers
	// together; default 32.
	MaxConcurrency int
	// ReadaheadMax is the largest readahead window of one Reader; default
	// 128 MiB. The open Readers' windows together stay within MaxBytes/4.
	// Readahead lands on disk, not in RAM.
	ReadaheadMax int64
	// MemoryBudget bounds the bytes of fetch buffers in RAM, all fetches
	// together; default 256 MiB. Each running GET holds one 64 KiB buffer
	// (data streams through it to the block file), so the budget also caps
	// the number of parallel GETs at MemoryBudget/64 KiB (and as many
	// again of small objects, on the small workers of workers.go).
	MemoryBudget int64
	// FillRandomUpTo, when > 0, makes a Reader that detects random access
	// on an object of at most this many bytes warm the rest of that object
	// in the background at the lowest priority (what s3fs and rclone do on
	// a miss). 0 (the default) fetches only the blocks reads touch.
	FillRandomUpTo int64
	// Logger receives warnings (evictions failing, corrupt blocks); nil
	// discards them.
	Logger *slog.Logger
}

// withDefaults validates cfg, creates Dir and fills in zero fields.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Dir == "" {
		return cfg, fmt.Errorf("block: Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return cfg, fmt.Errorf("block: cache dir: %w", err)
	}
	cfg.Dir = dir
	if err := os.MkdirAll(filepath.Join(dir, layoutDir), 0o700); err != nil {
		return cfg, fmt.Errorf("block: cache dir: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.BlockSize%4096 != 0 || cfg.BlockSize < 64<<10 || cfg.BlockSize > 64<<20 {
		return cfg, fmt.Errorf("block: BlockSize %d is not a multiple of 4 KiB between 64 KiB and 64 MiB", cfg.BlockSize)
	}
	if cfg.PartSize <= 0 {
		cfg.PartSize = DefaultPartSize
	}
	cfg.PartSize = (cfg.PartSize + cfg.BlockSize - 1) / cfg.BlockSize * cfg.BlockSize
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = DefaultMaxConcurrency
	}
	if cfg.MemoryBudget <= 0 {
		cfg.MemoryBudget = DefaultMemoryBudget
	}
	if cfg.MemoryBudget < bufSize {
		return cfg, fmt.Errorf("block: MemoryBudget %d is below one fetch buffer (%d)", cfg.MemoryBudget, bufSize)
	}
	if cfg.ReadaheadMax <= 0 {
		cfg.ReadaheadMax = DefaultReadaheadMax
	}
	if cfg.MinFreeBytes < 0 || cfg.MaxBytes < 0 {
		return cfg, fmt.Errorf("block: negative MaxBytes or MinFreeBytes")
	}
	free, total, err := diskSpace(dir)
	if err != nil {
		return cfg, fmt.Errorf("block: statfs %s: %w", dir, err)
	}
	if cfg.MinFreeBytes == 0 {
		cfg.MinFreeBytes = min(defaultMinFreeCap, total/20)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = max(minDefaultMaxBytes, (free-cfg.MinFreeBytes)/2)
	}
	cfg.ReadaheadMax = max(cfg.BlockSize, min(cfg.ReadaheadMax, cfg.MaxBytes/4))
	return cfg, nil
}

// workers is the number of fetch goroutines: the concurrency budget, capped
// by the memory budget.
func (cfg Config) workers() int {
	return max(1, min(cfg.MaxConcurrency, int(cfg.MemoryBudget/bufSize)))
}

// diskSpace returns the bytes available to us and the size of the file
// system holding dir.
func diskSpace(dir string) (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
