package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Config is the effective configuration of one ferry process.
type Config struct {
	MountPoint string // where /fusion is mounted
	CacheDir   string // staging (writeback) and block cache root
	CacheSize  int64  // byte limit of the block cache; 0 = automatic
	AllowOther bool   // FUSE allow_other: users other than ferry's may use the mount

	StatTTL     time.Duration // how long a stat result is trusted
	ListTTL     time.Duration // how long a directory listing is trusted
	NegativeTTL time.Duration // how long "no such key" is trusted

	RequestTimeout time.Duration // per backend request attempt
	MaxRetries     int           // attempts per backend request
	DrainTimeout   time.Duration // deadline for making every write durable at exit
	Uploads        int           // parallel upload requests
	Downloads      int           // parallel ranged GETs
	PartSize       int64         // base multipart part size
	// FillRandomUpTo: after random reads of an object up to this size, the
	// rest of it is fetched into the cache in the background (0 = never).
	FillRandomUpTo int64
	// MemoryLimit is the soft limit of the Go runtime's memory
	// (runtime/debug.SetMemoryLimit); 0 = none (GOMEMLIMIT wins when set).
	MemoryLimit int64
	// Passthrough is auto, on or off: whether opens of wholly cached files
	// hand the kernel the cache file (FUSE passthrough, Linux 6.9+).
	Passthrough string
	// ColdPassthrough is auto, on, off or unguarded: whether read-only
	// opens of files not yet wholly cached pass through too, the cache
	// filling each range as the kernel asks for it (fanotify pre-content
	// events, Linux 6.14+; needs Passthrough). auto and on give such files
	// only to the task's processes, whose mappings ferry guards; unguarded
	// to every process (a mapping made before the file is whole reads
	// zeros where it is not cached).
	ColdPassthrough string
	// WritePassthrough is auto, on or off: whether opens for writing of
	// a file created or truncated here hand the kernel its staging file
	// (it writes it at local-disk speed; needs Passthrough and Linux
	// 6.13+, else writes go through ferry). auto: the task's processes
	// only (ferry run); on: every process, ferry mount's too.
	WritePassthrough string
	// DirReadahead: when a process reads the files of a directory one
	// after the other, fetch the next ones before it opens them.
	DirReadahead bool

	LogLevel    string // debug, info, warn, error
	LogFile     string // JSON log file ("" = none)
	MetricsAddr string // host:port of the /metrics listener ("" = off)
	Debug       bool   // extra invariant checks

	MaxMountRetries int // Nextflow: attempts to see .command.sh before exit 127
	// StageInputs turns input staging on or off: StageAuto (on under
	// Nextflow, i.e. FUSION_WORK set and the task a .command.run), StageOn
	// (whenever the task is a .command.run) or StageOff.
	StageInputs string
	// IsolateCache is auto, on or off: whether ferry run starts the task
	// in a mount namespace of its own where CacheDir is covered (auto:
	// when the namespace can be made, else a warning; on: a start-up
	// failure instead; off: never).
	IsolateCache string
}

// Values of Config.IsolateCache (the spellings of ParseSwitch).
const (
	IsolateAuto = StageAuto
	IsolateOn   = StageOn
	IsolateOff  = StageOff
)

// Values of Config.StageInputs.
const (
	StageAuto = "auto"
	StageOn   = "on"
	StageOff  = "off"
)

// ParseSwitch maps auto/on/off and the usual booleans (true, false, 1, 0,
// yes, no) to StageAuto, StageOn or StageOff.
func ParseSwitch(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", StageAuto:
		return StageAuto, nil
	case StageOn, "true", "1", "yes":
		return StageOn, nil
	case StageOff, "false", "0", "no":
		return StageOff, nil
	}
	return "", fmt.Errorf("%q is not one of auto, on, off", s)
}

// Defaults returns the zero-configuration defaults.
func Defaults() Config {
	return Config{
		MountPoint:       "/fusion",
		CacheDir:         filepath.Join(os.TempDir(), "ferry-cache"),
		StatTTL:          time.Minute,
		ListTTL:          30 * time.Second,
		NegativeTTL:      5 * time.Second,
		RequestTimeout:   60 * time.Second,
		MaxRetries:       8,
		DrainTimeout:     30 * time.Minute,
		Uploads:          64,
		Downloads:        32,
		PartSize:         16 << 20,
		FillRandomUpTo:   8 << 30,
		MemoryLimit:      96 << 20,
		Passthrough:      "auto",
		ColdPassthrough:  "auto",
		WritePassthrough: "auto",
		DirReadahead:     true,
		LogLevel:         "info",
		MaxMountRetries:  10,
		StageInputs:      StageAuto,
		IsolateCache:     IsolateAuto,
	}
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.MountPoint == "" || !filepath.IsAbs(c.MountPoint) {
		errs = append(errs, fmt.Errorf("mount point %q must be an absolute path", c.MountPoint))
	}
	if c.CacheDir == "" {
		errs = append(errs, errors.New("cache dir must be set"))
	}
	if c.CacheSize < 0 || c.FillRandomUpTo < 0 || c.MemoryLimit < 0 {
		errs = append(errs, errors.New("cache size, fill-random-up-to and memory limit must not be negative"))
	}
	switch c.Passthrough {
	case "auto", "on", "off":
	default:
		errs = append(errs, fmt.Errorf("passthrough %q: want auto, on or off", c.Passthrough))
	}
	switch c.ColdPassthrough {
	case "auto", "on", "off", "unguarded":
	default:
		errs = append(errs, fmt.Errorf("cold passthrough %q: want auto, on, off or unguarded", c.ColdPassthrough))
	}
	switch c.WritePassthrough {
	case "auto", "on", "off":
	default:
		errs = append(errs, fmt.Errorf("write passthrough %q: want auto, on or off", c.WritePassthrough))
	}
	if (c.ColdPassthrough == "on" || c.ColdPassthrough == "unguarded") && c.Passthrough == "off" {
		errs = append(errs, errors.New("cold passthrough on needs passthrough (it is off)"))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, errors.New("request timeout must be positive"))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, errors.New("drain timeout must be positive"))
	}
	if c.MaxRetries < 1 {
		errs = append(errs, errors.New("max retries must be at least 1"))
	}
	if c.Uploads < 1 || c.Downloads < 1 {
		errs = append(errs, errors.New("uploads and downloads must be at least 1"))
	}
	if c.PartSize < 5<<20 {
		errs = append(errs, errors.New("part size must be at least 5MiB"))
	}
	if _, err := ParseSwitch(c.StageInputs); err != nil {
		errs = append(errs, fmt.Errorf("stage inputs: %w", err))
	}
	if _, err := ParseSwitch(c.IsolateCache); err != nil {
		errs = append(errs, fmt.Errorf("isolate cache: %w", err))
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "warning", "error", "trace":
	default:
		errs = append(errs, fmt.Errorf("log level %q is not one of debug, info, warn, error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// ParseSize parses sizes such as "100M" (Nextflow's FUSION_CACHE_SIZE form,
// M = MiB), "20GiB", "1.5G", "4096" (bytes).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	if t == "" {
		return 0, errors.New("empty size")
	}
	mult := int64(1)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
		{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
	}
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	var f float64
	if _, err := fmt.Sscanf(t, "%g", &f); err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return int64(f * float64(mult)), nil
}
