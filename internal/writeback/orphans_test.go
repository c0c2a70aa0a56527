package writeback

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestRecoverUnjournaledUpload: a ferry killed while a CreateUpload was on
// the wire (the server created the upload, the answer never came back, so
// its ID was never journaled) leaves an upload only a listing finds. The
// next manager on the same directory aborts it, whether the file was
// closed (its multipart upload at close) or still being written (its
// stream), and keeps an upload of another client started after it.
func TestRecoverUnjournaledUpload(t *testing.T) {
	tests := []struct {
		name   string
		closed bool
		want   []byte // the object after the recovery; nil: none
	}{
		{name: "closed file", closed: true, want: pattern(3*testPart+5, 1)},
		{name: "open file streaming", closed: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.landing = true // a CreateUpload sent creates the upload
			g := e.gate(opKey(faulty.OpCreateUpload, "big"))
			e.setFaults(faulty.Config{Stall: g.stall})
			cfg := e.config()
			if tc.closed {
				cfg.StreamAfter = -1 // one multipart upload at close
			}
			m1 := e.open(cfg)
			data := pattern(3*testPart+5, 1)
			f, err := m1.Create(tgt("big"), 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.Acquire()
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			if tc.closed {
				if err := f.Release(); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "CreateUpload to be held", func() bool { return g.held.Load() == 1 })
			// The kill: the manager stops, and the request it had sent
			// creates the upload after all.
			time.AfterFunc(20*time.Millisecond, g.release)
			if err := m1.Close(); err != nil {
				t.Fatal(err)
			}
			if n := e.mem.PendingUploads(); n != 1 {
				t.Fatalf("%d uploads pending after the kill, want 1", n)
			}

			e.setFaults(faulty.Config{})
			m2 := e.open(e.config())
			// Another client's upload of the same key, started after the
			// restart (maybe before the recovery looks), is not the killed
			// ferry's.
			other, err := e.mem.CreateUpload(context.Background(), "big", objstore.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, m2)
			if n := e.mem.PendingUploads(); n != 1 {
				t.Errorf("%d uploads pending after the recovery, want only the other client's", n)
			}
			if err := other.Abort(context.Background()); err != nil {
				t.Errorf("the other client's upload was aborted: %v", err)
			}
			if tc.want != nil {
				e.wantObject("big", tc.want)
			} else {
				e.wantNoObject("big")
			}
			assertStagingEmpty(t, m2)
		})
	}
}

// TestRecoverJournaledUploadGone: a ferry killed at the Complete of its
// multipart upload (crash point before-complete) journaled the upload,
// but the Complete it had sent may still commit at the server after the
// kill, so that the upload is gone when the next manager aborts it
// (NoSuchUpload). The recovery takes that as done: the file is uploaded
// again, no upload is left, nothing is logged as a failure, and the
// staging is empty.
func TestRecoverJournaledUploadGone(t *testing.T) {
	tests := []struct {
		name string
		gone bool // the journaled upload is gone before the restart
	}{
		{name: "upload gone (Complete committed after the kill)", gone: true},
		{name: "upload still there", gone: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			g := e.gate(opKey(faulty.OpComplete, "big"))
			e.setFaults(faulty.Config{Stall: g.stall})
			cfg := e.config()
			cfg.StreamAfter = -1 // one multipart upload at close
			m1 := e.open(cfg)
			data := pattern(3*testPart+5, 2)
			f, err := m1.Create(tgt("big"), 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.Acquire()
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Release(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "Complete to be held", func() bool { return g.held.Load() == 1 })
			ups, err := e.mem.ListUploads(context.Background(), "big")
			if err != nil || len(ups) != 1 {
				t.Fatalf("uploads before the kill: %v, %v; want 1", ups, err)
			}
			// The kill: the Complete never answers this manager.
			time.AfterFunc(20*time.Millisecond, g.release)
			if err := m1.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.gone {
				if err := e.mem.AbortUpload(context.Background(), "big", ups[0].ID); err != nil {
					t.Fatal(err)
				}
			}

			e.setFaults(faulty.Config{})
			m2 := e.open(e.config())
			drain(t, m2)
			if n := e.mem.PendingUploads(); n != 0 {
				t.Errorf("%d uploads pending after the recovery, want 0", n)
			}
			e.wantObject("big", data)
			assertStagingEmpty(t, m2)
			if log := e.logBuf.String(); strings.Contains(log, "could not abort") {
				t.Errorf("the recovery logged a failed abort:\n%s", log)
			}
		})
	}
}
