package block

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Passthrough hands the kernel a whole data file: its reads then never
// reach ferry, so the per-read checksum checks of a FUSE read cannot run.
// They move to the moment a file becomes whole: a data file is handed out
// only when every block is present and every chunk has been verified
// against its record, by this process or by the one that sealed it.
//
// A seal (in the index file's header page) says "the data file, as of this
// stamp, is whole and verified": its device, inode, size, allocated blocks
// and change time, and the boot it was written in. Any write, truncate or
// hole punched changes the change time (the kernel's multigrain ctime
// gives a distinct value to a change after a stat, which sealing is), so a
// file damaged after sealing no longer matches and is verified again in
// full before it is handed out; a reboot (a crash may have lost pages that
// reached the index but not the data) invalidates every seal. A file
// damaged below the file system without touching its inode (a disk's bit
// rot) is not detected while sealed; FUSE reads of it are, since they
// verify each chunk the first time a process reads it.

// sealLen is the seal's size: magic 4, boot id 16, stamp 48, CRC 4.
const sealLen = 72

const sealMagic = 0x4c414553 // "SEAL"

// stamp is a data file's identity and change state (from fstat).
type stamp struct {
	dev, ino       uint64
	size, blocks   int64
	ctime, ctimeNs int64
}

func stampOf(f *os.File) (stamp, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return stamp{}, err
	}
	return stamp{dev: st.Dev, ino: st.Ino, size: st.Size, blocks: st.Blocks,
		ctime: st.Ctim.Sec, ctimeNs: st.Ctim.Nsec}, nil
}

// sealState is what this process knows of an open data file being whole
// and verified.
type sealState struct {
	mu sync.Mutex // guards the fields below; held while a file is verified in full
	ok bool
	at stamp // the data file's stamp when it was last known whole and verified
	// last is the data file's stamp after this process's latest write to
	// it (lastOK once there is one): while it is unchanged, the blocks
	// this process wrote and verified are as it wrote them.
	last   stamp
	lastOK bool
}

func (s *sealState) forget() {
	s.mu.Lock()
	s.ok = false
	s.mu.Unlock()
}

// wrote records the data file's stamp after a write by this process.
func (s *sealState) wrote(data *os.File) {
	st, err := stampOf(data)
	s.mu.Lock()
	s.last, s.lastOK = st, err == nil
	s.mu.Unlock()
}

// allVerified reports whether this process has verified every block of f.
func (f *objFile) allVerified() bool {
	o := f.o
	if f.have.Load() != o.nblocks {
		return false
	}
	for idx := range o.nblocks {
		m := f.blocks[idx].Load()
		if m == nil || m.verified.Load() != allChunks(o.blockLen(idx), o.chunk) {
			return false
		}
	}
	return true
}

// bootID names this boot of the machine (zero when unknown: then no seal
// written by an earlier process is trusted).
var bootID = sync.OnceValue(func() (id [16]byte) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id
	}
	h, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""))
	if err != nil || len(h) != len(id) {
		return id
	}
	copy(id[:], h)
	return id
})

