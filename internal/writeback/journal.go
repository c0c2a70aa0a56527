package writeback

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Journal file names inside Config.Dir.
const (
	logName  = "journal.log"
	lockName = "lock"
	dataExt  = ".data"
)

// compactMin: the log is rewritten once it is larger than this and more
// than compactRatio times the size of its live records.
const (
	compactMin   = 8 << 20
	compactRatio = 4
)

// journal is the staging directory: one data file per staged file and an
// append-only log of records (see README.md). Appending a record is one
// write(2); nothing is fsynced unless sync is set, in which case
// concurrent appends share one fsync (group commit).
type journal struct {
	dir        string
	sync       bool
	lock       *os.File // flock held for the Manager's life
	compactMin int64    // see compactMin; tests lower it

	// mu guards log, live, size, liveBytes, appended and dirDirty.
	mu        sync.Mutex
	log       *os.File          // nil after close
	live      map[string][]byte // id → its last line, for compaction
	size      int64             // bytes in the log
	liveBytes int64             // bytes of the lines in live
	appended  uint64            // appends so far
	dirDirty  bool              // a file was created since the last directory fsync

	// syncMu serializes fsyncs; synced (guarded by syncMu) is the number
	// of appends known to be on disk.
	syncMu sync.Mutex
	synced uint64
}

// openJournal creates dir (0700), takes its lock and opens the log. Call
// scan once before writing.
func openJournal(dir string, sync bool) (*journal, error) {
	if dir == "" {
		return nil, errors.New("writeback: Config.Dir is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("writeback: create staging dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("writeback: staging dir: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writeback: lock staging dir: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("writeback: staging dir %s is in use by another process: %w", dir, err)
	}
	return &journal{dir: dir, sync: sync, lock: lf, compactMin: compactMin, live: map[string][]byte{}}, nil
}

func (j *journal) close() error {
	j.mu.Lock()
	var err error
	if j.log != nil {
		err = j.log.Close()
		j.log = nil
	}
	j.mu.Unlock()
	if j.lock != nil {
		if cerr := j.lock.Close(); err == nil { // releases the flock
			err = cerr
		}
		j.lock = nil
	}
	return err
}

func (j *journal) dataPath(id string) string { return filepath.Join(j.dir, id+dataExt) }
func (j *journal) logPath() string           { return filepath.Join(j.dir, logName) }

// createData creates the (empty) data file of a new id.
func (j *journal) createData(id string) (*os.File, error) {
	fd, err := openData(j.dataPath(id), os.O_RDWR|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return nil, err
	}
	j.dirChanged()
	return fd, nil
}

// openData opens a data file (mode 0600 when created). Data files are
// regular files, which Go's poller cannot watch, yet os.OpenFile tries:
// it sets O_NONBLOCK, fails to register the file with epoll and clears
// the flag again (five syscalls more per open). A data file is opened
// two or three times per staged file, and a cp of 1,000 small files made
// 11,000 fcntl calls; os.NewFile on a blocking descriptor makes one.
func openData(path string, flag int) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, flag|syscall.O_CLOEXEC, 0o600)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return os.NewFile(uintptr(fd), path), nil
	}
}

// dirChanged notes a new name in the directory: with sync, the next
// journal fsync fsyncs the directory too.
func (j *journal) dirChanged() {
	if j.sync {
		j.mu.Lock()
		j.dirDirty = true
		j.mu.Unlock()
	}
}

// write appends r to the log (and, with sync, waits until it is on disk).
func (j *journal) write(r *record) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return j.append(r.ID, append(line, '\n'), r.State == stateGone)
}

func (j *journal) append(id string, line []byte, gone bool) error {
	j.mu.Lock()
	if j.log == nil {
		j.mu.Unlock()
		return errors.New("writeback: journal is closed")
	}
	if j.size > j.compactMin && j.size > compactRatio*j.liveBytes {
		if err := j.compactLocked(); err != nil {
			j.mu.Unlock()
			return fmt.Errorf("writeback: compact journal: %w", err)
		}
	}
	if _, err := j.log.Write(line); err != nil {
		j.mu.Unlock()
		return fmt.Errorf("writeback: journal: %w", err)
	}
	j.size += int64(len(line))
	j.liveBytes -= int64(len(j.live[id]))
	if gone {
		delete(j.live, id)
	} else {
		j.live[id] = line
		j.liveBytes += int64(len(line))
	}
	j.appended++
	n := j.appended
	j.mu.Unlock()
	if !j.sync {
		return nil
	}
	return j.syncTo(n)
}

