package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/nextflow"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// NextflowConfig is the input of NewNextflow.
type NextflowConfig struct {
	// Getenv reads the FUSION_* variables (default os.Getenv).
	Getenv func(string) string
	// Environ is scanned for unknown FUSION_* names (os.Environ()).
	Environ []string
	// Config supplies MountPoint, CacheDir and MaxMountRetries.
	Config config.Config
}

// Nextflow is the Nextflow task contract of one ferry run: object tags,
// .exitcode ordering, the .command.sh wait (exit 127), the .command.log
// tee, symlink compaction, .fusion/trace.json and the upload of the logs.
// A nil *Nextflow is valid and does nothing, so callers need no checks.
//
// Its local files (.command.log, trace.json, the JSON log behind
// .fusion.log) live in a private directory under the cache directory and
// reach the bucket through the object store at the end: ferry never does
// file I/O on its own mount.
type Nextflow struct {
	env    *nextflow.Env
	cfg    config.Config
	dir    string           // private local directory ("" when not a task)
	cmdLog *nextflow.CmdLog // nil when not a task
	tracer *nextflow.Tracer // nil when not a task
	wait   nextflow.WaitOptions

	mu   sync.Mutex   // guards deps
	deps nextflowDeps // set by attach; guarded by mu
}

// nextflowDeps are the parts of the running stack the contract uses.
type nextflowDeps struct {
	fs      *vfs.FS
	resolve func(ctx context.Context, scheme, bucket string) (objstore.Store, error)
	log     *slog.Logger
}

// NewNextflow reads the contract from the environment. Without FUSION_WORK
// (fusion invoked outside Nextflow) only FUSION_TAGS and the .exitcode
// ordering apply. It fails on malformed FUSION_* values (ferry then exits
// 1) or when the private directory cannot be created.
func NewNextflow(nc NextflowConfig) (*Nextflow, error) {
	if nc.Getenv == nil {
		nc.Getenv = os.Getenv
	}
	env, err := nextflow.Parse(nc.Getenv, nextflow.Options{MountPoint: nc.Config.MountPoint, Environ: nc.Environ})
	if err != nil {
		return nil, err
	}
	n := &Nextflow{env: env, cfg: nc.Config, wait: nextflow.WaitOptions{Attempts: nc.Config.MaxMountRetries}}
	if !env.Enabled() {
		return n, nil
	}
	if err := os.MkdirAll(nc.Config.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	n.dir, err = os.MkdirTemp(nc.Config.CacheDir, "nextflow-")
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	n.cmdLog, err = nextflow.CreateCmdLog(filepath.Join(n.dir, "command.log"))
	if err != nil {
		os.RemoveAll(n.dir)
		return nil, err
	}
	n.tracer = nextflow.NewTracer(nextflow.TracerOptions{})
	return n, nil
}

// Env returns the parsed contract (nil for a nil Nextflow).
func (n *Nextflow) Env() *nextflow.Env {
	if n == nil {
		return nil
	}
	return n.env
}

// LogFile returns the local path where ferry's JSON log should go; it is
// uploaded as <work>/.fusion.log after the drain. "" when not a task.
func (n *Nextflow) LogFile() string {
	if n == nil || n.dir == "" {
		return ""
	}
	return filepath.Join(n.dir, "fusion.log")
}

// LogEnv logs, once per call, the FUSION_* variables ferry does not know
// (warn) and those it knows and ignores (debug).
func (n *Nextflow) LogEnv(log *slog.Logger) {
	if n == nil {
		return
	}
	if len(n.env.Unknown) > 0 {
		log.Warn("ignoring unknown FUSION_* variables", "names", n.env.Unknown)
	}
	if len(n.env.Ignored) > 0 {
		log.Debug("FUSION_* variables without effect in ferry", "names", n.env.Ignored)
	}
	if n.env.Enabled() {
		log.Debug("nextflow task", "work", n.env.WorkDir.String(), "tags", n.env.Tags != nil, "compact_symlinks", n.env.CompactSymlinks)
	}
}

// Close closes the command log and removes the private directory (after
// the post-drain upload). Safe on nil and more than once.
func (n *Nextflow) Close() error {
	if n == nil || n.dir == "" {
		return nil
	}
	n.tracer.Stop()
	err := n.cmdLog.Close()
	return errors.Join(err, os.RemoveAll(n.dir))
}

// hooks returns base extended with the contract: .exitcode ordered last,
// FUSION_TAGS as object tags, compaction before the drain, log uploads
// after it. Base hooks run too (theirs first before the drain, after ours
// after it; base PutOptions win over the tags they set).
func (n *Nextflow) hooks(base Hooks) Hooks {
	if n == nil {
		return base
	}
	h := base
	h.OrderLast = func(key string) bool {
		return path.Base(key) == nextflow.ExitCode || (base.OrderLast != nil && base.OrderLast(key))
	}
	if n.env.Tags != nil {
		h.PutOptions = func(t writeback.Target) objstore.PutOptions {
			var o objstore.PutOptions
			if base.PutOptions != nil {
				o = base.PutOptions(t)
			}
			if o.Tags == nil {
				o.Tags = n.env.Tags.Tags(t.Key)
			}
			return o
		}
	}
	h.BeforeDrain = func(ctx context.Context, mountPoint string) error {
		var errs []error
		if base.BeforeDrain != nil {
			errs = append(errs, base.BeforeDrain(ctx, mountPoint))
		}
		errs = append(errs, n.beforeDrain(ctx, mountPoint))
		return errors.Join(errs...)
	}
	h.Summary = func(ctx context.Context, sum []byte) error {
		return n.uploadSummary(ctx, sum)
	}
	h.AfterDrain = func(ctx context.Context, mountPoint string) error {
		errs := []error{n.afterDrain(ctx)}
		if base.AfterDrain != nil {
			errs = append(errs, base.AfterDrain(ctx, mountPoint))
		}
		return errors.Join(errs...)
	}
	return h
}

// attach gives the contract the running stack (after start, before the
// task).
func (n *Nextflow) attach(st *stack) {
	n.setDeps(nextflowDeps{fs: st.fs, resolve: st.stores.resolve, log: st.log})
}

func (n *Nextflow) setDeps(d nextflowDeps) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deps = d
}

