package writeback

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestAbortsSurviveOutage: a multipart upload started before an outage
// cannot be aborted during it. Drain fails by its deadline; the upload is
// then aborted once the store answers again: by a later Drain of the same
// manager, or by the next manager on the same directory (its record kept
// the upload id). The file lands whole either way.
func TestAbortsSurviveOutage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{
		{name: "same manager"},
		{name: "next manager", restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var down atomic.Bool
			var creates atomic.Int32
			e.setFaults(faulty.Config{Fail: func(op, key string) error {
				if op == faulty.OpCreateUpload && creates.Add(1) == 1 {
					down.Store(true) // the outage starts right after it
					return nil
				}
				if down.Load() {
					return faulty.ServerError(op, key)
				}
				return nil
			}})
			cfg := e.config()
			cfg.StreamAfter = -1
			m1 := e.open(cfg)
			data := pattern(5*testPart+3, 7) // multipart at close
			writeFile(t, m1, "big", data)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			var de *DrainError
			if err := m1.Drain(ctx); !errors.As(err, &de) {
				t.Fatalf("Drain during the outage = %v, want a DrainError", err)
			}
			if n := e.mem.PendingUploads(); n != 1 {
				t.Fatalf("%d multipart uploads pending during the outage, want 1", n)
			}
			down.Store(false)
			m := m1
			if tc.restart {
				m1.Close()
				m = e.open(cfg)
			}
			drain(t, m)
			e.wantObject("big", data)
			if n := e.mem.PendingUploads(); n != 0 {
				t.Errorf("%d multipart uploads left pending", n)
			}
			assertStagingEmpty(t, m)
		})
	}
}

// TestCreateUploadCancelledByRename: a rename while CreateUpload is on
// its way does not cut it short (the store may create the upload and the
// answer be lost): the upload is journaled and aborted, and the file
// lands under its new name only.
func TestCreateUploadCancelledByRename(t *testing.T) {
	e := newEnv(t)
	e.landing = true
	g := e.gate(opKey(faulty.OpCreateUpload, "big"))
	e.setFaults(faulty.Config{Stall: g.stall})
	cfg := e.config()
	cfg.StreamAfter = -1
	m := e.open(cfg)
	data := pattern(5*testPart+3, 8)
	writeFile(t, m, "big", data)
	waitFor(t, "CreateUpload to be held", func() bool { return g.held.Load() == 1 })
	if err := m.Rename(tgt("big"), tgt("big2")); err != nil {
		t.Fatal(err)
	}
	g.release()
	drain(t, m)
	e.wantObject("big2", data)
	e.wantNoObject("big")
	if n := e.mem.PendingUploads(); n != 0 {
		t.Errorf("%d multipart uploads left pending", n)
	}
	assertStagingEmpty(t, m)
}
