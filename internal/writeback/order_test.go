package writeback

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

func isExitcode(key string) bool { return strings.HasSuffix(key, "/.exitcode") }

// TestOrderLast: .exitcode is uploaded only after Stop (the task ended,
// compaction is done) and after every other file under its directory,
// subdirectories included, is durable; other directories are not held
// back by it.
func TestOrderLast(t *testing.T) {
	e := newEnv(t)
	g := e.gate(opKey(faulty.OpPut, "w/out1"))
	e.setFaults(faulty.Config{Stall: g.stall})
	cfg := e.config()
	cfg.OrderLast = isExitcode
	m := e.open(cfg)
	writeFile(t, m, "w/out1", []byte("1"))
	writeFile(t, m, "w/.exitcode", []byte("0"))
	writeFile(t, m, "w/out2", []byte("2"))
	writeFile(t, m, "w/sub/deeper", []byte("3")) // an output directory
	writeFile(t, m, "v/.exitcode", []byte("0"))  // another work dir
	writeFile(t, m, "v/out", []byte("4"))
	waitFor(t, "the other uploads", func() bool {
		ev := e.rec.events()
		return slices.Contains(ev, "put w/out2") && slices.Contains(ev, "put v/out") && slices.Contains(ev, "put w/sub/deeper")
	})
	time.Sleep(30 * time.Millisecond)
	if ev := e.rec.events(); slices.Contains(ev, "put w/.exitcode") || slices.Contains(ev, "put v/.exitcode") {
		t.Fatalf("events %v: .exitcode uploaded before Stop", ev)
	}
	m.Stop()
	waitFor(t, "v/.exitcode", func() bool { return slices.Contains(e.rec.events(), "put v/.exitcode") })
	time.Sleep(30 * time.Millisecond)
	if slices.Contains(e.rec.events(), "put w/.exitcode") {
		t.Fatal("w/.exitcode uploaded while out1 is pending")
	}
	g.release()
	drain(t, m)
	ev := e.rec.events()
	last := slices.Index(ev, "put w/.exitcode")
	for _, k := range []string{"put w/out1", "put w/out2", "put w/sub/deeper"} {
		if i := slices.Index(ev, k); i < 0 || i > last {
			t.Errorf("events %v: %s after .exitcode", ev, k)
		}
	}
}

// TestOrderLastSync: an fsync of .exitcode does not wait for Stop (the
// task waits for it), only for the other files of its directory.
func TestOrderLastSync(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.OrderLast = isExitcode
	m := e.open(cfg)
	writeFile(t, m, "w/out", []byte("1"))
	f := writeFile(t, m, "w/.exitcode", []byte("0"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	ev := e.rec.events()
	if i, j := slices.Index(ev, "put w/out"), slices.Index(ev, "put w/.exitcode"); i < 0 || j < i {
		t.Fatalf("events %v", ev)
	}
}

// TestOrderLastBlockedByFailure: when another file of the directory
// fails, .exitcode is never uploaded and both are reported.
func TestOrderLastBlockedByFailure(t *testing.T) {
	e := newEnv(t)
	e.setFaults(faulty.Config{Fail: func(op, key string) error {
		if key == "w/out" {
			return objstore.ErrPermission
		}
		return nil
	}})
	cfg := e.config()
	cfg.OrderLast = isExitcode
	m := e.open(cfg)
	writeFile(t, m, "w/out", []byte("1"))
	writeFile(t, m, "w/.exitcode", []byte("0"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := m.Drain(ctx)
	var de *DrainError
	if !errors.As(err, &de) || len(de.Failures) != 2 {
		t.Fatalf("Drain = %v, want both files reported", err)
	}
	for _, fl := range de.Failures {
		if fl.Target.Key == "w/.exitcode" && !errors.Is(fl.Err, errOrderWait) {
			t.Errorf(".exitcode reported with %v", fl.Err)
		}
	}
	if time.Since(start) > 5*time.Second {
		t.Error("Drain waited for its deadline though nothing could progress")
	}
	e.wantNoObject("w/.exitcode")
}

// TestOrderLastWaitsForOpenFile: an open file of the directory holds the
// .exitcode back until it is closed and durable.
func TestOrderLastWaitsForOpenFile(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.OrderLast = isExitcode
	m := e.open(cfg)
	f, _ := m.Create(tgt("w/log"), 0o644)
	f.Acquire()
	f.WriteAt([]byte("log"), 0)
	writeFile(t, m, "w/.exitcode", []byte("0"))
	time.Sleep(30 * time.Millisecond)
	e.wantNoObject("w/.exitcode")
	f.Release()
	drain(t, m)
	ev := e.rec.events()
	if i, j := slices.Index(ev, "put w/log"), slices.Index(ev, "put w/.exitcode"); i < 0 || j < i {
		t.Fatalf("events %v", ev)
	}
}

// TestOrderLastSyncAfterOthers: an fsync of .exitcode once the other
// files of its directory are durable (its upload loop waits for Stop)
// wakes the loop up.
func TestOrderLastSyncAfterOthers(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.OrderLast = isExitcode
	m := e.open(cfg)
	writeFile(t, m, "w/out", []byte("1"))
	f := writeFile(t, m, "w/.exitcode", []byte("0"))
	waitFor(t, "w/out durable and forgotten", func() bool { return m.Get(tgt("w/out")) == nil })
	time.Sleep(50 * time.Millisecond) // the loop of .exitcode waits for a change
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	e.wantObject("w/.exitcode", []byte("0"))
}
