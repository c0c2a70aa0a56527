package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"syscall"

	"github.com/ferry-fs/ferry/internal/cache/hsm"
)

// Cold passthrough (block cache, internal/cache/hsm): once the mount is
// up with FUSE passthrough, a pre-content listener over the block cache's
// directory lets read-only opens pass through before their file is whole.
// A guardian process (this binary again, GuardArg) holds a copy of the
// listener's group so that no read of a hole is allowed when ferry dies:
// it fails them with EIO instead, until nothing uses the mount.

// GuardArg is the hidden first argument that makes this binary the
// guardian of a ferry's pre-content listener (GuardMain).
const GuardArg = "__hsm-guard"

// cold is a running cold passthrough.
type cold struct {
	l     *hsm.Listener
	ctl   *os.File // write end of the guardian's pipe: closed when ferry is done
	guard *os.Process
}

// startCold turns cold passthrough on after the mount, or says (one log
// line) why not; with --cold-passthrough on, that is an error.
func (s *stack) startCold() error {
	mode := s.cfg.ColdPassthrough
	off := func(reason string, err error) error {
		if mode == "on" || mode == "unguarded" {
			if err != nil {
				return fmt.Errorf("--cold-passthrough on: %s: %w", reason, err)
			}
			return fmt.Errorf("--cold-passthrough on: %s", reason)
		}
		args := []any{"reason", reason}
		if err != nil {
			args = append(args, "err", err.Error())
		}
		s.log.Info("cold passthrough off: files not yet wholly cached are read through ferry", args...)
		return nil
	}
	if mode == "off" {
		return off("turned off (--cold-passthrough off)", nil)
	}
	if !s.task && mode != "unguarded" {
		// The kernel asks before reads of a cold file, not before the page
		// faults of a mapping: ferry guards the mappings of its own task
		// only (mapguard.go).
		return off("ferry mount has no task of its own, whose mappings of files not yet whole ferry could guard (--cold-passthrough unguarded passes every process's opens through)", nil)
	}
	if on, why := s.srv.Passthrough(); !on {
		return off("FUSE passthrough is off ("+why+")", nil)
	}
	l, err := hsm.Open(s.blocks.Config().Dir, s.log)
	if err != nil {
		if ue, ok := err.(*hsm.UnavailableError); ok {
			return off(ue.Reason, ue.Err)
		}
		return off("pre-content events", err)
	}
	c := &cold{l: l}
	if err := c.startGuard(s.cfg.LogFile); err != nil {
		l.Close()
		return off("the guardian process did not start", err)
	}
	if err := l.SetMount(s.cfg.MountPoint); err != nil {
		s.log.Debug("cold passthrough: the mount's device", "err", err)
	}
	s.cold = c
	s.blocks.SetPrecontent(l)
	if mode == "unguarded" {
		s.log.Warn("cold passthrough on for every process (--cold-passthrough unguarded): files not yet wholly cached pass through too, and a process that maps one (mmap) before it is whole reads zeros where it is not cached")
	} else {
		s.log.Info("cold passthrough on: files not yet wholly cached pass through too for the task's processes; the kernel asks ferry for each missing range (fanotify pre-content events), and ferry makes a file whole before the task maps it")
	}
	return nil
}

// startGuard starts the guardian with the listener's group, its shared
// page and the read end of a pipe whose end tells it ferry is gone. Its
// standard streams are /dev/null (it must not hold a pipe a caller of
// ferry reads to its end); it logs to logFile, if any.
func (c *cold) startGuard(logFile string) error {
	group, page, err := c.l.GuardFiles()
	if err != nil {
		return err
	}
	defer group.Close()
	defer page.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	cmd := exec.Command("/proc/self/exe", GuardArg, logFile)
	cmd.Args[0] = "ferry"
	cmd.ExtraFiles = []*os.File{group, page, pr}
	// Its own process group: a signal to ferry's (a terminal's ^C) is not
	// for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return err
	}
	c.ctl, c.guard = pw, cmd.Process
	return nil
}

// stop ends the listener (after the block cache has closed: every fill
// has been answered) and lets the guardian take over.
func (c *cold) stop() {
	if c == nil {
		return
	}
	c.l.Close()
	c.ctl.Close()
	c.guard.Release()
}

// GuardMain is the guardian's main (the binary run with GuardArg): fds 3,
// 4 and 5 are the group, the page and the pipe. It returns the exit code.
func GuardMain(args []string) int {
	log := slog.New(slog.DiscardHandler)
	if len(args) > 0 && args[0] != "" {
		if f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			defer f.Close()
			log = slog.New(slog.NewJSONHandler(f, nil)).With("app", "ferry", "role", "guardian")
		}
	}
	err := hsm.RunGuard(os.NewFile(3, "fanotify"), os.NewFile(4, "ferry-hsm"), os.NewFile(5, "ctl"), log)
	if err != nil {
		log.Error(err.Error())
		return 1
	}
	return 0
}
