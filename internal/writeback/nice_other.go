//go:build !linux

package writeback

// lowPriority does nothing where threads have no priority of their own.
func lowPriority() {}
