package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Hooks let a caller (the Nextflow contract) shape the drain.
type Hooks struct {
	// OrderLast marks keys that become durable only after every other
	// pending file of their directory (Nextflow's .exitcode).
	OrderLast func(key string) bool
	// PutOptions adds per-object upload options (tags).
	PutOptions func(t writeback.Target) objstore.PutOptions
	// BeforeDrain runs after the task exited and before the drain, with
	// the mount still up (symlink compaction).
	BeforeDrain func(ctx context.Context, mountPoint string) error
	// AfterDrain runs after the drain (upload of logs); its error is logged.
	AfterDrain func(ctx context.Context, mountPoint string) error
	// Summary receives the exit summary (one JSON object) at the very end,
	// with the stores still open (Nextflow: .fusion/summary.json).
	Summary func(ctx context.Context, summary []byte) error
}

// Options are the inputs of Run and Mount besides the configuration.
type Options struct {
	Logger *slog.Logger
	Hooks  Hooks
	Stdout io.Writer // the task's stdout (default os.Stdout)
	Stderr io.Writer // the task's stderr (default os.Stderr)
	// Progress renders a drain that lasts more than a few seconds.
	Progress ProgressFunc
	// Nextflow, when set (FUSION_WORK is), applies the Nextflow task
	// contract: .command.sh wait, .command.log, trace, compaction, tags.
	Nextflow *Nextflow
}

// Run mounts, runs argv as the task, drains and unmounts. It returns the
// process exit code.
func Run(ctx context.Context, cfg config.Config, argv []string, opts Options) int {
	log := opts.Logger
	if len(argv) == 0 {
		log.Error("no command to run")
		return ExitStartFailure
	}
	// Look the binary up before mounting: a lookup on our own mount from
	// this process must not be in flight while we fork.
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		bin = argv[0] // may live on the mount; the child resolves it
	}
	st, err := start(ctx, cfg, log, opts.Nextflow.hooks(opts.Hooks), true)
	if err != nil {
		log.Error("ferry could not start: " + err.Error())
		return ExitStartFailure
	}
	st.obs.progress = opts.Progress
	opts.Nextflow.attach(st)
	stg := startStaging(ctx, st, argv, opts.Nextflow) // input staging, in the background
	if code, ok := opts.Nextflow.prepare(ctx, argv); !ok {
		stg.stop()
		return finish(st, code) // 127: .command.sh never appeared
	}
	opts.Stdout, opts.Stderr = opts.Nextflow.taskOutput(opts.Stdout, opts.Stderr)
	code := runTask(ctx, bin, argv, opts, log, st.obs, st.ended(), st.taskGuard(), st.iso)
	stg.stop()
	return finish(st, code)
}

// start builds the stack and mounts it; for a task (ferry run), it
// first decides whether the task gets a mount namespace of its own.
func start(ctx context.Context, cfg config.Config, log *slog.Logger, hooks Hooks, task bool) (*stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := buildStack(ctx, cfg, log, hooks)
	if err != nil {
		return nil, err
	}
	st.task = task
	if task {
		if st.iso, err = planIsolation(cfg, log); err != nil {
			st.close()
			return nil, err
		}
	}
	if err := st.mount(); err != nil {
		st.close()
		return nil, err
	}
	if err := st.obs.serve(cfg.MetricsAddr); err != nil {
		st.unmount()
		st.close()
		return nil, err
	}
	log.Debug("mounted", "mount_point", cfg.MountPoint, "cache_dir", cfg.CacheDir)
	return st, nil
}

