package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/ferry-fs/ferry/internal/config"
)

// flagDef binds one flag to a Config field, with its environment
// fallbacks (first set wins; the flag beats them all).
type flagDef struct {
	name  string
	env   []string
	usage string
	bind  func(fs *pflag.FlagSet, c *config.Config, name, usage string)
	// fromEnv applies an environment value; it returns an error for a bad one.
	fromEnv func(c *config.Config, v string) error
	secret  bool
	// noOptDefVal is the value of the flag given without one ("" = a
	// value is required).
	noOptDefVal string
}

func strFlag(get func(*config.Config) *string) (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
	return func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
			p := get(c)
			fs.StringVar(p, name, *p, usage)
		}, func(c *config.Config, v string) error {
			*get(c) = v
			return nil
		}
}

func durFlag(get func(*config.Config) *time.Duration) (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
	return func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
			p := get(c)
			fs.DurationVar(p, name, *p, usage)
		}, func(c *config.Config, v string) error {
			d, err := parseDuration(v)
			if err != nil {
				return err
			}
			*get(c) = d
			return nil
		}
}

// parseDuration accepts Go durations and plain seconds ("30" = 30s).
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

func intFlag(get func(*config.Config) *int) (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
	return func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
			p := get(c)
			fs.IntVar(p, name, *p, usage)
		}, func(c *config.Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return err
			}
			*get(c) = n
			return nil
		}
}

func sizeFlag(get func(*config.Config) *int64) (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
	return func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
			fs.Var(&sizeValue{p: get(c)}, name, usage)
		}, func(c *config.Config, v string) error {
			n, err := config.ParseSize(v)
			if err != nil {
				return err
			}
			*get(c) = n
			return nil
		}
}

func boolFlag(get func(*config.Config) *bool) (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
	return func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
			p := get(c)
			fs.BoolVar(p, name, *p, usage)
		}, func(c *config.Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return err
			}
			*get(c) = b
			return nil
		}
}

type sizeValue struct{ p *int64 }

func (s *sizeValue) String() string {
	if s.p == nil || *s.p == 0 {
		return "auto"
	}
	return fmt.Sprintf("%dMiB", *s.p>>20)
}
func (s *sizeValue) Set(v string) error {
	n, err := config.ParseSize(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}
func (s *sizeValue) Type() string { return "size" }

func def(name, usage string, env []string, pair func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error)) flagDef {
	b, e := pair()
	return flagDef{name: name, env: env, usage: usage, bind: b, fromEnv: e}
}

