package supervise

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// mmapSyscall returns the audit architecture and the number of mmap of
// the architecture ferry runs on (its tasks run on the same).
func mmapSyscall() (arch, nr uint32, err error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, 9, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, 222, nil
	}
	return 0, 0, fmt.Errorf("no mapping guard for %s", runtime.GOARCH)
}
