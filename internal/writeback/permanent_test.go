package writeback

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestDrainPermanentErrors: a backend that refuses one key on every
// attempt (400 InvalidArgument, KeyTooLong, 403 AccessDenied), whatever
// the request (Put, CreateUpload, UploadPart, Complete), is tried a few
// times (permanentAttempts), then Drain reports that path, with the cause
// and the request id, long before its deadline; the other files are
// durable.
func TestDrainPermanentErrors(t *testing.T) {
	refusals := []struct {
		name   string
		status int
		code   string
		kind   error
	}{
		{name: "invalid argument", status: 400, code: "InvalidArgument"},
		{name: "key too long", status: 400, code: "KeyTooLongError"},
		{name: "access denied", status: 403, code: "AccessDenied", kind: objstore.ErrPermission},
	}
	sizes := []struct {
		name   string
		size   int
		stream bool
	}{
		{name: "small", size: 100},
		{name: "multipart", size: 3*testPart + 7},
		{name: "streamed", size: 5*testPart + 7, stream: true},
	}
	for _, rf := range refusals {
		for _, sz := range sizes {
			for _, op := range []string{faulty.OpPut, faulty.OpCreateUpload, faulty.OpUploadPart, faulty.OpComplete} {
				t.Run(rf.name+"/"+sz.name+"/"+op, func(t *testing.T) {
					e := newEnv(t)
					var refused atomic.Int32
					e.setFaults(faulty.Config{Fail: func(o, key string) error {
						if key == "bad" && o == op {
							refused.Add(1)
							return &objstore.Error{Provider: "faulty", Op: o, Key: key, Status: rf.status, Code: rf.code, RequestID: "req-7", Kind: rf.kind}
						}
						return nil
					}})
					cfg := e.config()
					if !sz.stream {
						cfg.StreamAfter = -1
					}
					m := e.open(cfg)
					data := pattern(sz.size, 1)
					writeFile(t, m, "bad", data)
					writeFile(t, m, "good", data)
					start := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					err := m.Drain(ctx)
					e.wantObject("good", data)
					if _, ok := e.object("bad"); ok {
						return // the refused request was not needed for this size
					}
					var de *DrainError
					if !errors.As(err, &de) || len(de.Failures) != 1 || de.Failures[0].Target != tgt("bad") {
						t.Fatalf("Drain = %v, want a DrainError naming bad", err)
					}
					if n := refused.Load(); n < permanentAttempts {
						t.Errorf("the refused request was tried %d times, want at least %d", n, permanentAttempts)
					}
					if el := time.Since(start); el > 10*time.Second {
						t.Errorf("Drain took %v: it retried a permanent error until its deadline", el)
					}
					if !strings.Contains(e.logBuf.String(), "request_id=req-7") || !strings.Contains(de.Failures[0].Err.Error(), rf.code) {
						t.Errorf("cause or request id not reported: %v\n%s", de.Failures[0].Err, e.logBuf)
					}
				})
			}
		}
	}
}