// syncTo makes the first n appends durable; one fsync serves every append
// made before it started (group commit).
func (j *journal) syncTo(n uint64) error {
	j.syncMu.Lock()
	defer j.syncMu.Unlock()
	if j.synced >= n {
		return nil
	}
	j.mu.Lock()
	log, upTo, dir := j.log, j.appended, j.dirDirty
	j.dirDirty = false
	j.mu.Unlock()
	if log == nil {
		return errors.New("writeback: journal is closed")
	}
	if dir {
		if err := syncDir(j.dir); err != nil {
			return fmt.Errorf("writeback: journal: %w", err)
		}
	}
	if err := log.Sync(); err != nil {
		return fmt.Errorf("writeback: journal: %w", err)
	}
	j.synced = upTo
	return nil
}

// remove forgets id: a "gone" record, then its data file (a data file
// without a record is an orphan that recovery deletes; the reverse order
// could leave a record without data).
func (j *journal) remove(id string) error {
	err := j.write(&record{V: recordVersion, ID: id, State: stateGone})
	if derr := os.Remove(j.dataPath(id)); derr != nil && !errors.Is(derr, os.ErrNotExist) && err == nil {
		err = derr
	}
	return err
}

// compactLocked rewrites the log with only the live records: a temporary
// file renamed over the log (fsynced first with sync).
func (j *journal) compactLocked() error {
	tmp := j.logPath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var size int64
	for _, line := range j.live {
		w.Write(line)
		size += int64(len(line))
	}
	err = w.Flush()
	if err == nil && j.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.logPath())
	}
	if err == nil && j.sync {
		err = syncDir(j.dir)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	nf, err := os.OpenFile(j.logPath(), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if j.log != nil {
		j.log.Close()
	}
	j.log, j.size, j.liveBytes = nf, size, size
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// scan reads the log left by an earlier process and returns the last
// record of every id not gone, and the number of unreadable lines (a line
// cut by a crash, at the end). It deletes data files without a record and
// temporary files, compacts the log and opens it for appending.
func (j *journal) scan() (recs []*record, bad int, err error) {
	byID, lines, bad, err := readLog(j.logPath())
	if err != nil {
		return nil, 0, err
	}
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, 0, fmt.Errorf("writeback: read staging dir: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		id, isData := strings.CutSuffix(name, dataExt)
		if strings.HasSuffix(name, ".tmp") || (isData && byID[id] == nil) {
			os.Remove(filepath.Join(j.dir, name))
		}
	}
	for id, r := range byID {
		recs = append(recs, r)
		j.live[id] = lines[id]
		j.liveBytes += int64(len(lines[id]))
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.compactLocked(); err != nil {
		return nil, 0, fmt.Errorf("writeback: rewrite journal: %w", err)
	}
	return recs, bad, nil
}

// readLog reads a journal log: the last record of every id not gone, its
// line (newline included), and the number of unreadable lines (a line
// cut by a crash, at the end). A missing log is empty.
func readLog(path string) (byID map[string]*record, lines map[string][]byte, bad int, err error) {
	byID, lines = map[string]*record{}, map[string][]byte{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return byID, lines, 0, nil
	}
	if err != nil {
		return nil, nil, 0, fmt.Errorf("writeback: read journal: %w", err)
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 1<<16)
	for {
		line, rerr := rd.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var r record
			if json.Unmarshal(t, &r) != nil || r.ID == "" || r.V != recordVersion {
				bad++
			} else if r.State == stateGone {
				delete(byID, r.ID)
				delete(lines, r.ID)
			} else {
				byID[r.ID] = &r
				lines[r.ID] = append(t, '\n')
			}
		}
		if rerr == io.EOF {
			return byID, lines, bad, nil
		}
		if rerr != nil {
			return nil, nil, 0, fmt.Errorf("writeback: read journal: %w", rerr)
		}
	}
}
