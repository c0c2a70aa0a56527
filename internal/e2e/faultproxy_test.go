package e2e

import (
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// faultKind is what the fault proxy does to one request.
type faultKind int

const (
	faultNone faultKind = iota
	// faultSlowDown answers 503 SlowDown without forwarding.
	faultSlowDown
	// faultInternal answers 500 InternalError without forwarding.
	faultInternal
	// faultResetRequest reads part of the request body, then resets the
	// connection (TCP RST) without forwarding.
	faultResetRequest
	// faultResetResponse forwards the request, then resets the connection
	// part-way through the response body (before the headers when the
	// response has no body: the request took effect, the answer is lost).
	faultResetResponse
	// faultTruncate forwards the request, then closes the connection
	// (FIN) after fewer body bytes than Content-Length promised (before
	// the headers when the response has no body).
	faultTruncate
	// faultStall forwards the request after 2–3 s, or stalls 2–3 s part-way
	// through the response body.
	faultStall
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"none", "503-slowdown", "500-internal", "reset-request", "reset-response", "truncate", "stall"}

func (k faultKind) String() string { return faultNames[k] }

// faultKindsFromEnv parses FERRY_FAULT_KINDS ("truncate,stall"), which
// narrows a fault test to some kinds when chasing a failure; nil when
// unset.
func faultKindsFromEnv(t *testing.T) []faultKind {
	t.Helper()
	v := os.Getenv("FERRY_FAULT_KINDS")
	if v == "" {
		return nil
	}
	var out []faultKind
	for _, name := range strings.Split(v, ",") {
		found := false
		for k := faultSlowDown; k < numFaultKinds; k++ {
			if k.String() == strings.TrimSpace(name) {
				out = append(out, k)
				found = true
			}
		}
		if !found {
			t.Fatalf("FERRY_FAULT_KINDS: unknown kind %q (want some of %v)", name, faultNames[1:])
		}
	}
	return out
}

// faultProxyOptions configure newFaultProxy.
type faultProxyOptions struct {
	// Upstream is the server's URL ("http://127.0.0.1:PORT").
	Upstream string
	// Rate is the share of requests that get a fault, in [0, 1].
	Rate float64
	// Seed seeds the choice of faults. Requests arrive concurrently, so
	// which request gets which fault still depends on timing.
	Seed int64
	// Kinds restricts the faults to these (default: every kind, stalls
	// drawn a tenth as often as the others so that a workload of a
	// thousand requests waits seconds, not minutes).
	Kinds []faultKind
	// Hook, when set, sees every request before the proxy decides on a
	// fault (and before forwarding); it may block (crash tests kill ferry
	// from it). It must be safe for concurrent use.
	Hook func(r *http.Request)
	// AfterHook, when set, runs after the upstream answered a request and
	// before the answer goes back to the client.
	AfterHook func(r *http.Request, status int)
}

// faultProxy is an HTTP reverse proxy in front of an S3 server that
// injects S3-shaped faults into a seeded share of requests. It keeps the
// Host header the client signed (SigV4 signs it). It is closed when the
// test ends.
type faultProxy struct {
	// URL is where clients connect ("http://127.0.0.1:PORT").
	URL string

	opts  faultProxyOptions
	rp    *httputil.ReverseProxy
	tr    *http.Transport
	srv   *http.Server
	quit  chan struct{} // closed by close: ends stalls
	close func()

	// mu guards rng, enabled and counts.
	mu      sync.Mutex
	rng     *rand.Rand
	enabled bool
	counts  [numFaultKinds]int
}

func newFaultProxy(t *testing.T, opts faultProxyOptions) *faultProxy {
	t.Helper()
	up, err := url.Parse(opts.Upstream)
	if err != nil {
		t.Fatalf("fault proxy upstream %q: %v", opts.Upstream, err)
	}
	if len(opts.Kinds) == 0 {
		for k := faultSlowDown; k < numFaultKinds; k++ {
			n := 10
			if k == faultStall {
				n = 1
			}
			for range n {
				opts.Kinds = append(opts.Kinds, k)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	quiet := log.New(io.Discard, "", 0)
	p := &faultProxy{
		URL:     "http://" + ln.Addr().String(),
		opts:    opts,
		tr:      &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		quit:    make(chan struct{}),
		rng:     rand.New(rand.NewSource(opts.Seed)),
		enabled: true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			// SigV4 signs the Host header: keep the one the client used.
			pr.Out.Host = pr.In.Host
		},
		Transport: p.tr,
		ErrorLog:  quiet,
	}
	p.srv = &http.Server{Handler: p, ErrorLog: quiet, ReadHeaderTimeout: 30 * time.Second}
	served := make(chan struct{})
	go func() { // owner: p.close, which waits for it
		defer close(served)
		_ = p.srv.Serve(ln)
	}()
	var once sync.Once
	p.close = func() {
		once.Do(func() {
			close(p.quit)
			p.srv.Close()
			<-served
			p.tr.CloseIdleConnections()
		})
	}
	t.Cleanup(p.close)
	return p
}

// setEnabled turns fault injection on or off (requests still pass).
func (p *faultProxy) setEnabled(on bool) {
	p.mu.Lock()
	p.enabled = on
	p.mu.Unlock()
}

// stats returns how many requests got each fault.
func (p *faultProxy) stats() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, n := range p.counts {
		out[faultKind(k).String()] = n
	}
	return out
}

// pick decides a request's fault and, for faults that cut or stall a
// body, a fraction in [0, 1) of where.
func (p *faultProxy) pick() (faultKind, float64, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := faultNone
	if p.enabled && p.rng.Float64() < p.opts.Rate {
		k = p.opts.Kinds[p.rng.Intn(len(p.opts.Kinds))]
		// The first faults go to kinds not injected yet, so that a short
		// run sees each (a stall is drawn for 0.2 % of the requests).
		for _, c := range p.opts.Kinds {
			if p.counts[c] == 0 {
				k = c
				break
			}
		}
	}
	p.counts[k]++
	return k, p.rng.Float64(), 2*time.Second + time.Duration(p.rng.Int63n(int64(time.Second)))
}

// errCut is what the cutting writer returns once the connection is to
// be dropped; the reverse proxy then aborts the handler.
var errCut = errors.New("fault proxy: response cut")

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.opts.Hook != nil {
		p.opts.Hook(r)
	}
	kind, where, stall := p.pick()
	switch kind {
	case faultSlowDown:
		writeS3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
		return
	case faultInternal:
		writeS3Error(w, r, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
		return
	case faultResetRequest:
		if r.ContentLength > 0 {
			_, _ = io.CopyN(io.Discard, r.Body, int64(where*float64(r.ContentLength)))
		}
		dropConn(w, true)
		return
	case faultStall:
		if where < 0.5 || r.Method == http.MethodHead {
			if !p.sleep(r, stall) {
				return
			}
			kind = faultNone
		}
	}
	cw := &cutWriter{rw: w, kind: kind, where: where, stall: stall, head: r.Method == http.MethodHead, p: p, req: r}
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			panic(v)
		}
		if cw.cut {
			dropConn(w, kind == faultResetResponse)
		}
	}()
	p.rp.ServeHTTP(cw, r)
}

