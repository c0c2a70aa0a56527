package writeback

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// stallUploads makes every data-carrying call hang until its context ends.
func stallUploads() faulty.Config {
	return faulty.Config{Stall: func(op, key string) time.Duration {
		switch op {
		case faulty.OpPut, faulty.OpUploadPart, faulty.OpComplete, faulty.OpCopy:
			return faulty.Forever
		}
		return 0
	}}
}

// TestCrashRecovery abandons a manager whose uploads hang (as a SIGKILL
// would: Close leaves staging and journal as they are), then starts a new
// one on the same directory with a healthy store: every closed file is
// uploaded, the recorded multipart upload is aborted, and the file that
// was never closed is discarded.
func TestCrashRecovery(t *testing.T) {
	e := newEnv(t)
	e.setFaults(stallUploads())
	cfg := e.config()
	cfg.StreamAfter = -1
	m1 := e.open(cfg)

	small := pattern(1000, 1)
	big := pattern(5*testPart+3, 2) // multipart at close
	based := pattern(6*testPart, 3)
	e.putObject("base", based)
	writeFile(t, m1, "d/small", small)
	writeFile(t, m1, "d/big", big)
	if err := m1.Symlink(tgt("d/link"), "small"); err != nil {
		t.Fatal(err)
	}
	fb := openBase(t, e, m1, "base")
	fb.WriteAt([]byte("appended"), int64(len(based)))
	if err := m1.Rename(tgt("base"), tgt("d/moved")); err != nil {
		t.Fatal(err)
	}
	fb.Release()
	open, _ := m1.Create(tgt("d/open"), 0o644)
	open.Acquire()
	open.WriteAt([]byte("never closed"), 0)
	waitFor(t, "the multipart upload to start", func() bool { return e.mem.PendingUploads() >= 1 })
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}

	e.setFaults(faulty.Config{})
	m2 := e.open(cfg)
	drain(t, m2)
	e.wantObject("d/small", small)
	e.wantObject("d/big", big)
	e.wantObject("d/moved", append(based, "appended"...))
	e.wantNoObject("base")
	e.wantNoObject("d/open")
	info, err := e.mem.Stat(context.Background(), "d/link")
	if err != nil || info.Metadata[MetaSymlink] != "small" {
		t.Fatalf("symlink: %+v, %v", info, err)
	}
	if n := e.mem.PendingUploads(); n != 0 {
		t.Errorf("%d multipart uploads left pending", n)
	}
	if !strings.Contains(e.logBuf.String(), "s3://bkt/d/open") {
		t.Errorf("the discarded open file is not logged:\n%s", e.logBuf)
	}
	assertStagingEmpty(t, m2)
}

// TestRecoverReopened: a closed file modified again and not closed before
// the crash is uploaded as of its last change.
func TestRecoverReopened(t *testing.T) {
	e := newEnv(t)
	e.setFaults(stallUploads())
	m1 := e.manager()
	f := writeFile(t, m1, "r", []byte("first"))
	f.Acquire()
	f.WriteAt([]byte(" second"), 5)
	f.Truncate(9)
	m1.Close()
	e.setFaults(faulty.Config{})
	m2 := e.manager()
	drain(t, m2)
	e.wantObject("r", []byte("first sec"))
}

