package writeback

import (
	"runtime"
	"syscall"
)

// lowPriority makes the calling goroutine's thread run at the lowest CPU
// priority (nice 19) for the rest of the goroutine: the thread is locked
// and never unlocked, so it ends with the goroutine and no other
// goroutine runs on it. Best effort.
func lowPriority() {
	runtime.LockOSThread()
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19)
}
