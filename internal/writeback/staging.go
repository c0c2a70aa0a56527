package writeback

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Config.Dir is a staging root that several ferry processes may share
// (see README.md): each Manager stages in a directory of its own under
// it, locked for its life. A Manager that starts adopts the directories
// whose lock is free (their process died): it moves their live records
// and data files into its own directory, and deletes them.
const (
	setupLockName = "setup.lock" // in the root: held while a Manager sets up
	ownDirPattern = "run-"       // prefix of a Manager's own directory
	setupTimeout  = 2 * time.Minute
)

// openStaging creates the staging root, makes and locks this Manager's
// own directory in it, and adopts into it the directories of processes
// that died (and a staging directory of an older ferry that used the root
// itself). It holds the root's setup lock meanwhile, so that no other
// Manager adopts a directory being set up or adopted. The caller scans
// the returned journal (adopted records included).
func openStaging(root string, sync bool, log *slog.Logger) (*journal, error) {
	if root == "" {
		return nil, errors.New("writeback: Config.Dir is empty")
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("writeback: create staging dir: %w", err)
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("writeback: staging dir: %w", err)
	}
	unlock, err := lockSetup(root)
	if err != nil {
		return nil, err
	}
	defer unlock()
	dir, err := os.MkdirTemp(root, ownDirPattern)
	if err != nil {
		return nil, fmt.Errorf("writeback: create staging dir: %w", err)
	}
	j, err := openJournal(dir, sync)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		j.close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("writeback: read staging dir: %w", err)
	}
	var cands []string
	if _, err := os.Stat(filepath.Join(root, logName)); err == nil {
		cands = append(cands, root) // an older ferry's layout
	}
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if e.IsDir() && strings.HasPrefix(e.Name(), ownDirPattern) && p != dir {
			cands = append(cands, p)
		}
	}
	for _, c := range cands {
		n, bad, err := j.adopt(c, c == root)
		switch {
		case err != nil:
			log.Warn("writeback: could not take over the staging dir of a stopped ferry; the next start tries again", "dir", c, "err", err)
		case n > 0 || bad > 0:
			log.Info("writeback: took over the staged files of a stopped ferry", "dir", c, "records", n, "unreadable_lines", bad)
		}
	}
	return j, nil
}

// lockSetup takes the root's setup lock, waiting for another Manager's
// setup to end (at most setupTimeout), and returns its release.
func lockSetup(root string) (func(), error) {
	lf, err := os.OpenFile(filepath.Join(root, setupLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writeback: lock staging dir: %w", err)
	}
	deadline := time.Now().Add(setupTimeout)
	for {
		err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { lf.Close() }, nil // closing releases the flock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			lf.Close()
			return nil, fmt.Errorf("writeback: lock staging dir %s: %w", root, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// adopt moves the live records of the staging directory src, when its
// lock is free (its process died), into j, which is not scanned yet, and
// deletes src (with legacy, src is the root itself: only its staging
// files are deleted). It returns the number of records moved; 0 when src
// is in use.
//
// Crash safety: data files are hard-linked first, then the records are
// appended to j's log, and only then is src's log deleted, so that every
// record is in at least one log with its data. A kill in between leaves
// the same record in both, which the next start adopts twice (the same
// id, the same line) before any upload starts.
func (j *journal) adopt(src string, legacy bool) (n, bad int, err error) {
	lf, err := os.OpenFile(filepath.Join(src, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer lf.Close() // releases the flock, after src is gone
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return 0, 0, nil // a live ferry's
		}
		return 0, 0, err
	}
	srcLog := filepath.Join(src, logName)
	_, lines, bad, err := readLog(srcLog)
	if err != nil {
		return 0, 0, err
	}
	var buf []byte
	for id, line := range lines {
		err := os.Link(filepath.Join(src, id+dataExt), j.dataPath(id))
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrExist) {
			return 0, 0, fmt.Errorf("link staged data: %w", err)
		}
		buf = append(buf, line...)
	}
	if len(buf) > 0 {
		if err := j.appendRaw(buf); err != nil {
			return 0, 0, err
		}
	}
	if err := os.Remove(srcLog); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	removeStaging(src, legacy)
	return len(lines), bad, nil
}

// appendRaw appends lines to j's log before scan opens it (adoption),
// durably with sync.
func (j *journal) appendRaw(lines []byte) error {
	f, err := os.OpenFile(j.logPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(lines)
	if err == nil && j.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && j.sync {
		err = syncDir(j.dir)
	}
	return err
}

// removeStaging deletes what is left of an adopted staging directory:
// data files, temporary files, the lock, and (unless legacy) the
// directory itself. Errors are ignored: leftovers without a log hold
// nothing live, and the next adopter deletes them.
func removeStaging(dir string, legacy bool) {
	if !legacy {
		os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, dataExt) || strings.HasSuffix(n, ".tmp") || n == lockName) {
			os.Remove(filepath.Join(dir, n))
		}
	}
}

// closeOwn closes j and, when no record is live (every staged file was
// made durable or forgotten), deletes its directory, under the root's
// setup lock and before releasing its own, so that no other Manager
// adopts it meanwhile.
func (j *journal) closeOwn() error {
	j.mu.Lock()
	empty := len(j.live) == 0
	var err error
	if empty && j.log != nil {
		err = j.log.Close()
		j.log = nil
	}
	j.mu.Unlock()
	if empty {
		if unlock, lerr := lockSetup(filepath.Dir(j.dir)); lerr == nil {
			os.RemoveAll(j.dir)
			unlock()
		}
	}
	return errors.Join(err, j.close())
}
