package writeback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// fillChunk bounds the memory of copying base bytes into the staging file.
const fillChunk = 1 << 20

func timeFromNs(ns int64) time.Time { return time.Unix(0, ns) }

// nsOf is t in Unix nanoseconds, 0 for the zero time.
func nsOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// timeOrZero reverses nsOf.
func timeOrZero(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return timeFromNs(ns)
}

// WriteAt writes p at off into the staging file. When the staging disk is
// (nearly) full it fails with an error wrapping syscall.ENOSPC and nothing
// staged before is lost. Writing a symlink fails with syscall.EINVAL.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.writeAt(p, off, false)
}

// AppendAt is WriteAt for a writer opened with O_APPEND: p lands at the
// file's end as f knows it (external writers' changes absorbed), whatever
// off says. The kernel computes off from its cached size, which a writer
// passing through on another node may have moved since, either way: past
// it (it wrote), or short of it (it truncated: at off, the append would
// leave a hole of zeros before p; found by the soak model, seed
// 1796568103674930126). A write(2) the kernel splits into several
// requests still lands in one piece: each piece's off is where the one
// before it ended, which is then the end.
func (f *File) AppendAt(p []byte, off int64) (int, error) {
	return f.writeAt(p, off, true)
}

func (f *File) writeAt(p []byte, off int64, atEnd bool) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.m.sched.foreground()
	if err := f.m.space.reserve(int64(len(p))); err != nil {
		return 0, err
	}
	f.lockLive()
	f.absorbLocked()
	if !f.hasData {
		f.mu.Unlock()
		return 0, syscall.EINVAL
	}
	fd, err := f.openDataLocked()
	if err != nil {
		f.mu.Unlock()
		return 0, err
	}
	if atEnd {
		off = f.size
	}
	n, err := fd.WriteAt(p, off)
	if n > 0 {
		end := off + int64(n)
		f.dirty = f.dirty.add(off, end)
		f.valid = f.valid.add(off, end)
		if f.attemptsStarted != f.attemptsEnded {
			f.written = f.written.add(off, end)
		}
		f.size = max(f.size, end)
		f.touchLocked()
		f.attrs.Mtime = f.attrs.Ctime
		f.streamWriteLocked(off, end)
	}
	if err != nil && !errors.Is(err, syscall.ENOSPC) && f.stageErr == nil {
		f.stageErr = err
	}
	after := n > 0 && f.live && !f.removed && (f.refs == 0 || f.journalEachLocked())
	f.mu.Unlock()
	if after {
		f.afterModify()
	}
	return n, err
}

// Truncate sets the file's size; bytes past a shrink read as zeros if the
// file grows again.
func (f *File) Truncate(size int64) error {
	if size < 0 {
		return syscall.EINVAL
	}
	f.m.sched.foreground()
	f.lockLive()
	f.absorbLocked()
	if !f.hasData {
		f.mu.Unlock()
		return syscall.EINVAL
	}
	fd, err := f.openDataLocked()
	if err == nil {
		err = fd.Truncate(size)
	}
	if err != nil {
		f.mu.Unlock()
		return err
	}
	if size < f.size {
		f.dirty = f.dirty.cut(size)
		f.valid = f.valid.cut(size)
		f.baseLimit = min(f.baseLimit, size)
		f.truncMin = min(f.truncMin, size)
		f.streamTruncateLocked(size)
	}
	f.size = size
	f.touchLocked()
	f.attrs.Mtime = f.attrs.Ctime
	f.mu.Unlock()
	f.afterModify()
	return nil
}

// ReadAt reads the file's current content (staged writes over the base
// object). It returns io.EOF at the end of the file.
func (f *File) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	for try := 0; ; try++ {
		n, retry, err := f.readOnce(ctx, p, off)
		if !retry || try >= 5 {
			return n, err
		}
	}
}

