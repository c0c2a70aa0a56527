//go:build !linux

package objstore

import "syscall"

// Elsewhere the mark is left alone: not every kernel's poll honours it.
const lowWaterSupported = false

func setLowWater(syscall.RawConn, int) error { return nil }
