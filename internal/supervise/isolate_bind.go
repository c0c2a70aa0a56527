package supervise

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// bindMountPoint makes the mount point a shared mount of its own, for
// the FUSE mount to go on (see isolate.go: unmounts of ferry's mount then
// propagate into the task's namespace). A bind of the directory on
// itself that a killed ferry left there is taken over instead of
// stacking another. The directory must exist, with no live mount on it.
func (iso *isolation) bindMountPoint() error {
	dir, err := filepath.EvalSymlinks(iso.mountPoint)
	if err != nil {
		return fmt.Errorf("resolving the mount point: %w", err)
	}
	iso.mountPoint = dir
	ms, err := readMountinfo()
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	if t, ok := tops(ms)[dir]; ok && selfBind(ms, t) {
		iso.bindID = t.id
		iso.log.Debug("taking over the bind of the mount point a killed ferry left", "mount_point", dir)
	} else {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding the mount point %s on itself: %w", dir, err)
		}
		if ms, err = readMountinfo(); err != nil {
			return fmt.Errorf("reading the mount table: %w", err)
		}
		t, ok := tops(ms)[dir]
		if !ok || !selfBind(ms, t) {
			return fmt.Errorf("the bind of the mount point %s is not in the mount table", dir)
		}
		iso.bindID = t.id
	}
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		iso.unbindMountPoint()
		return fmt.Errorf("making the mount point %s shared: %w", dir, err)
	}
	return nil
}

// unbindMountPoint removes the bind of bindMountPoint once the FUSE mount
// is gone, when it is still on top of the mount point (something mounted
// there since is left alone, and so is the bind under it).
func (iso *isolation) unbindMountPoint() {
	if iso == nil || iso.bindID == 0 {
		return
	}
	ms, err := readMountinfo()
	if err != nil {
		return
	}
	if t, ok := tops(ms)[iso.mountPoint]; ok && t.id == iso.bindID {
		if err := syscall.Unmount(iso.mountPoint, syscall.MNT_DETACH); err != nil {
			iso.log.Warn("removing the bind of the mount point", "mount_point", iso.mountPoint, "err", err.Error())
		}
	}
	iso.bindID = 0
}

// noteMounted records ferry's FUSE mount's device, which stays in the
// task's namespace.
func (iso *isolation) noteMounted() {
	var st syscall.Stat_t
	if err := syscall.Stat(iso.mountPoint, &st); err == nil {
		iso.fuseDev = devMajorMinor(uint64(st.Dev))
	}
}

// devMajorMinor formats a device number as mountinfo does ("major:minor").
func devMajorMinor(dev uint64) string {
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return fmt.Sprintf("%d:%d", major, minor)
}