// readOnce reads local bytes under the lock and base bytes after it;
// retry is true when the base changed meanwhile (the file's own upload
// replaced it, or is about to record that it did).
func (f *File) readOnce(ctx context.Context, p []byte, off int64) (n int, retry bool, err error) {
	f.mu.Lock()
	f.absorbLocked()
	if off >= f.size || !f.hasData {
		f.mu.Unlock()
		return 0, false, io.EOF
	}
	end := min(off+int64(len(p)), f.size)
	var remote []span
	var base objstore.ObjectInfo
	if f.base != nil && off < f.baseLimit {
		base = *f.base
		lim := min(end, f.baseLimit)
		if f.dropped {
			remote = []span{{off, lim}}
		} else {
			remote = f.valid.gaps(off, lim)
		}
	}
	local := rangeSet(nil).add(off, end)
	for _, r := range remote { // local = [off,end) − remote
		local = subtract(local, r)
	}
	if len(local) > 0 {
		fd, err := f.openDataLocked()
		if err != nil {
			f.mu.Unlock()
			return 0, false, err
		}
		for _, r := range local {
			b := p[r.Off-off : r.End-off]
			k, err := fd.ReadAt(b, r.Off)
			if err != nil && !errors.Is(err, io.EOF) {
				f.mu.Unlock()
				return 0, false, err
			}
			clear(b[k:]) // a sparse tail
		}
	}
	t := f.target
	f.mu.Unlock()
	for _, r := range remote {
		if err := f.m.readBase(ctx, t, base, p[r.Off-off:r.End-off], r.Off); err != nil {
			// The base was replaced (and maybe deleted) by the file's own
			// upload since the bytes to read were chosen.
			if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound) {
				f.mu.Lock()
				changed := f.base == nil || f.base.Version != base.Version || f.base.Key != base.Key
				inflight, done := f.cancel != nil, f.done
				f.mu.Unlock()
				switch {
				case changed:
					return 0, true, err
				case inflight: // an upload landed and is being recorded
					select {
					case <-done:
						return 0, true, err
					case <-ctx.Done():
						return 0, false, context.Cause(ctx)
					}
				}
			}
			return 0, false, err
		}
	}
	n = int(end - off)
	if n < len(p) {
		return n, false, io.EOF
	}
	return n, false, nil
}

// subtract returns s − r.
func subtract(s rangeSet, r span) rangeSet {
	var out rangeSet
	for _, x := range s {
		if x.End <= r.Off || x.Off >= r.End {
			out = append(out, x)
			continue
		}
		if x.Off < r.Off {
			out = append(out, span{x.Off, r.Off})
		}
		if x.End > r.End {
			out = append(out, span{r.End, x.End})
		}
	}
	return out
}

// readBase reads len(p) bytes of base at off into p.
func (m *Manager) readBase(ctx context.Context, t Target, base objstore.ObjectInfo, p []byte, off int64) error {
	st, err := m.resolve(ctx, t.Scheme, t.Bucket)
	if err != nil {
		return err
	}
	rd, err := st.NewReader(ctx, base.Key, off, int64(len(p)), objstore.ReadOptions{IfVersion: base.Version})
	if err != nil {
		return err
	}
	defer rd.Close()
	if _, err := io.ReadFull(rd, p); err != nil {
		return fmt.Errorf("writeback: read base %s at %d: %w", base.Key, off, err)
	}
	return nil
}

// errBaseChanged: the file's base changed while its bytes were copied.
var errBaseChanged = errors.New("writeback: base object changed during the upload")

// fill copies the base's bytes of ranges (sorted) into the staging file,
// skipping bytes written meanwhile, so that the staging file alone holds
// them. Ranges closer than fillChunk share one read. Memory is bounded by
// fillChunk.
func (f *File) fill(ctx context.Context, st objstore.Store, base objstore.ObjectInfo, gaps []span) error {
	if len(gaps) == 0 {
		return nil
	}
	var ranges []span
	for _, g := range gaps {
		if n := len(ranges); n > 0 && g.Off-ranges[n-1].End <= fillChunk {
			ranges[n-1].End = g.End
			continue
		}
		ranges = append(ranges, g)
	}
	var longest int64
	for _, r := range ranges {
		longest = max(longest, r.End-r.Off)
	}
	buf := make([]byte, min(fillChunk, longest))
	for _, r := range ranges {
		rd, err := st.NewReader(ctx, base.Key, r.Off, r.End-r.Off, objstore.ReadOptions{IfVersion: base.Version})
		if err != nil {
			return err
		}
		err = f.fillFrom(rd, base, r, buf)
		rd.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *File) fillFrom(rd io.Reader, base objstore.ObjectInfo, r span, buf []byte) error {
	for off := r.Off; off < r.End; {
		n := min(int64(len(buf)), r.End-off)
		b := buf[:n]
		if _, err := io.ReadFull(rd, b); err != nil {
			return fmt.Errorf("writeback: read base %s at %d: %w", base.Key, off, err)
		}
		if err := f.m.space.reserve(n); err != nil {
			return err
		}
		f.mu.Lock()
		if f.base == nil || f.base.Key != base.Key || f.base.Version != base.Version || f.removed || f.dropped {
			f.mu.Unlock()
			return errBaseChanged
		}
		fd, err := f.openDataLocked()
		if err != nil {
			f.mu.Unlock()
			return err
		}
		for _, g := range f.valid.gaps(off, min(off+n, f.baseLimit, f.size)) {
			if _, err := fd.WriteAt(b[g.Off-off:g.End-off], g.Off); err != nil {
				f.mu.Unlock()
				return err
			}
			f.valid = f.valid.add(g.Off, g.End)
		}
		f.mu.Unlock()
		off += n
	}
	return nil
}
