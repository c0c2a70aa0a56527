package writeback

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Journal record states (see README.md).
const (
	stateOpen      = "open"      // being written; discarded by recovery
	stateClosed    = "closed"    // staged and closed: recovery uploads it
	stateUploaded  = "uploaded"  // durable; only DeleteAfter keys remain to delete
	stateDiscarded = "discarded" // no data; only Uploads remain to abort
)

const recordVersion = 1

// record is one staged file's journal entry, <id>.json beside <id>.data.
type record struct {
	V       int    `json:"v"`
	ID      string `json:"id"`
	Seq     uint64 `json:"seq"` // orders records of the same target: highest wins
	State   string `json:"state"`
	Target  Target `json:"target"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	MtimeNs int64  `json:"mtime_ns"`
	// MtimeSet: the mtime was set explicitly (utimens) and is stored as
	// metadata; otherwise the object's own modification time stands.
	MtimeSet bool     `json:"mtime_set,omitempty"`
	Symlink  string   `json:"symlink,omitempty"`
	Base     *baseRec `json:"base,omitempty"`
	// Dirty lists the [off, end) ranges whose bytes are in the data file;
	// other ranges below Base.Limit come from the base object. Unused
	// without a base (the data file is then the whole content).
	Dirty       [][2]int64  `json:"dirty,omitempty"`
	Uploads     []uploadRec `json:"uploads,omitempty"`
	DeleteAfter []deleteRec `json:"delete_after,omitempty"`
}

// baseRec is the object whose bytes a file's clean ranges come from.
type baseRec struct {
	Key      string            `json:"key"`
	Version  string            `json:"version,omitempty"`
	Size     int64             `json:"size"`
	Limit    int64             `json:"limit"` // bytes at or past Limit are not the base's (truncated)
	Metadata map[string]string `json:"metadata,omitempty"`
}

// uploadRec is a multipart upload that must be completed or aborted.
type uploadRec struct {
	Key string `json:"key"`
	ID  string `json:"id"`
	// owned (not journaled): a running stream or attempt of this process
	// created the upload and completes or aborts it itself. Uploads not
	// owned (recovered from the journal) are aborted by the next attempt.
	owned bool
}

// deleteRec is a key to delete once the file is durable under its new
// name (the old name of a rename). Version, when set, guards the delete.
type deleteRec struct {
	Key     string `json:"key"`
	Version string `json:"version,omitempty"`
}

// journal is the staging directory.
type journal struct {
	dir  string
	sync bool
	lock *os.File // flock held for the Manager's life
}

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
	lf, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writeback: lock staging dir: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("writeback: staging dir %s is in use by another process: %w", dir, err)
	}
	return &journal{dir: dir, sync: sync, lock: lf}, nil
}

func (j *journal) close() error {
	if j.lock == nil {
		return nil
	}
	err := j.lock.Close() // releases the flock
	j.lock = nil
	return err
}

func (j *journal) dataPath(id string) string   { return filepath.Join(j.dir, id+".data") }
func (j *journal) recordPath(id string) string { return filepath.Join(j.dir, id+".json") }

// write replaces r's record atomically: temp file, (fsync,) rename (, fsync dir).
func (j *journal) write(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	final := j.recordPath(r.ID)
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writeback: journal: %w", err)
	}
	_, err = f.Write(b)
	if err == nil && j.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil && j.sync {
		err = j.syncDir()
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writeback: journal: %w", err)
	}
	return nil
}

func (j *journal) syncDir() error {
	d, err := os.Open(j.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// remove deletes the record, then the data (a data file without a record
// is an orphan that recovery deletes; the reverse would be a lost file).
func (j *journal) remove(id string) error {
	err := os.Remove(j.recordPath(id))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if derr := os.Remove(j.dataPath(id)); derr != nil && !errors.Is(derr, os.ErrNotExist) && err == nil {
		err = derr
	}
	return err
}

// scan reads every record, deletes temp files and orphan data files, and
// returns the records and the ids of unreadable ones.
func (j *journal) scan() (recs []*record, bad []string, err error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("writeback: read staging dir: %w", err)
	}
	haveRecord := map[string]bool{}
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			haveRecord[id] = true
		}
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".tmp"):
			os.Remove(filepath.Join(j.dir, name))
		case strings.HasSuffix(name, ".data"):
			if id := strings.TrimSuffix(name, ".data"); !haveRecord[id] {
				os.Remove(filepath.Join(j.dir, name))
			}
		case strings.HasSuffix(name, ".json"):
			id := strings.TrimSuffix(name, ".json")
			b, err := os.ReadFile(filepath.Join(j.dir, name))
			var r record
			if err == nil {
				err = json.Unmarshal(b, &r)
			}
			if err != nil || r.ID != id || r.V != recordVersion {
				bad = append(bad, id)
				continue
			}
			recs = append(recs, &r)
		}
	}
	return recs, bad, nil
}
