package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/supervise"
)

// Build information, stamped by the linker (-X).
var (
	Version = "dev"
	Commit  = "unknown"
)

// IO is where the commands read and write.
type IO struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Main runs the command line for args (os.Args) and returns the exit code.
// Invoked as "fusion" (argv[0]), it behaves like "ferry run -- <cmd>…".
func Main(ctx context.Context, args []string, stdio IO) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	if len(args) > 1 && args[1] == supervise.GuardArg {
		return supervise.GuardMain(args[2:]) // started by ferry itself (supervise/cold.go)
	}
	if len(args) > 1 && args[1] == supervise.TaskArg {
		return supervise.TaskMain(args[2:]) // ferry run's task starter (supervise/mapguard.go)
	}
	if isFusion(args[0]) {
		return runFusion(ctx, args[1:], stdio)
	}
	code := 0
	root := newRoot(ctx, stdio, &code)
	root.SetArgs(args[1:])
	if err := root.Execute(); err != nil {
		fmt.Fprintln(stdio.Stderr, "ferry:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func isFusion(argv0 string) bool {
	return filepath.Base(argv0) == "fusion"
}

// runFusion is the Nextflow launch form: "fusion <cmd> …" or
// "fusion /usr/bin/fusion <cmd> …" (the self-reference is stripped);
// with no command, WAVE_ENTRY_CHAIN if set, else a shell.
func runFusion(ctx context.Context, args []string, stdio IO) int {
	for len(args) > 0 && isFusion(args[0]) {
		args = args[1:]
	}
	if len(args) == 0 {
		if chain := stdio.Getenv("WAVE_ENTRY_CHAIN"); chain != "" {
			args = strings.Fields(chain)
		} else {
			args = []string{"/bin/sh"}
		}
	}
	cfg := config.Defaults()
	code := 0
	cmd := newRunCmd(ctx, stdio, &cfg, &code)
	if err := applyEnv(cmd.Flags(), &cfg, stdio.Getenv); err != nil {
		fmt.Fprintln(stdio.Stderr, "ferry:", err)
		return supervise.ExitStartFailure
	}
	nf, err := supervise.NewNextflow(supervise.NextflowConfig{Getenv: stdio.Getenv, Environ: os.Environ(), Config: cfg})
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "ferry:", err)
		return supervise.ExitStartFailure
	}
	defer nf.Close()
	if cfg.LogFile == "" {
		cfg.LogFile = nf.LogFile() // becomes $FUSION_WORK/.fusion.log
	}
	log, closeLog, err := newLogger(cfg, stdio.Stderr)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "ferry:", err)
		return supervise.ExitStartFailure
	}
	defer closeLog()
	setMemoryLimit(cfg.MemoryLimit, stdio.Getenv, log)
	nf.LogEnv(log)
	return supervise.Run(ctx, cfg, args, supervise.Options{Logger: log, Nextflow: nf, Progress: progressFor(stdio, log)})
}

// progressFor renders drain progress: a bar on a terminal, log lines otherwise.
func progressFor(stdio IO, log *slog.Logger) supervise.ProgressFunc {
	return newProgress(stdio.Stderr, log, progressOptions{Terminal: isTerminal(stdio.Stderr)})
}

func newRoot(ctx context.Context, stdio IO, code *int) *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "ferry mounts S3, GCS and Azure buckets at /fusion for a task and makes its outputs durable",
		Long: `ferry is a sidecar file system for task containers. It mounts object storage at
/fusion (/fusion/s3/<bucket>/…, /fusion/gs/<bucket>/…, /fusion/az/<container>/…),
runs the task, and before exiting makes every byte the task wrote durable in the
bucket. Installed as /usr/bin/fusion it is a drop-in for Nextflow's fusion.enabled.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdio.Stdout)
	root.SetErr(stdio.Stderr)
	cfg := config.Defaults()
	root.AddCommand(newRunCmd(ctx, stdio, &cfg, code), newMountCmd(ctx, stdio, code), newVersionCmd(stdio), newConfigCmd(stdio), newPrefetchCmd(ctx, stdio))
	return root
}

func newRunCmd(ctx context.Context, stdio IO, cfg *config.Config, code *int) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run [flags] -- <command> [args…]",
		Short: "mount, run a task, make its outputs durable, exit with its code (174 if not durable)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags(), cfg, stdio.Getenv); err != nil {
				*code = supervise.ExitStartFailure
				return err
			}
			*code = runWith(ctx, stdio, *cfg, args)
			return nil
		},
	}
	bindFlags(cmd.Flags(), cfg)
	return cmd
}

func runWith(ctx context.Context, stdio IO, cfg config.Config, args []string) int {
	log, closeLog, err := newLogger(cfg, stdio.Stderr)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "ferry:", err)
		return supervise.ExitStartFailure
	}
	defer closeLog()
	setMemoryLimit(cfg.MemoryLimit, stdio.Getenv, log)
	return supervise.Run(ctx, cfg, args, supervise.Options{Logger: log, Progress: progressFor(stdio, log)})
}

func newMountCmd(ctx context.Context, stdio IO, code *int) *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "mount [flags] <dir>",
		Short: "mount in the foreground until SIGTERM/SIGINT, then drain and unmount",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags(), &cfg, stdio.Getenv); err != nil {
				*code = supervise.ExitStartFailure
				return err
			}
			if len(args) == 1 {
				abs, err := filepath.Abs(args[0])
				if err != nil {
					return err
				}
				cfg.MountPoint = abs
			}
			log, closeLog, err := newLogger(cfg, stdio.Stderr)
			if err != nil {
				*code = supervise.ExitStartFailure
				return err
			}
			defer closeLog()
			setMemoryLimit(cfg.MemoryLimit, stdio.Getenv, log)
			sctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			*code = supervise.Mount(sctx, cfg, supervise.Options{Logger: log, Progress: progressFor(stdio, log)})
			return nil
		},
	}
	bindFlags(cmd.Flags(), &cfg)
	return cmd
}

func newVersionCmd(stdio IO) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print version, commit and Go version",
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintf(stdio.Stdout, "ferry %s (commit %s, %s, %s/%s)\n", Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}

// newLogger builds the text-to-stderr logger (and a JSON file logger).
func newLogger(cfg config.Config, stderr io.Writer) (*slog.Logger, func(), error) {
	lvl := parseLevel(cfg.LogLevel)
	handlers := []slog.Handler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})}
	closer := func() {}
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("log file: %w", err)
		}
		handlers = append(handlers, slog.NewJSONHandler(f, &slog.HandlerOptions{Level: lvl}))
		closer = func() { f.Close() }
	}
	return slog.New(slog.NewMultiHandler(handlers...)).With("app", "ferry"), closer, nil
}

func parseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug", "trace":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
