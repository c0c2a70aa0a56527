package main

import (
	"context"
	"os"
	"runtime"

	"github.com/ferry-fs/ferry/internal/cli"
)

// init keeps the main goroutine on the main thread for good, so that no
// other goroutine ever runs there. ferry starts a task from a thread that
// enters the task's mount namespace and is never unlocked (supervise,
// isolate.go): the runtime ends such a thread, except the main thread,
// which it parks forever instead, in the task's namespace, where
// /proc/self (which names the main thread) would then show the task's
// mounts to ferry.
func init() { runtime.LockOSThread() }

func main() {
	// Signals are handled by the supervisor (forwarded to the task); the
	// context is only for programmatic cancellation.
	code := cli.Main(context.Background(), os.Args, cli.IO{Stdout: os.Stdout, Stderr: os.Stderr})
	os.Exit(code)
}
