package writeback

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// streamEnv is an env whose manager streams files past one part.
func streamEnv(t *testing.T) (*env, *Manager) {
	e := newEnv(t)
	cfg := e.config()
	cfg.StreamAfter = testPart
	return e, e.open(cfg)
}

// writeSeq writes data to f sequentially in chunks.
func writeSeq(t *testing.T, f *File, data []byte, off int64, chunk int) {
	t.Helper()
	for i := 0; i < len(data); i += chunk {
		end := min(i+chunk, len(data))
		if _, err := f.WriteAt(data[i:end], off+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStreamUploadsPartsBeforeClose(t *testing.T) {
	e, m := streamEnv(t)
	data := pattern(10*testPart+123, 1)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	writeSeq(t, f, data, 0, 3000)
	waitFor(t, "parts streamed while open", func() bool { return e.fs.Calls(faulty.OpUploadPart) >= 9 })
	if _, ok := e.object("s"); ok {
		t.Fatal("object complete before close")
	}
	f.Release()
	drain(t, m)
	e.wantObject("s", data)
	if n := e.fs.Calls(faulty.OpUploadPart); n != 11 {
		t.Errorf("%d parts uploaded, want 11 (each once)", n)
	}
	if e.mem.PendingUploads() != 0 {
		t.Error("multipart upload left pending")
	}
}

// TestStreamRewriteUploadedPart: rewriting bytes of a part already sent
// sends that part again.
func TestStreamRewriteUploadedPart(t *testing.T) {
	e, m := streamEnv(t)
	data := pattern(6*testPart, 2)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	writeSeq(t, f, data, 0, 4096)
	waitFor(t, "part 1 streamed", func() bool { return e.fs.Calls(faulty.OpUploadPart) >= 1 })
	f.WriteAt([]byte("patch"), 10)
	copy(data[10:], "patch")
	f.Release()
	drain(t, m)
	e.wantObject("s", data)
}

// TestStreamTruncateAborts: a truncation below streamed parts aborts the
// stream; the file is uploaded whole and no multipart upload is left.
func TestStreamTruncateAborts(t *testing.T) {
	e, m := streamEnv(t)
	data := pattern(6*testPart, 3)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	writeSeq(t, f, data, 0, 4096)
	waitFor(t, "parts streamed", func() bool { return e.fs.Calls(faulty.OpUploadPart) >= 3 })
	if err := f.Truncate(testPart / 2); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("after"), testPart/2)
	want := append(bytes.Clone(data[:testPart/2]), "after"...)
	f.Release()
	drain(t, m)
	e.wantObject("s", want)
	waitFor(t, "the aborted stream", func() bool { return e.mem.PendingUploads() == 0 })
}

// TestStreamSyncThenWrite: fsync in the middle completes the stream; the
// rest is uploaded at close with the synced parts copied.
func TestStreamSyncThenWrite(t *testing.T) {
	e, m := streamEnv(t)
	data := pattern(8*testPart+9, 4)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	writeSeq(t, f, data[:5*testPart], 0, 5000)
	if err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.wantObject("s", data[:5*testPart])
	writeSeq(t, f, data[5*testPart:], 5*testPart, 5000)
	f.Release()
	drain(t, m)
	e.wantObject("s", data)
	if e.mem.PendingUploads() != 0 {
		t.Error("multipart upload left pending")
	}
}

// TestStreamChmodAfterStart: metadata changed after the stream began is
// applied to the completed object.
func TestStreamChmodAfterStart(t *testing.T) {
	e, m := streamEnv(t)
	data := pattern(4*testPart, 5)
	f, _ := m.Create(tgt("s"), 0o600)
	f.Acquire()
	writeSeq(t, f, data, 0, 8192)
	waitFor(t, "a streamed part", func() bool { return e.fs.Calls(faulty.OpUploadPart) >= 1 })
	f.SetMode(0o640)
	f.Release()
	drain(t, m)
	e.wantObject("s", data)
	info, _ := e.mem.Stat(context.Background(), "s")
	if info.Metadata[MetaMode] != "640" {
		t.Fatalf("mode metadata %q, want 640", info.Metadata[MetaMode])
	}
}

// TestStreamPartFailsRetriedAtClose: a streamed part that fails is sent
// again by the close.
func TestStreamPartFailsRetriedAtClose(t *testing.T) {
	e := newEnv(t)
	var failed atomic.Bool
	e.setFaults(faulty.Config{Fail: func(op, key string) error {
		if op == faulty.OpUploadPart && failed.CompareAndSwap(false, true) {
			return faulty.ServerError(op, key)
		}
		return nil
	}})
	cfg := e.config()
	cfg.StreamAfter = testPart
	cfg.Concurrency = 1
	m := e.open(cfg)
	data := pattern(5*testPart+1, 6)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	writeSeq(t, f, data, 0, 4096)
	f.Release()
	drain(t, m)
	e.wantObject("s", data)
}

func TestLayoutArithmetic(t *testing.T) {
	const (
		mib = int64(1) << 20
		gib = int64(1) << 30
		tib = int64(1) << 40
	)
	s3 := objstore.Caps{MinPartSize: 5 * mib, MaxPartSize: 5 * gib, MaxParts: 10000, MaxObjectSize: 5 * tib}
	az := objstore.Caps{MinPartSize: 1 * mib, MaxPartSize: 4000 * mib, MaxParts: 50000, MaxObjectSize: 50000 * 4000 * mib}
	tests := []struct {
		name string
		lay  layout
		size int64
	}{
		{"uniform s3 5 TiB", uniformLayout(s3, 16*mib, 5*tib), 5 * tib},
		{"uniform s3 1 GiB", uniformLayout(s3, 16*mib, gib), gib},
		{"uniform s3 odd size", uniformLayout(s3, 16*mib, 3*gib+17), 3*gib + 17},
		{"stream s3 5 TiB", streamLayout(s3, 16*mib), 5 * tib},
		{"stream s3 tiny base", streamLayout(s3, 1), 5 * tib},
		{"stream azure 5 TiB", streamLayout(az, 16*mib), 5 * tib},
		{"stream no limits", streamLayout(objstore.Caps{MinPartSize: 5 * mib}, 16*mib), 5 * tib},
		{"stream 1 byte", streamLayout(s3, 16*mib), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts, ok := tc.lay.parts(tc.size)
			if !ok {
				t.Fatalf("%d bytes do not fit in %d parts", tc.size, tc.lay.maxParts)
			}
			var off int64
			for i, p := range parts {
				if p.Off != off {
					t.Fatalf("part %d starts at %d, want %d", i+1, p.Off, off)
				}
				if i < len(parts)-1 && p.End-p.Off < 5*mib && tc.lay.size >= 5*mib {
					t.Fatalf("part %d has %d bytes, below the minimum", i+1, p.End-p.Off)
				}
				if tc.lay.max > 0 && p.End-p.Off > tc.lay.max {
					t.Fatalf("part %d has %d bytes, above the maximum", i+1, p.End-p.Off)
				}
				if n := tc.lay.index(p.Off); n != i+1 {
					t.Fatalf("index(%d) = %d, want %d", p.Off, n, i+1)
				}
				if n := tc.lay.index(p.End - 1); n != i+1 {
					t.Fatalf("index(%d) = %d, want %d", p.End-1, n, i+1)
				}
				off = p.End
			}
			if off != tc.size {
				t.Fatalf("parts cover %d bytes, want %d", off, tc.size)
			}
		})
	}
	if _, ok := streamLayout(s3, 16*mib).parts(49 * tib); ok {
		t.Error("49 TiB fit in 10,000 parts of 5 GiB at most")
	}
	if l := streamLayout(s3, 16*mib); l.partSize(0) != 16*mib || l.tier < 1000 {
		t.Errorf("stream layout %+v: want 16 MiB parts in tiers of at least 1,000", l)
	}
	if got := uniformLayout(s3, 16*mib, 5*tib).size; got != gib {
		t.Errorf("uniform part size for 5 TiB = %d, want 1 GiB", got)
	}
}

// TestStreamFinishWhilePartInFlight: at close, the parts never started go
// at once, without waiting for a streamed part still in flight; that part
// failing is then sent again.
func TestStreamFinishWhilePartInFlight(t *testing.T) {
	e := newEnv(t)
	var held, failNext atomic.Bool
	release := make(chan struct{})
	e.setFaults(faulty.Config{
		Stall: func(op, key string) time.Duration {
			if op == faulty.OpUploadPart && held.CompareAndSwap(false, true) {
				<-release // part 1
			}
			return 0
		},
		Fail: func(op, key string) error {
			if op == faulty.OpUploadPart && failNext.CompareAndSwap(true, false) {
				return faulty.ServerError(op, key)
			}
			return nil
		},
	})
	cfg := e.config()
	cfg.StreamAfter = testPart
	cfg.Concurrency = 2
	cfg.ForegroundQuiet = -1
	m := e.open(cfg)
	data := pattern(6*testPart+1, 8)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	writeSeq(t, f, data, 0, 4096)
	// Parts 2 to 6 pass part 1, held; part 7 (1 byte) waits for the close.
	waitFor(t, "parts 2 to 6 streamed", func() bool { return e.fs.Calls(faulty.OpUploadPart) == 5 })
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "part 7 sent while part 1 is in flight", func() bool { return e.fs.Calls(faulty.OpUploadPart) == 6 })
	failNext.Store(true) // the only call left is part 1's
	close(release)
	drain(t, m)
	e.wantObject("s", data)
	if n := e.fs.Calls(faulty.OpUploadPart); n != 8 {
		t.Errorf("%d UploadPart calls, want 8 (part 1 twice)", n)
	}
	if e.mem.PendingUploads() != 0 {
		t.Error("multipart upload left pending")
	}
}

// TestStreamTruncatedToEmpty: a file that started a stream (a write far
// past the start, so no part was sent) and is then truncated to zero
// uploads an empty object: the stream, which has no part to complete,
// is not used (S3 refuses a Complete without parts: 400).
func TestStreamTruncatedToEmpty(t *testing.T) {
	e, m := streamEnv(t)
	f, _ := m.Create(tgt("s"), 0o644)
	f.Acquire()
	if _, err := f.WriteAt([]byte("far"), 5*testPart); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream's upload", func() bool { return e.mem.PendingUploads() == 1 })
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Sync(ctx); err != nil {
		t.Fatalf("fsync of the emptied file: %v", err)
	}
	if err := f.Release(); err != nil {
		t.Fatal(err)
	}
	drain(t, m)
	e.wantObject("s", []byte{})
	if n := e.mem.PendingUploads(); n != 0 {
		t.Errorf("%d multipart uploads left pending", n)
	}
}
