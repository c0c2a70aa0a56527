//go:build linux

package objstore

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// lowWaterHandler serves /N?piece=P&gap=G: N bytes written P at a time,
// flushed, with G microseconds between pieces, on a kept-alive connection.
func lowWaterHandler(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Path[1:])
	piece, _ := strconv.Atoi(r.URL.Query().Get("piece"))
	gap, _ := strconv.Atoi(r.URL.Query().Get("gap"))
	w.Header().Set("Content-Length", strconv.Itoa(n))
	f := w.(http.Flusher)
	for off := 0; off < n; off += piece {
		_, _ = w.Write(lowWaterBytes(off, min(piece, n-off)))
		f.Flush()
		if gap > 0 {
			time.Sleep(time.Duration(gap) * time.Microsecond)
		}
	}
}

// lowWaterBytes is the content of [off, off+n) of every test body.
func lowWaterBytes(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((off + i) * 7 / 5)
	}
	return b
}

func sockLowWater(t *testing.T, rc syscall.RawConn) int {
	t.Helper()
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil || gerr != nil {
		t.Fatalf("getsockopt: %v %v", err, gerr)
	}
	return v
}

// TestLowWater reads bodies through real sockets: every byte arrives, the
// mark rises only for a fast long body of known length on HTTP/1.1, it is
// back at 1 when the body ends (the server keeps the connection open, so a
// mark left above the rest would hang the read), and the next request on
// the same connection is not held.
func TestLowWater(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tls, h2   bool
		n, piece  int
		gap       int   // microseconds between pieces
		length    int64 // passed to Body (-1: unknown)
		bigReads  bool  // reads as large as the rest of the body
		wantRaise bool
	}{
		{name: "fast 8 MiB", n: 8 << 20, piece: 32 << 10, length: 8 << 20, wantRaise: true},
		{name: "fast 2 MiB, big reads", n: 2 << 20, piece: 32 << 10, length: 2 << 20, bigReads: true, wantRaise: true},
		{name: "odd tail", n: 1<<20 + 4097, piece: 16 << 10, gap: 100, length: 1<<20 + 4097, wantRaise: true},
		{name: "just long enough", n: 2*lowWaterMax + lowWaterSlack, piece: 8 << 10, length: 2*lowWaterMax + lowWaterSlack, wantRaise: true},
		{name: "too short", n: 2*lowWaterMax + lowWaterSlack - 1, piece: 8 << 10, length: 2*lowWaterMax + lowWaterSlack - 1},
		{name: "length unknown", n: 4 << 20, piece: 32 << 10, length: -1},
		{name: "slow stream", n: 1 << 20, piece: 4 << 10, gap: 2000, length: 1 << 20},
		{name: "tls", tls: true, n: 4<<20 + 1, piece: 32 << 10, length: 4<<20 + 1, wantRaise: true},
		{name: "h2 left alone", tls: true, h2: true, n: 4 << 20, piece: 32 << 10, length: 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(lowWaterHandler))
			if tc.tls {
				srv.EnableHTTP2 = tc.h2
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			cl := srv.Client()
			if tc.h2 {
				cl.Transport.(*http.Transport).ForceAttemptHTTP2 = true
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			url := srv.URL + "/" + strconv.Itoa(tc.n) + "?piece=" + strconv.Itoa(tc.piece) + "&gap=" + strconv.Itoa(tc.gap)

			rctx, lw := WithLowWater(ctx)
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.h2 != (resp.ProtoMajor == 2) {
				t.Fatalf("protocol %s", resp.Proto)
			}
			body := lw.Body(resp.Body, tc.length)
			lb, tuned := body.(*lowWaterBody)
			var got bytes.Buffer
			peak, paused := 1, false
			for {
				// Reads of 64 KiB, and reads as large as the rest (as
				// io.ReadAll grows its buffer), which would take the
				// body's last byte with the mark up if allowed to.
				buf := make([]byte, 64<<10)
				if tc.bigReads {
					buf = make([]byte, max(512, tc.n-got.Len()+1))
					if !paused && got.Len() >= tc.n/2 {
						// Let the rest queue up, so that one read can
						// take all of it.
						time.Sleep(50 * time.Millisecond)
						paused = true
					}
				}
				k, err := body.Read(buf)
				got.Write(buf[:k])
				if tuned {
					peak = max(peak, lb.cur)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("read after %d bytes: %v", got.Len(), err)
				}
			}
			if err := body.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), lowWaterBytes(0, tc.n)) {
				t.Fatalf("read %d bytes, not the body's %d", got.Len(), tc.n)
			}
			if raised := peak > 1; raised != tc.wantRaise {
				t.Fatalf("mark raised to %d, want raised %v", peak, tc.wantRaise)
			}
			if peak > lowWaterMax {
				t.Fatalf("mark %d above %d", peak, lowWaterMax)
			}
			if rc := lw.rawConn(); rc != nil {
				if v := sockLowWater(t, rc); v != 1 {
					t.Fatalf("SO_RCVLOWAT %d after the body, want 1", v)
				}
			}

			// The connection goes back to the pool as it came: a short
			// answer on it arrives at once.
			var reused bool
			rctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
			req, _ = http.NewRequestWithContext(rctx, http.MethodGet, srv.URL+"/10?piece=10", nil)
			start := time.Now()
			resp, err = cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || len(b) != 10 || !reused {
				t.Fatalf("second request: %d bytes, %v, reused %v", len(b), err, reused)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("second request took %v", d)
			}
		})
	}
}

// TestLowWaterNoConn: a LowWater whose request saw no TCP connection (or
// nil) hands the body back as it is.
func TestLowWaterNoConn(t *testing.T) {
	body := io.NopCloser(bytes.NewReader(nil))
	var nilLW *LowWater
	for _, lw := range []*LowWater{nilLW, {}} {
		if got := lw.Body(body, 1<<30); got != body {
			t.Fatalf("body wrapped without a connection: %T", got)
		}
	}
}

// deadConn is a socket whose options can no longer be set.
type deadConn struct{}

func (deadConn) Control(func(uintptr)) error    { return syscall.EBADF }
func (deadConn) Read(func(uintptr) bool) error  { return syscall.EBADF }
func (deadConn) Write(func(uintptr) bool) error { return syscall.EBADF }

// TestLowWaterDeadSocket: when the mark cannot be set (or lowered), the
// body is read to its end as it is, whatever the mark was.
func TestLowWaterDeadSocket(t *testing.T) {
	const n = 1 << 20
	for _, cur := range []int{1, lowWaterMax} {
		for _, got := range []int64{0, n - lowWaterMax, n - 1000} {
			want := lowWaterBytes(int(got), int(n-got))
			b := &lowWaterBody{ReadCloser: io.NopCloser(bytes.NewReader(want)), conn: deadConn{}, n: n, got: got, cur: cur, start: time.Now().Add(-time.Second)}
			var out []byte
			buf := make([]byte, 64<<10)
			for i := 0; ; i++ {
				if i > 1000 {
					t.Fatalf("mark %d from %d: no progress after %d bytes", cur, got, len(out))
				}
				k, err := b.Read(buf)
				out = append(out, buf[:k]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("mark %d from %d: %v", cur, got, err)
				}
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("mark %d from %d: read %d bytes, not the %d of the body", cur, got, len(out), len(want))
			}
		}
	}
}
