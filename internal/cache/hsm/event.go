package hsm

import (
	"encoding/binary"
	"errors"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// event is one pre-content event as read from the group.
type event struct {
	mask     uint64
	fd       int32
	pid      int32
	off, n   int64
	hasRange bool
}

// Layout of struct fanotify_event_metadata and of the range info record
// (include/uapi/linux/fanotify.h).
const (
	metaLen       = 24
	infoHdrLen    = 4
	rangeInfoLen  = 24
	eventBufBytes = 64 << 10
)

// parseEvents decodes the events in b (one read of the group). A
// malformed tail is ignored.
func parseEvents(b []byte, out []event) []event {
	for len(b) >= metaLen {
		el := int(binary.LittleEndian.Uint32(b))
		ml := int(binary.LittleEndian.Uint16(b[6:]))
		if el < metaLen || el > len(b) || ml < metaLen || ml > el {
			break
		}
		e := event{
			mask: binary.LittleEndian.Uint64(b[8:]),
			fd:   int32(binary.LittleEndian.Uint32(b[16:])),
			pid:  int32(binary.LittleEndian.Uint32(b[20:])),
		}
		for q := ml; q+infoHdrLen <= el; {
			typ := b[q]
			il := int(binary.LittleEndian.Uint16(b[q+2:]))
			if il < infoHdrLen || q+il > el {
				break
			}
			if typ == unix.FAN_EVENT_INFO_TYPE_RANGE && il >= rangeInfoLen {
				off := binary.LittleEndian.Uint64(b[q+8:])
				n := binary.LittleEndian.Uint64(b[q+16:])
				e.off, e.n, e.hasRange = clampInt64(off), clampInt64(n), true
			}
			q += il
		}
		out = append(out, e)
		b = b[el:]
	}
	return out
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// Responses (struct fanotify_response).
const (
	allow   = unix.FAN_ALLOW
	denyEIO = unix.FAN_DENY | uint32(unix.EIO)<<unix.FAN_ERRNO_SHIFT
)

// respond answers the event whose descriptor is fd in the group gfd.
func respond(gfd int, fd int32, resp uint32) error {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(fd))
	binary.LittleEndian.PutUint32(b[4:], resp)
	_, err := unix.Write(gfd, b[:])
	return err
}

// loop reads events until Close and answers them (see handle).
func (l *Listener) loop() {
	defer l.wg.Done()
	buf := make([]byte, eventBufBytes)
	var evs []event
	for {
		n, err := l.rd.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				l.log.Error("pre-content events: read", "err", err)
			}
			return
		}
		evs = parseEvents(buf[:n], evs[:0])
		for i := range evs {
			l.handle(&evs[i])
		}
	}
}

// handle answers one event: at once when its range is present (or empty),
// after a fill in a goroutine of its own otherwise.
func (l *Listener) handle(e *event) {
	if e.fd < 0 {
		return // no descriptor: not a permission event we can answer (the kernel decided)
	}
	if e.mask&unix.FAN_PRE_ACCESS == 0 {
		l.answer(e, allow)
		return
	}
	l.st.events.Add(1)
	l.hi.note(e.fd)
	var st unix.Stat_t
	if err := unix.Fstat(int(e.fd), &st); err != nil {
		l.deny(e, "fstat of an event's file", err)
		return
	}
	id := fileID{dev: st.Dev, ino: st.Ino}
	l.mu.RLock()
	w := l.watches[id]
	_, whole := l.whole[id]
	l.mu.RUnlock()
	if w == nil {
		l.st.unknown.Add(1)
		if whole {
			l.answer(e, allow)
			return
		}
		l.unknownFile(id)
		l.st.denied.Add(1)
		l.answer(e, denyEIO)
		return
	}
	off, n := e.off, e.n
	if !e.hasRange {
		off, n = 0, math.MaxInt64
	}
	if n == 0 || w.fl.Ready(off, n, e.pid) {
		l.st.ready.Add(1)
		l.answer(e, allow)
		return
	}
	ev := *e
	l.wg.Add(1)
	go func() { // owner: the Listener (Close waits for it)
		defer l.wg.Done()
		if err := w.fl.Fill(l.ctx, off, n, ev.pid); err != nil {
			l.st.denied.Add(1)
			l.answer(&ev, denyEIO)
			return
		}
		l.st.filled.Add(1)
		l.answer(&ev, allow)
	}()
}

// answer responds to e and closes its descriptor.
func (l *Listener) answer(e *event, resp uint32) {
	if err := respond(l.gfd, e.fd, resp); err != nil {
		l.log.Warn("pre-content events: answering an event", "err", err)
	}
	unix.Close(int(e.fd))
}

func (l *Listener) deny(e *event, what string, err error) {
	l.log.Warn("pre-content events: "+what+"; the read fails (EIO)", "err", err)
	l.st.denied.Add(1)
	l.answer(e, denyEIO)
}

// unknownFile logs, once per inode, a read of a file no watch names.
func (l *Listener) unknownFile(id fileID) {
	l.mu.Lock()
	seen := l.warned[id]
	if !seen && len(l.warned) < 1024 {
		l.warned[id] = true
	}
	l.mu.Unlock()
	if !seen {
		l.log.Warn("pre-content events: a read of a cache file ferry no longer tracks fails (EIO)", "dev", id.dev, "ino", id.ino)
	}
}
