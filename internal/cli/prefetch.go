package cli

import (
	"context"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/supervise"
)

// newPrefetchCmd is "ferry prefetch <path|glob>…".
func newPrefetchCmd(ctx context.Context, stdio IO) *cobra.Command {
	cfg := config.Defaults()
	files := supervise.DefaultPrefetchFiles
	cmd := &cobra.Command{
		Use:   "prefetch [flags] <path|glob>…",
		Short: "warm the read cache with files under the mount point, before or during a task",
		Long: `prefetch downloads objects into the block cache under --cache-dir, so that a
ferry using the same cache directory (a running task's, or the next one) reads
them from local disk.

A path is a file or directory under the mount point (/fusion/s3/<bucket>/<key>)
or a URL (s3://<bucket>/<key>, gs://…, az://…); a directory means every file
under it. Quote glob patterns (*, ?, [...]; * does not cross /) so that ferry
expands them by listing the bucket rather than the shell through the mount:

  ferry prefetch '/fusion/s3/bucket/ref/*.fa' /fusion/s3/bucket/index/

prefetch never reads through the mount, so it works inside a task and on its
own (no mount needed). It shows a progress bar on a terminal and logs progress
every 5 s otherwise; it exits 1 if any file could not be fetched.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags(), &cfg, stdio.Getenv); err != nil {
				return err
			}
			if f := cmd.Flags().Lookup("files"); f != nil && !f.Changed {
				if v := stdio.Getenv("FERRY_PREFETCH_FILES"); v != "" {
					n, err := strconv.Atoi(v)
					if err != nil {
						return err
					}
					files = n
				}
			}
			log, closeLog, err := newLogger(cfg, stdio.Stderr)
			if err != nil {
				return err
			}
			defer closeLog()
			sctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return supervise.Prefetch(sctx, cfg, args, supervise.PrefetchOptions{
				Logger:   log,
				Progress: newProgress(stdio.Stderr, log, progressOptions{Terminal: isTerminal(stdio.Stderr)}),
				Files:    files,
			})
		},
	}
	bindFlags(cmd.Flags(), &cfg)
	cmd.Flags().IntVar(&files, "files", files, "files downloaded at once (env FERRY_PREFETCH_FILES)")
	return cmd
}
