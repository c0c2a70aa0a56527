package writeback

import (
	"strings"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestUploadSeesStagedChange: a file truncated or rewritten while its
// upload is on its way (the request held before it reads its body)
// abandons that attempt without an error (no failure logged or counted,
// no wrong bytes in the bucket) and uploads the newer content.
func TestUploadSeesStagedChange(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		op     string // the request held
		change func(t *testing.T, f *File, data []byte) []byte
	}{
		{name: "truncate during put", size: 5000, op: faulty.OpPut, change: truncateTo(1000)},
		{name: "rewrite during put", size: 5000, op: faulty.OpPut, change: rewriteAt(2000)},
		{name: "truncate during part", size: 3*testPart + 9, op: faulty.OpUploadPart, change: truncateTo(testPart + 5)},
		{name: "rewrite during part", size: 3*testPart + 9, op: faulty.OpUploadPart, change: rewriteAt(10)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			g := e.gate(func(op, key string) bool { return op == tc.op && key == "t" })
			e.setFaults(faulty.Config{Stall: g.stall})
			cfg := e.config()
			cfg.StreamAfter = -1
			m := e.open(cfg)
			data := pattern(tc.size, 4)
			f := writeFile(t, m, "t", data)
			waitFor(t, "the upload to be held", func() bool { return g.held.Load() >= 1 })
			f.Acquire()
			data = tc.change(t, f, data)
			if err := f.Release(); err != nil {
				t.Fatal(err)
			}
			g.release()
			drain(t, m)
			e.wantObject("t", data)
			if n := m.Stats().Failures; n != 0 {
				t.Errorf("%d failures counted", n)
			}
			if log := e.logBuf.String(); strings.Contains(log, "upload failed") || strings.Contains(log, "level=ERROR") {
				t.Errorf("the abandoned attempt logged an error:\n%s", log)
			}
			if n := e.mem.PendingUploads(); n != 0 {
				t.Errorf("%d multipart uploads left pending", n)
			}
		})
	}
}

func truncateTo(size int) func(t *testing.T, f *File, data []byte) []byte {
	return func(t *testing.T, f *File, data []byte) []byte {
		if err := f.Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
		return data[:size]
	}
}

func rewriteAt(off int) func(t *testing.T, f *File, data []byte) []byte {
	return func(t *testing.T, f *File, data []byte) []byte {
		if _, err := f.WriteAt([]byte("NEW BYTES"), int64(off)); err != nil {
			t.Fatal(err)
		}
		out := append([]byte(nil), data...)
		copy(out[off:], "NEW BYTES")
		return out
	}
}
