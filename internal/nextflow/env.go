package nextflow

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// DefaultMountPoint is where Nextflow expects the mount (FusionConfig.FUSION_PATH's tree).
const DefaultMountPoint = "/fusion"

// Names of the work-dir files of the contract.
const (
	CommandRun  = ".command.run"
	CommandSh   = ".command.sh"
	CommandLog  = ".command.log"
	ExitCode    = ".exitcode"
	FusionLog   = ".fusion.log"
	TraceFile   = ".fusion/trace.json"
	FusionDir   = ".fusion"
	launcherArg = "/" + CommandRun
)

// Variables this package reads.
const (
	VarWork           = "FUSION_WORK"
	VarTags           = "FUSION_TAGS"
	VarLogOutput      = "FUSION_LOG_OUTPUT"
	VarCompactSymlink = "FUSION_COMPACT_SYMLINKS"
)

// appliedElsewhere are FUSION_* variables ferry honours outside this
// package (cli flags, backend drivers).
var appliedElsewhere = []string{
	"FUSION_CACHE_SIZE", "FUSION_CACHE_LOCATION", "FUSION_LOG_LEVEL",
	"FUSION_STOP_SHUTDOWN_TIMEOUT", "FUSION_MAX_MOUNT_RETRIES",
	"FUSION_AWS_REGION", "FUSION_AWS_SERVER_SIDE_ENCRYPTION", "FUSION_AWS_SSEKMS_KEY_ID",
	"FUSION_AZ_MSI_CLIENT_ID",
}

// ignoredVars are FUSION_* variables of the contract that ferry accepts and
// ignores: licensing, Wave-layer markers, features ferry does not have
// (snapshots, metrics files, OTEL tracing, Studios refresh).
var ignoredVars = []string{
	"FUSION_LICENSE_TOKEN", "FUSION_CONFIG_PROFILE", "FUSION_SHOW_GLOBAL_INFO",
	"FUSION_ENABLED", "FUSION_CONTAINER_CONFIG_URL",
	"FUSION_METRICS_ENABLED", "FUSION_METRICS_SAMPLE_INTERVAL", "FUSION_METRICS_FORMAT",
	"FUSION_SNAPSHOTS_TCP_MODE", "FUSION_SNAPSHOT_LOG_LEVEL",
	"FUSION_REFRESH_TIMEOUT", "FUSION_TRACING_DESTINATION",
}

// Location is one place in a bucket: Key is a key or a key prefix without
// a trailing slash ("" for the bucket root).
type Location struct {
	Scheme, Bucket, Key string
}

// Child returns the location of name (a relative slash path) below l.
func (l Location) Child(name string) Location {
	return Location{Scheme: l.Scheme, Bucket: l.Bucket, Key: strings.TrimPrefix(path.Join(l.Key, name), "/")}
}

// Rel renders l as a mount-relative path ("s3/bucket/key").
func (l Location) Rel() string {
	return strings.TrimSuffix(l.Scheme+"/"+l.Bucket+"/"+l.Key, "/")
}

// Path renders l as an absolute path below mountPoint.
func (l Location) Path(mountPoint string) string {
	return path.Join(mountPoint, l.Rel())
}

// String renders l as a URL ("s3://bucket/key").
func (l Location) String() string { return l.Scheme + "://" + l.Bucket + "/" + l.Key }

// ErrNotUnderMount is wrapped by ParsePath for paths outside the mount.
var ErrNotUnderMount = errors.New("path is not under the mount point")

