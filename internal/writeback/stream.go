package writeback

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// abortTimeout bounds one Abort of a multipart upload.
const abortTimeout = 30 * time.Second

var errNoMultipart = errors.New("writeback: backend has no multipart uploads")

// stream uploads the full parts of a file while it is still being written
// sequentially, so that closing it leaves only the tail and Complete.
// Parts follow a tiered layout (sizes grow with the part number) because
// the final size is unknown.
type stream struct {
	f      *File
	key    string // the key the upload was created for
	ctx    context.Context
	cancel context.CancelFunc
	// pumpCtx (a child of ctx) ends the pump's wait for a slot when the
	// stream finishes: parts in flight go on.
	pumpCtx    context.Context
	pumpCancel context.CancelFunc
	pumpDone   chan struct{}  // closed when the pump returned
	wake       chan struct{}  // cap 1: new data was written
	wg         sync.WaitGroup // the pump and its part uploads

	// Guarded by File.mu.
	metaGen   uint64
	up        objstore.Upload // nil until created
	lay       layout          // zero until the upload exists
	rd        *os.File        // staging data, read-only
	next      int             // next part to consider
	parts     map[int]*streamPart
	finishing bool
	token     string // MetaUpload of the object the stream makes
	err       error  // the stream could not start
}

// streamPart is the state of one part (guarded by File.mu).
type streamPart struct {
	inflight bool
	done     bool // uploaded, and not written since (as far as ferry saw)
	stale    bool // written while in flight: not done when it lands
	// sum is the CRC-32C of the bytes the upload sent, when summed: the
	// kernel may have rewritten them unseen since (external writes), so
	// the close compares them with the final ones (see verifyParts).
	sum    uint32
	summed bool
}

// streamWriteLocked is called after every write of [off, end): it marks
// uploaded parts it touched for re-upload, and starts the stream once the
// file is large enough.
func (f *File) streamWriteLocked(off, end int64) {
	if s := f.stream; s != nil && s.lay.size > 0 {
		for n := s.lay.index(off); n <= s.lay.index(end-1); n++ {
			if p := s.parts[n]; p != nil {
				p.stale = p.inflight
				p.done = false
			}
		}
	}
	f.streamLocked()
}

// streamLocked wakes the file's stream for new data, or starts it once
// the file is large enough. Caller holds File.mu.
func (f *File) streamLocked() {
	if s := f.stream; s != nil {
		select {
		case s.wake <- struct{}{}:
		default:
		}
		return
	}
	m := f.m
	if f.noStream || f.base != nil || m.cfg.StreamAfter < 0 || f.size <= m.cfg.StreamAfter || f.removed || !f.live {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	s := &stream{
		f: f, key: f.target.Key, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), metaGen: f.metaGen,
		next: 1, parts: map[int]*streamPart{},
	}
	s.pumpCtx, s.pumpCancel = context.WithCancel(ctx)
	s.pumpDone = make(chan struct{})
	s.wg.Add(1)
	if !m.goFn(s.pump) {
		close(s.pumpDone)
		s.wg.Done()
		cancel()
		return
	}
	f.stream = s
}

// streamTruncateLocked aborts the stream when a truncation cuts into
// parts already started.
func (f *File) streamTruncateLocked(size int64) {
	s := f.stream
	if s == nil || s.lay.size == 0 || s.next == 1 {
		return
	}
	if s.lay.part(s.next-1).End > size {
		f.abortStreamLocked()
	}
}

// abortStreamLocked detaches the stream and aborts it in the background.
func (f *File) abortStreamLocked() {
	s := f.stream
	if s == nil {
		return
	}
	f.stream = nil
	s.cancel()
	if !f.m.goFn(func() { s.abort() }) {
		s.wg.Wait() // closing: the journal keeps the upload for the next process
	}
}