// sleep waits d unless the request or the proxy ends first.
func (p *faultProxy) sleep(r *http.Request, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-r.Context().Done():
	case <-p.quit:
	}
	return false
}

// dropConn hijacks the connection and closes it, with a TCP RST when
// reset is set (else a FIN).
func dropConn(w http.ResponseWriter, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // the server closes the connection
	}
	if tc, ok := conn.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func writeS3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	id := fmt.Sprintf("FAULT%08X", rand.Uint32())
	w.Header().Set("x-amz-request-id", id)
	w.Header().Set("Content-Type", "application/xml")
	if code == "SlowDown" {
		w.Header().Set("Retry-After", "1")
	}
	body := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>%s</RequestId><HostId>faultproxy</HostId></Error>`,
		code, msg, r.URL.Path, id)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, body)
	}
}

// cutWriter passes a response through, cutting or stalling its body
// according to kind.
type cutWriter struct {
	rw    http.ResponseWriter
	kind  faultKind
	where float64       // where in the body the fault strikes
	stall time.Duration // faultStall: how long
	head  bool          // a HEAD request: no body whatever Content-Length says
	p     *faultProxy
	req   *http.Request

	at      int64 // body offset where the fault strikes
	written int64
	cut     bool // the connection is to be dropped
	stalled bool
}

func (c *cutWriter) Header() http.Header { return c.rw.Header() }

func (c *cutWriter) WriteHeader(code int) {
	if code < 200 { // 100 Continue and friends pass
		c.rw.WriteHeader(code)
		return
	}
	if c.p.opts.AfterHook != nil {
		c.p.opts.AfterHook(c.req, code)
	}
	cl, err := strconv.ParseInt(c.Header().Get("Content-Length"), 10, 64)
	if err != nil || c.head {
		cl = 0
	}
	switch c.kind {
	case faultResetResponse, faultTruncate:
		if cl <= 0 {
			c.cut = true // the request took effect; its answer is lost
			return
		}
		c.at = int64(c.where * float64(cl))
	case faultStall:
		if cl <= 0 {
			// The request took effect; its answer comes late.
			c.stalled = true
			if !c.p.sleep(c.req, c.stall) {
				c.cut = true
				return
			}
		}
		c.at = int64(c.where * float64(cl))
	}
	c.rw.WriteHeader(code)
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if c.cut {
		return 0, errCut
	}
	switch c.kind {
	case faultResetResponse, faultTruncate:
		if c.written+int64(len(b)) >= c.at {
			n, _ := c.rw.Write(b[:c.at-c.written])
			c.written += int64(n)
			c.cut = true
			return n, errCut
		}
	case faultStall:
		if !c.stalled && c.written+int64(len(b)) > c.at {
			n, err := c.rw.Write(b[:c.at-c.written])
			c.written += int64(n)
			if err != nil {
				return n, err
			}
			c.stalled = true
			_ = http.NewResponseController(c.rw).Flush()
			if !c.p.sleep(c.req, c.stall) {
				return n, errCut
			}
			m, err := c.rw.Write(b[n:])
			c.written += int64(m)
			return n + m, err
		}
	}
	n, err := c.rw.Write(b)
	c.written += int64(n)
	return n, err
}

// Flush lets the reverse proxy flush; nothing goes out once cut.
func (c *cutWriter) Flush() {
	if !c.cut {
		_ = http.NewResponseController(c.rw).Flush()
	}
}

// faultSummary renders stats for a log line.
func faultSummary(m map[string]int) string {
	var b strings.Builder
	for k := faultNone; k < numFaultKinds; k++ {
		fmt.Fprintf(&b, "%s=%d ", k, m[k.String()])
	}
	return strings.TrimSpace(b.String())
}