// ParsePath maps an absolute path below mountPoint
// ("/fusion/s3/bucket/a/b") to its location. It fails, wrapping
// ErrNotUnderMount, for paths outside the mount, and for paths that do not
// name at least a bucket of a known scheme (s3, gs, az).
func ParsePath(p, mountPoint string) (Location, error) {
	mp := path.Clean(mountPoint)
	if !path.IsAbs(p) {
		return Location{}, fmt.Errorf("%q: %w (not absolute)", p, ErrNotUnderMount)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." {
			return Location{}, fmt.Errorf("%q: %w (has . or .. components)", p, ErrNotUnderMount)
		}
	}
	c := path.Clean(p)
	rest, ok := strings.CutPrefix(c, strings.TrimSuffix(mp, "/")+"/")
	if !ok {
		return Location{}, fmt.Errorf("%q: %w %s", p, ErrNotUnderMount, mp)
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 || parts[1] == "" {
		return Location{}, fmt.Errorf("%q: %w (no bucket)", p, ErrNotUnderMount)
	}
	switch parts[0] {
	case "s3", "gs", "az":
	default:
		return Location{}, fmt.Errorf("%q: %w (unknown scheme %q, want s3, gs or az)", p, ErrNotUnderMount, parts[0])
	}
	l := Location{Scheme: parts[0], Bucket: parts[1]}
	if len(parts) == 3 {
		l.Key = parts[2]
	}
	return l, nil
}

// Options tune Parse.
type Options struct {
	// MountPoint is where the mount lives; default DefaultMountPoint.
	MountPoint string
	// Environ is the process environment ("K=V" entries), scanned for
	// FUSION_* variables this package does not know. Nil skips the scan.
	Environ []string
}

// Env is the Nextflow contract as read from the environment.
type Env struct {
	// Work is FUSION_WORK as given ("" when unset: not a Nextflow task).
	Work string
	// WorkDir is the work dir's location (zero when Work is "").
	WorkDir Location
	// Tags are the FUSION_TAGS rules; nil when the variable is unset or empty.
	Tags *TagRules
	// LogOutput is FUSION_LOG_OUTPUT as given (Nextflow passes it through;
	// "stdout" is the only value seen in the wild).
	LogOutput string
	// CompactSymlinks is false only when FUSION_COMPACT_SYMLINKS is a false
	// boolean; compaction is on by default, Wave layer or not.
	CompactSymlinks bool
	// Unknown lists the FUSION_* variables of Options.Environ this package
	// does not know, sorted; the caller logs them once and ignores them.
	Unknown []string
	// Ignored lists the known FUSION_* variables that are set but that
	// ferry ignores (FUSION_LICENSE_TOKEN, …), sorted.
	Ignored []string
}

// Enabled reports whether FUSION_WORK was set (a Nextflow task).
func (e *Env) Enabled() bool { return e != nil && e.Work != "" }

// Parse reads the contract's variables through getenv. It returns an error
// naming the variable for a malformed FUSION_WORK (not a
// <mount>/<scheme>/<bucket>/… path), FUSION_TAGS (see ParseTags) or
// FUSION_COMPACT_SYMLINKS (not a boolean); unset variables are not errors.
func Parse(getenv func(string) string, opts Options) (*Env, error) {
	if opts.MountPoint == "" {
		opts.MountPoint = DefaultMountPoint
	}
	e := &Env{CompactSymlinks: true, LogOutput: getenv(VarLogOutput)}
	var errs []error
	if w := strings.TrimSpace(getenv(VarWork)); w != "" {
		l, err := ParsePath(w, opts.MountPoint)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", VarWork, err))
		} else {
			e.Work, e.WorkDir = w, l
		}
	}
	if t := getenv(VarTags); strings.TrimSpace(t) != "" {
		r, err := ParseTags(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", VarTags, err))
		}
		e.Tags = r
	}
	if v := strings.TrimSpace(getenv(VarCompactSymlink)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a boolean", VarCompactSymlink, v))
		} else {
			e.CompactSymlinks = b
		}
	}
	e.Unknown, e.Ignored = classify(opts.Environ)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return e, nil
}

// classify sorts the FUSION_* names of environ into unknown and ignored.
func classify(environ []string) (unknown, ignored []string) {
	known := map[string]bool{VarWork: true, VarTags: true, VarLogOutput: true, VarCompactSymlink: true}
	for _, n := range appliedElsewhere {
		known[n] = true
	}
	skip := map[string]bool{}
	for _, n := range ignoredVars {
		skip[n] = true
	}
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FUSION_") || seen[name] {
			continue
		}
		seen[name] = true
		switch {
		case skip[name]:
			ignored = append(ignored, name)
		case !known[name]:
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	sort.Strings(ignored)
	return unknown, ignored
}