func encodeSeal(st stamp) []byte {
	b := make([]byte, 0, sealLen)
	b = binary.LittleEndian.AppendUint32(b, sealMagic)
	id := bootID()
	b = append(b, id[:]...)
	for _, v := range []uint64{st.dev, st.ino, uint64(st.size), uint64(st.blocks), uint64(st.ctime), uint64(st.ctimeNs)} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// readSeal returns the stamp sealed in the index file idx, if it has a
// valid seal written in this boot.
func readSeal(idx *os.File) (stamp, bool) {
	b := make([]byte, sealLen)
	if n, _ := idx.ReadAt(b, sealOff); n != sealLen {
		return stamp{}, false
	}
	if binary.LittleEndian.Uint32(b) != sealMagic ||
		binary.LittleEndian.Uint32(b[sealLen-4:]) != crc32.Checksum(b[:sealLen-4], castagnoli) {
		return stamp{}, false
	}
	id := bootID()
	if id == ([16]byte{}) || string(b[4:20]) != string(id[:]) {
		return stamp{}, false
	}
	v := func(i int) uint64 { return binary.LittleEndian.Uint64(b[20+8*i:]) }
	return stamp{dev: v(0), ino: v(1), size: int64(v(2)), blocks: int64(v(3)), ctime: int64(v(4)), ctimeNs: int64(v(5))}, true
}

func clearSeal(idx *os.File) { idx.WriteAt(make([]byte, sealLen), sealOff) }

// sealIfVerified seals f when every block is present and verified by
// this process (it fetched or checked them all) and the data file is as
// this process last wrote it, as when its last block lands. It costs a
// pass over the blocks' masks and an fstat.
func (c *Cache) sealIfVerified(f *objFile) {
	if f.o.nblocks == 0 || !f.allVerified() {
		return
	}
	f.seal.mu.Lock()
	defer f.seal.mu.Unlock()
	if st, err := stampOf(f.data); err == nil && f.seal.lastOK && st == f.seal.last {
		c.sealLocked(f)
	}
}

// sealLocked records f's current stamp as whole and verified, in memory
// and in its index. f.seal.mu must be held.
func (c *Cache) sealLocked(f *objFile) bool {
	st, err := stampOf(f.data)
	if err != nil || st.size != f.o.ref.Size {
		return false
	}
	f.seal.ok, f.seal.at = true, st
	if _, err := f.idx.WriteAt(encodeSeal(st), sealOff); err != nil {
		c.log.Debug("block cache: writing a seal", "path", f.o.idxPath(), "err", err)
	}
	return true
}

// whole reports whether every byte of f is present and verified, so that
// its data file may back a passthrough open; it verifies in full (and
// seals) a file that neither this process nor a valid seal vouches for.
// A block that fails its check is dropped (the next read fetches it).
func (c *Cache) whole(f *objFile) bool {
	o := f.o
	if o.nblocks == 0 || !f.loadAll(c) {
		return false
	}
	ok, bad := c.verifyWhole(f)
	if bad >= 0 {
		c.drop(f, bad)
	}
	return ok
}

// verifyWhole is whole for a file whose blocks are all present; bad is a
// block that failed its check (-1 if none).
func (c *Cache) verifyWhole(f *objFile) (ok bool, bad int64) {
	o := f.o
	f.seal.mu.Lock()
	defer f.seal.mu.Unlock()
	st, err := stampOf(f.data)
	if err != nil || st.size != o.ref.Size {
		return false, -1
	}
	if f.sealValidLocked(st) {
		return true, -1
	}
	if f.seal.lastOK && f.seal.last == st && f.allVerified() {
		// Unchanged since this process wrote it (the seal is a moment
		// behind the last block).
		return c.sealLocked(f), -1
	}
	buf := make([]byte, o.bs)
	for idx := range o.nblocks {
		n := o.blockLen(idx)
		m := f.blocks[idx].Load()
		if m == nil {
			return false, -1
		}
		m.verified.Store(0) // the file changed since: check every chunk again
		if err := f.read(c, idx, buf[:n], 0); err != nil {
			if err == errCorrupt {
				return false, idx
			}
			return false, -1
		}
	}
	if st2, err := stampOf(f.data); err != nil || st2 != st {
		return false, -1 // written while we read it
	}
	c.st.verifiedBytes.Add(o.ref.Size)
	return c.sealLocked(f), -1
}

// sealValidLocked reports whether f is sealed at stamp st, by this
// process or by a seal in its index (adoptSealLocked). f.seal.mu must be
// held.
func (f *objFile) sealValidLocked(st stamp) bool {
	return (f.seal.ok && f.seal.at == st) || f.adoptSealLocked(st)
}

// adoptSealLocked takes the seal in f's index (written by this process or
// another one) when it matches the file's stamp st: every block is then
// verified. f.seal.mu must be held.
func (f *objFile) adoptSealLocked(st stamp) bool {
	ds, ok := readSeal(f.idx)
	if !ok || ds != st {
		return false
	}
	o := f.o
	for idx := range o.nblocks {
		if m := f.blocks[idx].Load(); m != nil {
			m.verified.Store(allChunks(o.blockLen(idx), o.chunk))
		}
	}
	f.seal.ok, f.seal.at = true, st
	return true
}

// verifyRest reports whether every chunk of f is verified once it checked
// those this process has not verified yet: the end of a cold file that
// became whole while this process's readers, each chunk checked before
// the kernel could read it, were still on their way there. It goes from
// the last block back, so that a reader still reading forward checks the
// others and no chunk is read twice (whole instead reads all of a file
// that changed since it was sealed: four per-task ferries filling one
// 2 GiB reference each read it again, a sixth of each one's CPU,
// 2026-12-01). A valid seal (another process's) is taken as it is; a
// block that fails its check is dropped. When nothing wrote to the file
// during the pass, it is sealed, so that later opens need no check.
func (c *Cache) verifyRest(f *objFile) bool {
	o := f.o
	if o.nblocks == 0 || !f.loadAll(c) {
		return false
	}
	st, err := stampOf(f.data)
	if err != nil || st.size != o.ref.Size {
		return false
	}
	f.seal.mu.Lock()
	adopted := f.sealValidLocked(st)
	f.seal.mu.Unlock()
	if adopted {
		return true
	}
	for idx := o.nblocks - 1; idx >= 0; idx-- {
		if c.ctx.Err() != nil {
			return false
		}
		if err := f.check(c, idx, nil, 0, o.blockLen(idx)); err != nil {
			if errors.Is(err, errCorrupt) && f.blocks[idx].Load() != nil {
				c.drop(f, idx)
			}
			return false
		}
	}
	if !f.allVerified() {
		return false
	}
	f.seal.mu.Lock()
	defer f.seal.mu.Unlock()
	if st2, err := stampOf(f.data); err == nil && st2 == st {
		c.sealLocked(f)
	}
	return true
}
