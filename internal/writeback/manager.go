package writeback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Manager owns the dirty files of every bucket, their journal and their
// uploads. All methods are safe for concurrent use.
type Manager struct {
	cfg     Config
	resolve StoreResolver
	log     *slog.Logger
	j       *journal
	space   *spaceBudget
	sched   *sched // admits upload requests (Concurrency, SmallConcurrency, foreground)

	// ctx is cancelled by Close only (not by New's ctx): uploads outlive
	// the signal that starts the drain.
	ctx    context.Context
	cancel context.CancelFunc

	idPrefix string
	// started: the wall-clock time New ran (orphan uploads of dead
	// processes were initiated before it; see orphanScan). Immutable.
	started time.Time
	idSeq   atomic.Uint64
	seq     atomic.Uint64 // journal record sequence

	// gmu guards closed and wg.Add; it is a leaf lock.
	gmu    sync.Mutex
	closed bool
	wg     sync.WaitGroup // every goroutine of the manager

	deepPool deepPool // workers for calls that need a deep stack (see deep)

	// chMu guards changed; it is a leaf lock.
	chMu    sync.Mutex
	changed chan struct{} // closed and replaced by notify

	// frozenMu guards frozen, the data files made immutable for writers
	// the kernel still holds (see FreezeExternal); removed at Close. A
	// leaf lock.
	frozenMu sync.Mutex
	frozen   []string
	// extMu guards extFiles (the files with external writers, which
	// pollExternal looks at) and extPolling (the poller runs). A leaf
	// lock, taken under File.mu.
	extMu      sync.Mutex
	extFiles   map[*File]struct{}
	extPolling bool

	// spareMu guards spares, ready, sparesClosed and refilling; it is a
	// leaf lock.
	spareMu      sync.Mutex
	spares       []string    // ids of empty data files ready for reuse (closed)
	ready        []openSpare // spares held open (at most openSpares): no open(2) in Create
	sparesClosed bool
	refilling    bool // prefill runs

	// mu guards the maps and stopped. Lock order: File.jmu, mu, File.mu.
	mu       sync.Mutex
	files    map[Target]*File // the namespace: dirty or open files by name (change it with setFileLocked, delFileLocked)
	dirs     map[dirKey]int   // files under each directory (see dirindex.go)
	byID     map[string]*File // every live file, including stubs
	deleting map[Target]int   // deletes in flight; uploads to these keys wait
	// uploading: keys an upload attempt claimed (see File.waitEligible);
	// other uploads to these keys wait.
	uploading map[Target]*File
	// bases finds the files reading from an object (see baseIndex).
	bases baseIndex
	// delKeys counts the deleteAfter entries naming each key.
	delKeys map[Target]int
	// gone: the last version writeback deleted at a key, so that OpenBase
	// of a version seen just before its delete stats again (bounded by
	// maxGone: cleared when full).
	gone map[Target]string
	// recent: files dropped (durable and released) a moment ago, by name,
	// so that a Rename racing with the drop finds them (see lockForRename).
	recent  map[Target]recentDrop
	stopped bool
	// lastOK: Stop or Drain was called, so OrderLast files may upload
	// (see Config.OrderLast).
	lastOK bool

	uploaded uploadedSet // the last upload of each target (see Uploaded)

	uploadedBytes, uploadedObjects, retries, failures atomic.Int64
}

// New opens (creating it) the staging root cfg.Dir, makes a staging
// directory of its own in it (other processes may share the root), and
// recovers the journals of processes that died there: closed files are
// queued for upload, multipart uploads they recorded are aborted, files
// they had not closed are discarded with a warning. Uploads run in the
// background until Close; ctx only carries values (its cancellation does
// not stop them).
func New(ctx context.Context, cfg Config, resolve StoreResolver) (*Manager, error) {
	cfg = cfg.withDefaults()
	if resolve == nil {
		return nil, errors.New("writeback: nil StoreResolver")
	}
	j, err := openStaging(cfg.Dir, cfg.SyncJournal, cfg.Logger)
	if err != nil {
		return nil, err
	}
	free := cfg.FreeSpace
	if free == nil {
		free = statfsFree(cfg.Dir)
	}
	m := &Manager{
		cfg:       cfg,
		resolve:   resolve,
		log:       cfg.Logger,
		j:         j,
		space:     &spaceBudget{free: free, min: cfg.MinFreeBytes},
		sched:     newSched(cfg.ForegroundQuiet, cfg.ForegroundUploads, cfg.Concurrency, cfg.SmallConcurrency),
		idPrefix:  strconv.FormatInt(cfg.Now().UnixNano(), 36),
		started:   time.Now(),
		changed:   make(chan struct{}),
		files:     map[Target]*File{},
		dirs:      map[dirKey]int{},
		byID:      map[string]*File{},
		deleting:  map[Target]int{},
		uploading: map[Target]*File{},
		delKeys:   map[Target]int{},
		gone:      map[Target]string{},
		recent:    map[Target]recentDrop{},
		deepPool:  deepPool{work: make(chan deepCall)},
	}
	if !cfg.LocalForeground {
		m.sched.node = openNodeFG(cfg.Dir)
	}
	m.ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := m.recover(); err != nil {
		m.sched.stop()
		m.cancel()
		j.close()
		return nil, err
	}
	// No prefill yet: the first Create starts it (see newData). A task
	// that writes a few outputs never needs a thousand spares, and on a
	// node running one ferry per task their creation at start competed
	// with the tasks' first reads (ext4 scans recently freed inodes for
	// each new one: a sixth of each ferry's CPU while four tasks read a
	// cold reference, 2026-12-01).
	return m, nil
}