// abort waits for the stream's goroutines, then aborts its upload.
func (s *stream) abort() {
	s.wg.Wait()
	s.f.mu.Lock()
	up, rd := s.up, s.rd
	s.rd = nil
	s.f.mu.Unlock()
	if rd != nil {
		rd.Close()
	}
	if up != nil {
		s.f.abortUpload(up, s.key)
		if !s.f.tryFinish() {
			if err := s.f.writeRecord(); err != nil {
				s.f.m.log.Warn("writeback: journal", "path", s.key, "err", err)
			}
		}
	}
	s.f.m.notify()
}

// pump creates the upload, then starts each part as soon as the writer has
// written all of it and moved past it, and the scheduler admits it (one
// part waits for a slot at a time, so that a fast writer does not pile up
// goroutines).
func (s *stream) pump() {
	defer s.wg.Done()
	defer close(s.pumpDone)
	defer s.pumpCancel()
	f, m := s.f, s.f.m
	fail := func(err error) {
		f.mu.Lock()
		s.err = err
		if errors.Is(err, errNoMultipart) {
			f.noStream = true
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	t := f.target
	md := f.metadataLocked()
	s.token = f.newTokenLocked()
	md[MetaUpload] = s.token
	f.mu.Unlock()
	st, err := m.resolve(s.ctx, t.Scheme, t.Bucket)
	if err != nil {
		fail(err)
		return
	}
	mp, ok := st.(objstore.Multipart)
	if !ok {
		fail(errNoMultipart)
		return
	}
	rd, err := openData(m.j.dataPath(f.id), os.O_RDONLY)
	if err != nil {
		fail(err)
		return
	}
	up, err := f.createUpload(s.ctx, mp, s.key, m.putOptions(t, md))
	if err != nil {
		rd.Close()
		fail(err)
		return
	}
	f.mu.Lock()
	s.up, s.rd, s.lay = up, rd, streamLayout(st.Caps(), m.cfg.PartSize)
	f.mu.Unlock()
	admitted := false // holds a heavy slot for part s.next
	defer func() {
		if admitted {
			m.sched.release(classHeavy)
		}
	}()
	for {
		f.mu.Lock()
		if s.finishing || s.ctx.Err() != nil {
			f.mu.Unlock()
			return
		}
		ready := s.next <= s.lay.maxParts && s.readyLocked(s.next)
		n := s.next
		if ready && admitted {
			s.parts[n] = &streamPart{inflight: true}
			s.next++
		}
		f.mu.Unlock()
		switch {
		case ready && admitted:
			admitted = false // uploadPart releases it
			s.wg.Add(1)
			if !m.goFn(func() { s.uploadPart(n) }) {
				s.wg.Done()
				m.sched.release(classHeavy)
				return
			}
			continue
		case ready:
			if m.sched.acquire(s.pumpCtx, classHeavy) != nil {
				return
			}
			admitted = true
			continue // look again: the file may have changed meanwhile
		case admitted: // truncated while waiting for the slot
			admitted = false
			m.sched.release(classHeavy)
		}
		select {
		case <-s.wake:
		case <-s.pumpCtx.Done():
			return
		}
	}
}

// readyLocked reports whether part n is written and the writer has moved
// past it. Caller holds File.mu.
func (s *stream) readyLocked(n int) bool {
	p := s.lay.part(n)
	return s.f.size > p.End && s.f.dirty.covers(p.Off, p.End)
}

// uploadPart uploads part n from the staging file, with the heavy slot
// the pump took for it. A failure only leaves the part for the close to
// upload.
func (s *stream) uploadPart(n int) {
	defer s.wg.Done()
	f, m := s.f, s.f.m
	f.mu.Lock()
	p := s.lay.part(n)
	up, rd := s.up, s.rd
	f.mu.Unlock()
	src := &summingReader{r: io.NewSectionReader(rd, p.Off, p.End-p.Off)}
	err := up.UploadPart(s.ctx, n, src, p.End-p.Off)
	m.sched.release(classHeavy)
	f.mu.Lock()
	sp := s.parts[n]
	sp.inflight = false
	sp.done = err == nil && !sp.stale
	sp.stale = false
	sp.sum, sp.summed = src.result(p.End - p.Off)
	f.mu.Unlock()
	if err == nil {
		m.uploadedBytes.Add(p.End - p.Off)
	} else if s.ctx.Err() == nil {
		m.log.Debug("writeback: streamed part failed; retried at close", "key", s.key, "part", n, "err", err)
	}
}

// finishStream completes the file's stream with the parts still missing.
// used is false when the stream cannot serve this snapshot (it never
// started, was created for another key, the file is empty, or the size
// outgrew its layout);
// the caller then uploads the file as a whole. The parts never started go
// at once, while the streamed ones in flight end; those of them that
// failed (or were written again meanwhile) go after.
func (f *File) finishStream(ctx context.Context, st objstore.Store, snap snapshot, opts objstore.PutOptions) (info objstore.ObjectInfo, used bool, err error) {
	s := snap.stream
	f.mu.Lock()
	if f.stream != s { // aborted meanwhile
		f.mu.Unlock()
		return info, false, nil
	}
	s.finishing = true
	f.mu.Unlock()
	s.pumpCancel() // parts in flight go on
	<-s.pumpDone
	f.mu.Lock()
	if f.stream == s {
		f.stream = nil // this attempt owns it now
	}
	up, rd, lay := s.up, s.rd, s.lay
	parts, ok := lay.parts(snap.size)
	// An empty file has no part to complete (a Complete without parts is
	// refused), so it does not use the stream either.
	usable := up != nil && s.err == nil && s.ctx.Err() == nil && s.key == snap.target.Key && ok && len(parts) > 0 && len(parts) >= s.next-1
	var todo []int    // neither done nor in flight
	var inflight bool // streamed parts still in flight
	sent := map[int]bool{}
	if usable {
		for i := range parts {
			switch p := s.parts[i+1]; {
			case p == nil || (!p.inflight && !p.done):
				todo = append(todo, i+1)
				sent[i+1] = true
			case p.inflight:
				inflight = true
			}
		}
	}
	metaChanged := f.metaGen != s.metaGen
	external := f.ext.writable
	f.mu.Unlock()
	if !usable {
		s.cancel()
		s.wg.Wait()
		if rd != nil {
			rd.Close()
		}
		if up != nil {
			f.abortUpload(up, s.key)
		}
		return info, false, nil
	}
	defer rd.Close()
	defer s.cancel()
	send := func(todo []int) error {
		var sel []span
		for _, n := range todo {
			sel = append(sel, parts[n-1])
		}
		return f.m.runParts(ctx, sel, func(ctx context.Context, i int, p span) (bool, error) {
			return true, up.UploadPart(ctx, todo[i-1], io.NewSectionReader(f.guard(rd, snap.size), p.Off, p.End-p.Off), p.End-p.Off)
		}, func(int, span) bool { return true })
	}
	err = send(todo)
	if err == nil && (inflight || external) {
		s.wg.Wait()
		var again []int
		f.mu.Lock()
		for i := range parts {
			if p := s.parts[i+1]; !sent[i+1] && p != nil && !p.done {
				again = append(again, i+1)
			}
		}
		f.mu.Unlock()
		if external {
			var changed []int
			changed, err = s.verifyParts(f.guard(rd, snap.size), parts, sent)
			again = append(again, changed...)
		}
		if err == nil {
			err = send(again)
		}
	}
	if err != nil {
		s.cancel() // streamed parts in flight
		s.wg.Wait()
		f.abortUpload(up, s.key)
		return info, true, err
	}
	info, err = f.completeUpload(ctx, st, up, s.key, snap.size)
	if err != nil || !metaChanged {
		return info, true, err
	}
	// chmod or utimens after the stream started: fix the metadata in place.
	// On failure the completed object is returned with the error: it
	// landed (see File.upload).
	fixed, err := f.m.copyObject(ctx, st, s.key, s.key, info.Version, snap.size, opts.Metadata)
	if err != nil {
		return info, true, err
	}
	return fixed, true, nil
}
