package objstore

import "syscall"

const lowWaterSupported = true

// setLowWater sets SO_RCVLOWAT on the socket behind rc. Linux lets any
// value through (capped at half the socket's largest receive buffer) and
// grows the receive buffer to hold it; lowering it wakes a reader at once
// when the bytes queued reach the new mark.
func setLowWater(rc syscall.RawConn, v int) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, v)
	})
	if err != nil {
		return err
	}
	return serr
}