func (n *Nextflow) getDeps() nextflowDeps {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deps
}

// prepare runs after the mount and before the task: when argv is the
// Nextflow launcher ("bash <mount>/…/.command.run"), it waits for the
// .command.sh beside it (FUSION_MAX_MOUNT_RETRIES attempts with backoff),
// then starts the tracer. ok is false with the exit code to use (after the
// usual drain) when the task must not run: ExitNoCommand when the script
// never appeared, ExitStartFailure when the bucket could not be asked.
func (n *Nextflow) prepare(ctx context.Context, argv []string) (code int, ok bool) {
	if n == nil || !n.env.Enabled() {
		return 0, true
	}
	d := n.getDeps()
	if run, isLauncher := nextflow.LaunchScript(argv, n.cfg.MountPoint); isLauncher {
		sh := nextflow.CommandScriptOf(run)
		st, err := d.resolve(ctx, sh.Scheme, sh.Bucket)
		if err == nil {
			err = nextflow.WaitCommand(ctx, st, sh.Key, n.wait)
		}
		switch {
		case errors.Is(err, nextflow.ErrCommandMissing):
			d.log.Error(fmt.Sprintf("%s is not visible: %v", sh, err))
			return ExitNoCommand, false
		case err != nil:
			d.log.Error(fmt.Sprintf("cannot check %s: %v", sh, err))
			return ExitStartFailure, false
		}
	}
	if err := n.tracer.StartChildren(); err != nil {
		d.log.Warn("task metrics disabled", "err", err.Error())
	}
	return 0, true
}

// taskOutput returns the task's stdout and stderr: tees into the command
// log that echo to the given writers (os.Stdout / os.Stderr when nil).
// Without a work dir they are returned unchanged.
func (n *Nextflow) taskOutput(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	if n == nil || n.cmdLog == nil {
		return stdout, stderr
	}
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	return n.cmdLog.Tee(stdout), n.cmdLog.Tee(stderr)
}