func (m *Manager) newID() string {
	return m.idPrefix + "-" + strconv.FormatUint(m.idSeq.Add(1), 10)
}

// goFn runs fn in a goroutine owned by the manager; false after Close.
func (m *Manager) goFn(fn func()) bool {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
	return true
}

// notify wakes everyone waiting for a change of pending state.
func (m *Manager) notify() {
	m.chMu.Lock()
	close(m.changed)
	m.changed = make(chan struct{})
	m.chMu.Unlock()
}

func (m *Manager) changedCh() <-chan struct{} {
	m.chMu.Lock()
	defer m.chMu.Unlock()
	return m.changed
}

// Create makes a new, empty dirty file at t (O_CREAT, O_TRUNC) with the
// permission bits mode, replacing any dirty file there (its upload is
// cancelled). The file has no handle: call Acquire for each open handle.
// It returns syscall.EROFS after Stop.
func (m *Manager) Create(t Target, mode uint32) (*File, error) {
	return m.CreateWith(t, Attrs{Mode: mode})
}

// CreateWith is Create with the file's attributes: a's mode (permission
// bits only), owner and times (zero times are now).
func (m *Manager) CreateWith(t Target, a Attrs) (*File, error) {
	if t.Key == "" {
		return nil, syscall.EINVAL
	}
	m.sched.foreground()
	id, fd, err := m.newData()
	if err != nil {
		return nil, fmt.Errorf("writeback: stage %s: %w", t, err)
	}
	f := m.newFile(t, id)
	a.Mode &= 0o7777
	f.setAttrsLocked(a)
	f.hasData, f.gen, f.fd = true, 1, fd
	if err := m.publish(f); err != nil {
		fd.Close()
		os.Remove(m.j.dataPath(f.id))
		return nil, err
	}
	if err := f.writeRecord(); err != nil {
		m.log.Warn("writeback: journal", "path", t.String(), "err", err)
	}
	return f, nil
}

// Symlink stores a symbolic link at t: an object with the target in
// metadata (ferry-symlink), or in its body when it does not fit there
// (see SymlinkBody). It is queued like a closed file. It returns
// syscall.EROFS after Stop.
func (m *Manager) Symlink(t Target, linkTarget string) error {
	return m.Node(t, linkTarget, Attrs{Mode: 0o777})
}

// Node stores a symlink (linkTarget set) or a special file (a.Mode has
// the type bits of a FIFO, socket or device) at t, with the attributes
// a (zero times are now): an object without data (a symlink's body may
// hold its target), queued like a closed file. It replaces a dirty file
// at t. It returns syscall.EROFS after Stop.
func (m *Manager) Node(t Target, linkTarget string, a Attrs) error {
	if t.Key == "" {
		return syscall.EINVAL
	}
	typ := a.Mode & syscall.S_IFMT
	if linkTarget != "" {
		if err := ValidSymlinkTarget(linkTarget); err != nil {
			return err
		}
		a.Mode &= 0o7777
	} else if typ == 0 || typ == syscall.S_IFREG || typ == syscall.S_IFDIR || typ == syscall.S_IFLNK {
		return syscall.EINVAL
	}
	m.sched.foreground()
	f := m.newFile(t, m.newID())
	f.setAttrsLocked(a)
	f.symlink, f.gen, f.closedGen = linkTarget, 1, 1
	if err := m.publish(f); err != nil {
		return err
	}
	return f.commitClose()
}

// publish registers a new file at its target, replacing a dirty file there
// and cancelling deletes of that key queued by renames.
func (m *Manager) publish(f *File) error {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return syscall.EROFS
	}
	old := m.files[f.target]
	if old != nil {
		m.unlinkLocked(old)
	}
	f.live = true
	m.setFileLocked(f.target, f)
	m.byID[f.id] = f
	rewrite := m.cancelDeletesLocked(f.target, f)
	m.mu.Unlock()
	if old != nil {
		old.discard()
	}
	for _, g := range rewrite {
		if err := g.writeRecord(); err != nil {
			m.log.Warn("writeback: journal", "path", g.Target().String(), "err", err)
		}
	}
	m.notify()
	return nil
}

