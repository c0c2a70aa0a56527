package objstore

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http/httptrace"
	"sync"
	"syscall"
	"time"
)

// Receive low-water mark for long response bodies.
//
// A ranged GET of megabytes arrives in pieces of a few tens of KiB (the
// server's, or a proxy's, writes), and by default the socket wakes its
// reader for each: a goroutine park and wake-up, a scheduler round trip and
// a read syscall per piece. A driver that streams a body of known length
// from an HTTP/1.1 connection can raise the socket's SO_RCVLOWAT while the
// body runs, so that the reader wakes once per lowWaterMax bytes instead
// (a cold 1 GiB read behind the bench's proxy, 16 GETs in flight: 54,000
// reads and 30,000 context switches in ferry became 27,000 and 17,000, its
// CPU 85 -> 76 ticks of 10 ms, the throughput within the spread; medians
// of 5 alternating runs, 2026-12-06).
//
// The mark must never exceed the bytes still to come on the socket, or the
// last piece of the body would sit in the kernel until the read times out:
// the body's rest less lowWaterSlack (what net/http's bufio.Reader and a
// tls.Conn may hold above the socket: 4 KiB, and at most two records plus a
// read's slack) bounds it. No read reaches into the body's last mark+slack
// bytes while the mark is up, and the mark drops to 1 before they are
// read: the read that takes a body's last byte gives its connection back
// to the idle pool, which must get it as it came. It is set only once the body's measured rate would fill
// it within lowWaterDelay, so a slow stream keeps the default and a reader
// waiting on a block never waits more than that for bytes that have
// arrived. HTTP/2 (many streams on one connection) is left alone.

const (
	lowWaterMax   = 256 << 10
	lowWaterMin   = 32 << 10 // below this the mark is not worth its syscall
	lowWaterSlack = 64 << 10
	lowWaterDelay = 8 * time.Millisecond
	// lowWaterEvery is how many bytes pass between two looks at the rate.
	lowWaterEvery = 256 << 10
)

// LowWater follows the connection of one request (through an httptrace
// hook on the request's context) and raises its receive low-water mark
// while the response body streams. Use: ctx, lw := WithLowWater(ctx); make
// the request with ctx; then wrap the body with lw.Body(body, length).
type LowWater struct {
	// mu guards conn, which the transport sets from its GotConn hook.
	mu   sync.Mutex
	conn syscall.RawConn
}

// WithLowWater returns a context for one HTTP request whose connection
// the returned LowWater may tune.
func WithLowWater(ctx context.Context) (context.Context, *LowWater) {
	lw := &LowWater{}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: lw.gotConn}), lw
}

// gotConn keeps the raw connection of an HTTP/1.1 request over TCP (or TLS
// over TCP); any other kind (HTTP/2, a unix socket, a test double) is not
// tuned.
func (lw *LowWater) gotConn(info httptrace.GotConnInfo) {
	c := info.Conn
	if t, ok := c.(*tls.Conn); ok {
		if t.ConnectionState().NegotiatedProtocol == "h2" {
			return
		}
		c = t.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	lw.mu.Lock()
	lw.conn = rc
	lw.mu.Unlock()
}

func (lw *LowWater) rawConn() syscall.RawConn {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.conn
}

// Body wraps the body of the request made with lw's context, which holds
// exactly n bytes (n < 0: unknown, and body is returned as it is). Reads
// must not run concurrently; Close may.
func (lw *LowWater) Body(body io.ReadCloser, n int64) io.ReadCloser {
	if lw == nil || n < 2*lowWaterMax+lowWaterSlack || !lowWaterSupported {
		return body
	}
	rc := lw.rawConn()
	if rc == nil {
		return body
	}
	return &lowWaterBody{ReadCloser: body, conn: rc, n: n, cur: 1, next: lowWaterEvery / 2, start: time.Now()}
}

// lowWaterBody is a response body whose connection's mark it tunes. Its
// fields belong to the reading goroutine.
type lowWaterBody struct {
	io.ReadCloser
	conn  syscall.RawConn // nil once the mark is back at 1 for good
	n     int64           // the body's length
	got   int64           // bytes read so far
	cur   int             // the mark as set
	next  int64           // got at which to look at the rate again
	start time.Time
}

func (b *lowWaterBody) Read(p []byte) (int, error) {
	if b.conn != nil {
		b.tune()
	}
	if b.cur > 1 {
		// A read must not reach into the body's last mark+slack bytes
		// while the mark is up: the read that takes the last byte hands
		// the connection back to the pool, with the mark as it is then.
		p = p[:min(int64(len(p)), b.n-b.got-int64(b.cur)-lowWaterSlack)]
	}
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	return n, err
}

// tune sets the mark for the next read: back to 1 for good when the rest
// of the body comes near it, else from the rate when it is time to look.
func (b *lowWaterBody) tune() {
	rest := b.n - b.got
	if rest <= int64(b.cur)+lowWaterSlack {
		b.set(1)
		b.conn = nil
		return
	}
	if b.got < b.next {
		return
	}
	b.next = b.got + lowWaterEvery
	el := time.Since(b.start)
	if el <= 0 {
		return
	}
	want := int64(float64(b.got) / el.Seconds() * lowWaterDelay.Seconds())
	want = min(want, lowWaterMax, rest-lowWaterSlack) &^ 4095
	if want < lowWaterMin {
		want = 1
	}
	// Only a change of half or double is worth a syscall.
	if w := int(want); w != b.cur && (w == 1 || b.cur == 1 || w >= 2*b.cur || 2*w <= b.cur) {
		b.set(w)
	}
}

func (b *lowWaterBody) set(v int) {
	if v == b.cur {
		return
	}
	if setLowWater(b.conn, v) != nil {
		// A closed or odd socket: stop tuning it, and stop capping reads
		// (the cap assumes a mark that tune will lower in time).
		b.conn = nil
		b.cur = 1
		return
	}
	b.cur = v
}