// flagDefs is the single list of configuration flags.
var flagDefs = []flagDef{
	def("mount-point", "where the buckets are mounted", []string{"FERRY_MOUNT_POINT"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.MountPoint })
		}),
	def("cache-dir", "staging and cache directory (local disk)", []string{"FERRY_CACHE_DIR", "FUSION_CACHE_LOCATION"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.CacheDir })
		}),
	def("allow-other", "let users other than the one running ferry use the mount (FUSE allow_other; as non-root it needs user_allow_other in /etc/fuse.conf)", []string{"FERRY_ALLOW_OTHER"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return boolFlag(func(c *config.Config) *bool { return &c.AllowOther })
		}),
	def("cache-size", "byte limit of the read cache, e.g. 100G; FUSION_CACHE_SIZE uses Nextflow's <MB>M form (auto = a share of free space)", []string{"FERRY_CACHE_SIZE", "FUSION_CACHE_SIZE"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return sizeFlag(func(c *config.Config) *int64 { return &c.CacheSize })
		}),
	def("stat-ttl", "how long a file's metadata is trusted before open revalidates it", []string{"FERRY_STAT_TTL"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return durFlag(func(c *config.Config) *time.Duration { return &c.StatTTL })
		}),
	def("list-ttl", "how long a directory listing is trusted", []string{"FERRY_LIST_TTL"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return durFlag(func(c *config.Config) *time.Duration { return &c.ListTTL })
		}),
	def("negative-ttl", "how long a missing name is trusted", []string{"FERRY_NEGATIVE_TTL"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return durFlag(func(c *config.Config) *time.Duration { return &c.NegativeTTL })
		}),
	def("request-timeout", "timeout of one backend request attempt", []string{"FERRY_REQUEST_TIMEOUT"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return durFlag(func(c *config.Config) *time.Duration { return &c.RequestTimeout })
		}),
	def("max-retries", "attempts per backend request", []string{"FERRY_MAX_RETRIES"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return intFlag(func(c *config.Config) *int { return &c.MaxRetries })
		}),
	def("drain-timeout", "deadline for making every write durable at exit (then exit 174)", []string{"FERRY_DRAIN_TIMEOUT", "FUSION_STOP_SHUTDOWN_TIMEOUT"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return durFlag(func(c *config.Config) *time.Duration { return &c.DrainTimeout })
		}),
	def("uploads", "parallel upload requests", []string{"FERRY_UPLOADS"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return intFlag(func(c *config.Config) *int { return &c.Uploads })
		}),
	def("downloads", "parallel ranged GETs", []string{"FERRY_DOWNLOADS"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return intFlag(func(c *config.Config) *int { return &c.Downloads })
		}),
	def("part-size", "base multipart part size (grows with the file)", []string{"FERRY_PART_SIZE"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return sizeFlag(func(c *config.Config) *int64 { return &c.PartSize })
		}),
	def("fill-random-up-to", "after random reads of an object up to this size, fetch the rest into the cache in the background (0 = never)", []string{"FERRY_FILL_RANDOM_UP_TO"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return sizeFlag(func(c *config.Config) *int64 { return &c.FillRandomUpTo })
		}),
	def("memory-limit", "soft limit of ferry's memory: the Go collector works harder near it (0 = none; GOMEMLIMIT wins)", []string{"FERRY_MEMORY_LIMIT"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return sizeFlag(func(c *config.Config) *int64 { return &c.MemoryLimit })
		}),
	def("passthrough", "auto, on or off: serve reads of wholly cached files with FUSE passthrough (Linux 6.9+, CAP_SYS_ADMIN): the kernel reads the cache file without ferry; auto falls back when unavailable, on fails instead", []string{"FERRY_PASSTHROUGH"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.Passthrough })
		}),
	def("cold-passthrough", "auto, on, off or unguarded: pass the task's read-only opens through even before the file is wholly cached, the cache filling each range as the kernel asks for it (fanotify pre-content events, Linux 6.14+, a cache dir on ext4, xfs or btrfs; ferry makes a file whole before the task maps it); auto falls back when unavailable, on fails instead; unguarded does it for every process, ferry mount's too (a mapping made before the file is whole reads zeros where it is not cached)", []string{"FERRY_COLD_PASSTHROUGH"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.ColdPassthrough })
		}),
	def("write-passthrough", "auto, on or off: let the kernel write the staging file of a file the task creates (or truncates) itself, at local-disk speed (FUSE passthrough for writers; needs --passthrough and Linux 6.13+, else writes go through ferry): auto for the task's processes (ferry run), on for every process (ferry mount's too: a writer that outlives ferry then sees the error only at close)", []string{"FERRY_WRITE_PASSTHROUGH"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.WritePassthrough })
		}),
	def("log-level", "debug, info, warn or error", []string{"FERRY_LOG_LEVEL", "FUSION_LOG_LEVEL"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.LogLevel })
		}),
	def("log-file", "also write a JSON log to this file", []string{"FERRY_LOG_FILE"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.LogFile })
		}),
	def("metrics-addr", "serve Prometheus /metrics on host:port (off when empty)", []string{"FERRY_METRICS_ADDR"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return strFlag(func(c *config.Config) *string { return &c.MetricsAddr })
		}),
	def("max-mount-retries", "Nextflow: attempts to see .command.sh before exiting 127", []string{"FERRY_MAX_MOUNT_RETRIES", "FUSION_MAX_MOUNT_RETRIES"},
		func() (func(*pflag.FlagSet, *config.Config, string, string), func(*config.Config, string) error) {
			return intFlag(func(c *config.Config) *int { return &c.MaxMountRetries })
		}),
	stageInputsFlag,
	dirReadaheadFlag,
	isolateCacheFlag,
}