// Get returns the dirty (not yet durable) or open file at t, or nil.
func (m *Manager) Get(t Target) *File {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.files[t]
}

// List returns the dirty or open files of a bucket whose key starts with
// prefix, sorted by key.
func (m *Manager) List(scheme, bucket, prefix string) []*File {
	type named struct {
		key string
		f   *File
	}
	var found []named
	m.mu.Lock()
	if m.dirEmptyLocked(scheme, bucket, prefix) {
		m.mu.Unlock()
		return nil
	}
	for t, f := range m.files {
		if t.Scheme == scheme && t.Bucket == bucket && strings.HasPrefix(t.Key, prefix) {
			found = append(found, named{t.Key, f})
		}
	}
	m.mu.Unlock()
	sort.Slice(found, func(i, k int) bool { return found[i].key < found[k].key })
	out := make([]*File, len(found))
	for i, n := range found {
		out[i] = n.f
	}
	return out
}

// HasUnder reports whether a dirty or open file of a bucket has a key
// starting with prefix: len(List(…)) > 0 without sorting or allocating,
// and without a scan when prefix ends in '/' (a directory).
func (m *Manager) HasUnder(scheme, bucket, prefix string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if prefix != "" && prefix[len(prefix)-1] == '/' {
		return !m.dirEmptyLocked(scheme, bucket, prefix)
	}
	return m.scanUnderLocked(scheme, bucket, prefix)
}

// scanUnderLocked is HasUnder by a scan of every file. Caller holds m.mu.
func (m *Manager) scanUnderLocked(scheme, bucket, prefix string) bool {
	for t := range m.files {
		if t.Scheme == scheme && t.Bucket == bucket && strings.HasPrefix(t.Key, prefix) {
			return true
		}
	}
	return false
}

// Remove drops the dirty file at t (unlink): its upload is cancelled and
// its staging data and record deleted. Handles still open keep working on
// the unlinked data. The caller deletes any object stored at t.
func (m *Manager) Remove(t Target) {
	m.uploaded.forget(t)
	m.mu.Lock()
	f := m.files[t]
	if f != nil {
		m.unlinkLocked(f)
	}
	m.mu.Unlock()
	if f != nil {
		f.discard()
	}
}

// unlinkLocked takes f out of the namespace and marks it removed, at once:
// from then on it uploads nothing (an attempt running is cancelled), so it
// never lands over the file that replaces it. Caller holds m.mu; discard
// does the rest.
func (m *Manager) unlinkLocked(f *File) {
	f.mu.Lock()
	f.removed = true
	f.cancelAttemptLocked(errCanceled)
	if m.files[f.target] == f {
		m.delFileLocked(f.target)
	}
	f.mu.Unlock()
}

// Stop makes Create, OpenBase and Symlink fail with syscall.EROFS. Files
// already open can still be written and closed. OrderLast files may
// upload from now on.
func (m *Manager) Stop() {
	m.mu.Lock()
	m.stopped, m.lastOK = true, true
	m.mu.Unlock()
	m.notify()
}

// releaseLast lets OrderLast files upload (see Config.OrderLast).
func (m *Manager) releaseLast() {
	m.mu.Lock()
	m.lastOK = true
	m.mu.Unlock()
	m.notify()
}

// Close stops every goroutine (abandoning uploads not yet durable: their
// staged data and records stay for the next New on the same root) and
// releases the staging directory, deleting it when nothing is left staged.
// Call Drain first to finish the uploads.
func (m *Manager) Close() error {
	m.gmu.Lock()
	if m.closed {
		m.gmu.Unlock()
		return nil
	}
	m.closed = true
	m.gmu.Unlock()
	m.cancel()
	m.wg.Wait()
	m.sched.stop()
	m.mu.Lock()
	for _, f := range m.byID {
		f.mu.Lock()
		if f.fd != nil {
			f.fd.Close()
			f.fd = nil
		}
		f.mu.Unlock()
	}
	m.mu.Unlock()
	m.dropSpares()
	m.thawFrozen()
	return m.j.closeOwn()
}

// NodePeers returns how many other Managers stage under the same Dir now
// (the ferries of the node's other tasks, when they share a cache
// directory); 0 with LocalForeground, or when that cannot be known.
func (m *Manager) NodePeers() int {
	if m.sched.node == nil {
		return 0
	}
	return m.sched.node.peers()
}

// Stats returns a snapshot of the queue and counters.
func (m *Manager) Stats() Stats {
	st := Stats{
		UploadedBytes:   m.uploadedBytes.Load(),
		UploadedObjects: m.uploadedObjects.Load(),
		Retries:         m.retries.Load(),
		Failures:        m.failures.Load(),
	}
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.byID {
		f.mu.Lock()
		if !f.removed && f.gen > f.durableGen {
			st.PendingFiles++
			st.PendingBytes += f.size
			st.OldestPending = max(st.OldestPending, now.Sub(f.since))
		}
		f.mu.Unlock()
	}
	return st
}
