package cli

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/ferry-fs/ferry/internal/supervise"
)

// defaultProgressInterval is the time between progress log lines when
// stderr is not a terminal.
const defaultProgressInterval = 5 * time.Second

// progressOptions configure newProgress.
type progressOptions struct {
	// Terminal renders a progress bar on w; otherwise log lines go to log.
	Terminal bool
	// Interval between log lines; default 5 s.
	Interval time.Duration
}

// isTerminal reports whether w is a terminal (a file whose descriptor is
// a tty).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress renders supervise.Progress reports of one transfer after
// another: a bar (bytes, rate, ETA) on a terminal, an info log line every
// Interval (and a last one) otherwise.
type progress struct {
	w    io.Writer
	log  *slog.Logger
	opts progressOptions

	mu      sync.Mutex               // guards the fields below
	bar     *progressbar.ProgressBar // the transfer's bar; nil before its first report
	lastLog time.Duration            // Elapsed of the last log line
	logged  bool                     // a line was logged for this transfer
}

// newProgress returns a ProgressFunc rendering to w (a bar) or log (lines).
func newProgress(w io.Writer, log *slog.Logger, opts progressOptions) supervise.ProgressFunc {
	if opts.Interval <= 0 {
		opts.Interval = defaultProgressInterval
	}
	p := &progress{w: w, log: log, opts: opts}
	return p.report
}

func (p *progress) report(r supervise.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.opts.Terminal {
		p.drawBar(r)
	} else {
		p.logLine(r)
	}
	if r.Final {
		p.bar, p.lastLog, p.logged = nil, 0, false
	}
}

// drawBar updates (creating on the first report) the transfer's bar.
func (p *progress) drawBar(r supervise.Progress) {
	if r.Total <= 0 {
		return // nothing to show (empty files only)
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(r.Total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(describe(r)),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetSpinnerChangeInterval(0), // no ticker goroutine
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionFullWidth(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
	}
	if p.bar.GetMax64() != r.Total {
		p.bar.ChangeMax64(r.Total)
	}
	p.bar.Describe(describe(r))
	_ = p.bar.Set64(r.Done)
	if r.Final {
		if r.Done >= r.Total {
			_ = p.bar.Finish()
		} else {
			_ = p.bar.Exit()
		}
	}
}

func describe(r supervise.Progress) string {
	if r.FilesTotal > 0 {
		return fmt.Sprintf("%s %d/%d files", r.Op, r.Files, r.FilesTotal)
	}
	return r.Op
}

// logLine logs the transfer every Interval, and its end when anything
// was logged before or it ran for at least one Interval.
func (p *progress) logLine(r supervise.Progress) {
	due := r.Elapsed-p.lastLog >= p.opts.Interval
	if !due && !(r.Final && p.logged) {
		return
	}
	p.lastLog, p.logged = r.Elapsed, true
	rate := 0.0
	if s := r.Elapsed.Seconds(); s > 0 {
		rate = float64(r.Done) / s
	}
	attrs := []any{
		"op", r.Op, "done", humanBytes(float64(r.Done)), "total", humanBytes(float64(r.Total)),
		"files", fmt.Sprintf("%d/%d", r.Files, r.FilesTotal),
		"rate", humanBytes(rate) + "/s", "elapsed", r.Elapsed.Round(time.Second).String(),
	}
	if r.Total > 0 {
		attrs = append(attrs, "percent", fmt.Sprintf("%.1f", 100*float64(r.Done)/float64(r.Total)))
	}
	if r.Final {
		p.log.Info(r.Op+" finished", attrs...)
		return
	}
	if rate > 0 && r.Total > r.Done {
		attrs = append(attrs, "eta", time.Duration(float64(r.Total-r.Done)/rate*float64(time.Second)).Round(time.Second).String())
	}
	p.log.Info(r.Op+" progress", attrs...)
}

// humanBytes formats n bytes with IEC units ("12.5 MiB").
func humanBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