// isolateCacheFlag is --isolate-cache[=auto|on|off].
var isolateCacheFlag = flagDef{
	name:        "isolate-cache",
	env:         []string{"FERRY_ISOLATE_CACHE"},
	usage:       "run the task (ferry run, fusion) in a mount namespace of its own where the cache dir is covered (empty, read-only): auto (when it can be made, else one warning), on (fail start-up instead), off",
	noOptDefVal: config.IsolateOn,
	bind: func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
		fs.Var(&switchValue{p: &c.IsolateCache}, name, usage)
	},
	fromEnv: func(c *config.Config, v string) error {
		s, err := config.ParseSwitch(v)
		if err != nil {
			return err
		}
		c.IsolateCache = s
		return nil
	},
}

// dirReadaheadFlag is --dir-readahead[=on|off].
var dirReadaheadFlag = flagDef{
	name:        "dir-readahead",
	env:         []string{"FERRY_DIR_READAHEAD"},
	usage:       "on or off: when a process reads the files of a directory one after the other, fetch the next ones into the cache before it opens them",
	noOptDefVal: "on",
	bind: func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
		fs.Var(&onOffValue{p: &c.DirReadahead}, name, usage)
	},
	fromEnv: func(c *config.Config, v string) error {
		return (&onOffValue{p: &c.DirReadahead}).Set(v)
	},
}

// onOffValue is an on/off flag value (the usual booleans accepted).
type onOffValue struct{ p *bool }

func (s *onOffValue) String() string {
	if s.p != nil && *s.p {
		return "on"
	}
	return "off"
}
func (s *onOffValue) Set(v string) error {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "on", "true", "1", "yes":
		*s.p = true
	case "off", "false", "0", "no":
		*s.p = false
	default:
		return fmt.Errorf("%q is not one of on, off", v)
	}
	return nil
}
func (s *onOffValue) Type() string { return "on|off" }

// stageInputsFlag is --stage-inputs[=auto|on|off].
var stageInputsFlag = flagDef{
	name:        "stage-inputs",
	env:         []string{"FERRY_STAGE_INPUTS"},
	usage:       "fetch the inputs a Nextflow task's .command.run stages into the cache in the background from the start: auto (on under Nextflow), on, off",
	noOptDefVal: config.StageOn,
	bind: func(fs *pflag.FlagSet, c *config.Config, name, usage string) {
		fs.Var(&switchValue{p: &c.StageInputs}, name, usage)
	},
	fromEnv: func(c *config.Config, v string) error {
		s, err := config.ParseSwitch(v)
		if err != nil {
			return err
		}
		c.StageInputs = s
		return nil
	},
}

// switchValue is an auto/on/off flag value.
type switchValue struct{ p *string }

func (s *switchValue) String() string {
	if s.p == nil || *s.p == "" {
		return config.StageAuto
	}
	return *s.p
}
func (s *switchValue) Set(v string) error {
	n, err := config.ParseSwitch(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}
func (s *switchValue) Type() string { return "auto|on|off" }

// bindFlags registers every flag on fs, bound to c, with the environment
// variables named in the usage text.
func bindFlags(fs *pflag.FlagSet, c *config.Config) {
	for _, d := range flagDefs {
		usage := d.usage
		if len(d.env) > 0 {
			usage += " (env " + strings.Join(d.env, ", ") + ")"
		}
		d.bind(fs, c, d.name, usage)
		if d.noOptDefVal != "" {
			fs.Lookup(d.name).NoOptDefVal = d.noOptDefVal
		}
	}
}

// applyEnv fills c from the environment for every flag not set on the
// command line. A bad value is an error naming the variable.
func applyEnv(fs *pflag.FlagSet, c *config.Config, getenv func(string) string) error {
	for _, d := range flagDefs {
		if f := fs.Lookup(d.name); f != nil && f.Changed {
			continue
		}
		for _, e := range d.env {
			v := getenv(e)
			if v == "" {
				continue
			}
			if err := d.fromEnv(c, v); err != nil {
				return fmt.Errorf("environment variable %s=%q: %v", e, v, err)
			}
			break
		}
	}
	return nil
}