// runTask starts the task in its own process group, forwards signals and
// returns its exit code (128+signal when killed by one). When the mount
// ends under the task (ended is closed: unmounted or aborted from
// outside), the task's process group gets SIGTERM, as when ferry gets
// one, and runTask waits for the task.
//
// With guard, the task starts under the mapping guard (mapguard.go).
// With iso, it starts in a mount namespace of its own where the cache
// directory is covered (isolate.go); when that fails, the task starts as
// without (one warning), or, under --isolate-cache on, not at all (exit
// 1).
func runTask(ctx context.Context, bin string, argv []string, opts Options, log *slog.Logger, obs *observer, ended <-chan struct{}, guard *mapGuard, iso *isolation) int {
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args = argv
	var sock *os.File
	if guard != nil {
		// Through this binary again: it puts the task under the mapping
		// guard (mapguard.go) and execs it.
		var err error
		if cmd, sock, err = guardedCommand(bin, argv); err != nil {
			log.Warn("cold passthrough: the task's mappings cannot be guarded, so its reads of files not wholly cached go through ferry", "err", err.Error())
			cmd, guard = exec.Command(bin, argv[1:]...), nil
			cmd.Args = argv
		}
	}
	cmd.Stdin = os.Stdin
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if opts.Stdout != nil {
		cmd.Stdout = opts.Stdout
	}
	if opts.Stderr != nil {
		cmd.Stderr = opts.Stderr
	}
	// The task cannot go on without its mount: if ferry dies, so does it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// With a tee the task's outputs are pipes: a background process that
	// keeps them open must not block Wait forever.
	cmd.WaitDelay = 10 * time.Second
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	obs.taskStarting()
	started, done := make(chan error, 1), make(chan error, 1)
	go startAndWait(cmd, iso, started, done) // owner: runTask, which reads started and done
	err := <-started
	if ie := (*isolateError)(nil); errors.As(err, &ie) {
		if _, err := iso.unavailable(ie.err); err != nil {
			log.Error("ferry could not start the task: " + err.Error())
			if sock != nil {
				sock.Close()
				cmd.ExtraFiles[0].Close()
			}
			return ExitStartFailure
		}
		go startAndWait(cmd, nil, started, done) // owner: runTask, as above
		err = <-started
	}
	if err != nil {
		log.Error("cannot start the task", "cmd", argv[0], "err", err.Error())
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	pgid := cmd.Process.Pid
	if guard != nil {
		cmd.ExtraFiles[0].Close()
		if err := guard.receive(sock, cmd.Process.Pid); err != nil {
			log.Warn("cold passthrough: the task runs without the mapping guard, so its reads of files not wholly cached go through ferry", "err", err.Error())
		}
		sock.Close()
		defer guard.stop()
	}
	for {
		select {
		case s := <-sigs:
			log.Info("forwarding signal to the task", "signal", s.String())
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-ctx.Done():
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			ctx = context.Background()
		case <-ended:
			log.Error("the mount was unmounted from outside while the task was running; stopping the task (SIGTERM)")
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			ended = nil
		case err := <-done:
			obs.taskEnded(cmd.ProcessState)
			// Background processes the task left in its group would keep
			// files open; ask them to go.
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			return exitCode(err, cmd)
		}
	}
}

// startAndWait starts cmd and waits for it on one OS thread, locked for
// the task's whole life: the kernel sends the task its Pdeathsig when the
// thread that forked it exits, not when ferry does, and the Go runtime
// ends the thread of a goroutine that exits locked (writeback's
// low-priority prefill does, and a task forked from a thread that prefill
// then locked got SIGKILL: exit 137 mid-task, under load in the fault
// suite). It sends Start's error on started (nil once running), then
// Wait's on done.
//
// With iso, the thread first enters the task's mount namespace
// (isolation.enter) and is never unlocked: the runtime ends it with this
// goroutine rather than run other goroutines in that namespace. A failed
// enter is sent on started as an *isolateError, before anything started.
func startAndWait(cmd *exec.Cmd, iso *isolation, started, done chan<- error) {
	runtime.LockOSThread()
	if iso == nil {
		defer runtime.UnlockOSThread()
	} else if err := iso.enter(); err != nil {
		started <- &isolateError{err: err}
		return
	}
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	done <- cmd.Wait()
}

// isolateError is a task namespace that could not be made.
type isolateError struct{ err error }

func (e *isolateError) Error() string { return e.err.Error() }

func exitCode(err error, cmd *exec.Cmd) int {
	if cmd.ProcessState == nil {
		return 1
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
	if err != nil {
		return 1
	}
	return cmd.ProcessState.ExitCode()
}

// finish drains, unmounts and decides the exit code.
func finish(st *stack, code int) int {
	log := st.log
	ctx, cancel := context.WithTimeout(context.Background(), st.cfg.DrainTimeout)
	defer cancel()
	st.noteEnded()
	if st.hooks.BeforeDrain != nil {
		if err := st.hooks.BeforeDrain(ctx, st.cfg.MountPoint); err != nil {
			log.Error("before-drain hook failed", "err", err.Error())
			if errors.Is(err, ErrCompaction) {
				// An output left as a link is an output Nextflow cannot read.
				code = ExitNotDurable
			}
		}
	}
	st.wb.Stop()
	t0 := time.Now()
	derr := st.obs.drain(ctx, st.wb)
	if st.hooks.AfterDrain != nil {
		if err := st.hooks.AfterDrain(ctx, st.cfg.MountPoint); err != nil {
			log.Error("after-drain hook failed", "err", err.Error())
			code = ExitNotDurable // the task's logs are outputs too
		}
	}
	st.unmount()
	stats := st.wb.Stats()
	sum := st.obs.summarize(st.blocks, st.wb, code, derr)
	if st.hooks.Summary != nil {
		if err := st.hooks.Summary(ctx, sum); err != nil {
			log.Warn("exit summary not uploaded", "err", err.Error())
		}
	}
	st.close()
	if derr != nil {
		log.Error(fmt.Sprintf("not every write could be made durable: %v", derr), "drain_seconds", time.Since(t0).Seconds())
		return ExitNotDurable
	}
	log.Debug("drained", "seconds", time.Since(t0).Seconds(), "uploaded_objects", stats.UploadedObjects)
	return code
}

// Mount serves the mount in the foreground until ctx is cancelled (SIGTERM
// or SIGINT) or the mount is unmounted from outside, then drains and
// unmounts.
func Mount(ctx context.Context, cfg config.Config, opts Options) int {
	st, err := start(ctx, cfg, opts.Logger, opts.Hooks, false)
	if err != nil {
		opts.Logger.Error("ferry could not start: " + err.Error())
		return ExitStartFailure
	}
	st.obs.progress = opts.Progress
	select {
	case <-ctx.Done():
	case <-st.ended():
	}
	return finish(st, ExitOK)
}