// TestDrainFailureThenRecovery: with the store down, Drain fails by its
// deadline naming every path (and logging each); a later manager on the
// same directory uploads them.
func TestDrainFailureThenRecovery(t *testing.T) {
	e := newEnv(t)
	e.setFaults(faulty.Config{FailRate: map[string]float64{faulty.AnyOp: 1}, Err: faulty.ServerError("Put", "")})
	m1 := e.manager()
	keys := []string{"o/a", "o/b", "p/c"}
	for i, k := range keys {
		writeFile(t, m1, k, pattern(100+i, byte(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := m1.Drain(ctx)
	var de *DrainError
	if !errors.As(err, &de) || len(de.Failures) != len(keys) {
		t.Fatalf("Drain = %v, want a DrainError naming %d files", err, len(keys))
	}
	logs := e.logBuf.String()
	for _, k := range keys {
		if !strings.Contains(err.Error(), "s3://bkt/"+k) || !strings.Contains(logs, "s3://bkt/"+k) {
			t.Errorf("%s not named in the error or the log", k)
		}
	}
	if !strings.Contains(logs, "status=500") {
		t.Errorf("HTTP status not logged:\n%s", logs)
	}
	if m1.Stats().PendingFiles != len(keys) || m1.Stats().Retries == 0 {
		t.Errorf("Stats %+v", m1.Stats())
	}
	m1.Close()

	e.setFaults(faulty.Config{})
	m2 := e.manager()
	drain(t, m2)
	for i, k := range keys {
		e.wantObject(k, pattern(100+i, byte(i)))
	}
}

// TestDrainFinalFailure: a final error ends Drain at once; Sync and Drain
// report it.
func TestDrainFinalFailure(t *testing.T) {
	e := newEnv(t)
	e.setFaults(faulty.Config{Fail: func(op, key string) error {
		if key == "denied" {
			return &objstore.Error{Provider: "faulty", Op: op, Key: key, Status: 403, RequestID: "req-42", Kind: objstore.ErrPermission}
		}
		return nil
	}})
	m := e.manager()
	writeFile(t, m, "denied", []byte("x"))
	writeFile(t, m, "fine", []byte("y"))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := m.Drain(ctx)
	var de *DrainError
	if !errors.As(err, &de) || len(de.Failures) != 1 || de.Failures[0].Target != tgt("denied") || !errors.Is(de.Failures[0].Err, objstore.ErrPermission) {
		t.Fatalf("Drain = %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Error("Drain waited for its deadline after a final error")
	}
	if !strings.Contains(e.logBuf.String(), "request_id=req-42") {
		t.Errorf("request id not logged:\n%s", e.logBuf)
	}
	e.wantObject("fine", []byte("y"))
}

// TestDrainReportsOpenFile: a file still open with unclosed changes is
// waited for until the deadline, then reported.
func TestDrainReportsOpenFile(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("busy"), 0o644)
	f.Acquire()
	f.WriteAt([]byte("x"), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := m.Drain(ctx)
	var de *DrainError
	if !errors.As(err, &de) || len(de.Failures) != 1 || !errors.Is(de.Failures[0].Err, errStillOpen) {
		t.Fatalf("Drain = %v, want the open file reported", err)
	}
	// A reader's handle does not hold back a closed file.
	f.Release()
	f.Acquire()
	drain(t, m)
	e.wantObject("busy", []byte("x"))
	f.Release()
}

// TestDrainWaitsForClose: Drain waits for an open file that is closed
// before the deadline.
func TestDrainWaitsForClose(t *testing.T) {
	e := newEnv(t)
	m := e.manager()
	f, _ := m.Create(tgt("late"), 0o644)
	f.Acquire()
	f.WriteAt([]byte("late"), 0)
	time.AfterFunc(50*time.Millisecond, func() { f.Release() })
	drain(t, m)
	e.wantObject("late", []byte("late"))
}

// TestRecoverMissingData: a closed record whose data file is gone fails
// the drain (naming the path) instead of uploading garbage.
func TestRecoverMissingData(t *testing.T) {
	e := newEnv(t)
	e.setFaults(stallUploads())
	m1 := e.manager()
	f := writeFile(t, m1, "lost", []byte("data"))
	m1.Close()
	os.Remove(m1.j.dataPath(f.id))
	e.setFaults(faulty.Config{})
	m2 := e.manager()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var de *DrainError
	if err := m2.Drain(ctx); !errors.As(err, &de) || de.Failures[0].Target != tgt("lost") {
		t.Fatalf("Drain = %v", err)
	}
	e.wantNoObject("lost")
}

// TestRetriedCompleteThatLanded: a Complete whose first attempt landed
// but whose answer was lost is retried by objstore.WithRetry and fails
// with ErrNotFound; writeback accepts the object when its size matches.
func TestRetriedCompleteThatLanded(t *testing.T) {
	e := newEnv(t)
	lost := &lostAnswer{op: "Complete"}
	cfg := e.config()
	cfg.StreamAfter = -1
	m, err := New(context.Background(), cfg, func(context.Context, string, string) (objstore.Store, error) {
		return objstore.WithRetry(&lostAnswerStore{recorder: e.rec, l: lost}, objstore.RetryPolicy{Base: time.Millisecond}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	data := pattern(4*testPart, 7)
	writeFile(t, m, "k", data)
	drain(t, m)
	e.wantObject("k", data)
	if lost.mu.Lock(); !lost.done {
		t.Fatal("the answer of Complete was never lost")
	}
	lost.mu.Unlock()
}

// TestRetriedCopyThatLanded: the same for an in-place metadata copy.
func TestRetriedCopyThatLanded(t *testing.T) {
	e := newEnv(t)
	lost := &lostAnswer{op: "Copy"}
	m, err := New(context.Background(), e.config(), func(context.Context, string, string) (objstore.Store, error) {
		return objstore.WithRetry(&lostAnswerStore{recorder: e.rec, l: lost}, objstore.RetryPolicy{Base: time.Millisecond}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e.putObject("k", []byte("v"))
	f := openBase(t, e, m, "k")
	f.SetMode(0o600)
	f.Release()
	drain(t, m)
	info, _ := e.mem.Stat(context.Background(), "k")
	lost.mu.Lock()
	defer lost.mu.Unlock()
	if info.Metadata[MetaMode] != "600" || !lost.done {
		t.Fatalf("metadata %v, answer lost %v", info.Metadata, lost.done)
	}
}

// lostAnswer loses the answer of the first successful call of op: err
// comes back instead (default: a retryable transport error).
type lostAnswer struct {
	op  string
	err error

	mu   sync.Mutex // guards done
	done bool
}

func (l *lostAnswer) lose(op string, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && op == l.op && !l.done {
		l.done = true
		if l.err != nil {
			return l.err
		}
		return syscall.ECONNRESET
	}
	return err
}

type lostAnswerStore struct {
	*recorder
	l *lostAnswer
}

func (s *lostAnswerStore) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	info, err := s.recorder.Copy(ctx, src, dst, opts)
	return info, s.l.lose("Copy", err)
}

func (s *lostAnswerStore) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (objstore.Upload, error) {
	up, err := s.recorder.CreateUpload(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &lostAnswerUpload{Upload: up, l: s.l}, nil
}

type lostAnswerUpload struct {
	objstore.Upload
	l *lostAnswer
}

func (u *lostAnswerUpload) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	info, err := u.Upload.Complete(ctx)
	return info, u.l.lose("Complete", err)
}

// TestLandedAnswerLost: a Complete lands but its answer is a final error;
// the file's own base is then gone. The next attempt finds the object by
// its token and uploads on top of it, in this process or (crash) the next.
func TestLandedAnswerLost(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "same process", true: "after a crash"}[crash], func(t *testing.T) {
			e := newEnv(t)
			lost := &lostAnswer{op: "Complete", err: &objstore.Error{Provider: "test", Op: "Complete", Status: 400, Err: errors.New("answer lost")}}
			resolve := func(context.Context, string, string) (objstore.Store, error) {
				return &lostAnswerStore{recorder: e.rec, l: lost}, nil
			}
			cfg := e.config()
			if crash {
				// A final error is retried after a backoff (see
				// permanentAttempts): the crash comes first.
				cfg.RetryMin, cfg.RetryMax = 5*time.Second, 5*time.Second
			}
			m, err := New(context.Background(), cfg, resolve)
			if err != nil {
				t.Fatal(err)
			}
			orig := pattern(6*testPart, 8)
			e.putObject("big", orig)
			f := openBase(t, e, m, "big")
			f.WriteAt([]byte("tail"), int64(len(orig)))
			f.Release()
			waitFor(t, "the lost answer", func() bool { lost.mu.Lock(); defer lost.mu.Unlock(); return lost.done })
			if crash {
				waitFor(t, "the failure", func() bool { st := m.Stats(); return st.Failures+st.Retries > 0 })
				m.Close()
				cfg = e.config()
				if m, err = New(context.Background(), cfg, resolve); err != nil {
					t.Fatal(err)
				}
			}
			defer m.Close()
			drain(t, m)
			e.wantObject("big", append(orig, "tail"...))
		})
	}
}
