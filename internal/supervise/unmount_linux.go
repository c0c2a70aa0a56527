package supervise

import "syscall"

// lazyUnmount detaches a mount even while it is busy or dead.
func lazyUnmount(dir string) {
	_ = syscall.Unmount(dir, syscall.MNT_DETACH)
}
