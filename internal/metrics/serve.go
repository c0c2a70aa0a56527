package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long Close waits for scrapes in flight.
const shutdownGrace = 2 * time.Second

// Server is the /metrics listener started by Serve. It owns one
// goroutine, which ends when ctx (given to Serve) is done or Close is
// called.
type Server struct {
	addr   net.Addr
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{} // closed when the serving goroutine has returned
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves
// reg at /metrics until ctx is done or Close is called. It returns the
// listen error (address in use, bad address) at once, so a caller can fail
// start-up on it. Only /metrics is served; other paths answer 404.
func Serve(ctx context.Context, addr string, reg *Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(reg))
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{
		addr:   ln.Addr(),
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		cancel: cancel,
		done:   make(chan struct{}),
	}
	served := make(chan struct{})
	go func() { // owner: s; ends on ctx or Close
		defer close(s.done)
		<-ctx.Done()
		sctx, stop := context.WithTimeout(context.Background(), shutdownGrace)
		defer stop()
		if s.srv.Shutdown(sctx) != nil {
			_ = s.srv.Close()
		}
		<-served
	}()
	go func() { // owner: s (the goroutine above waits for it)
		defer close(served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cancel() // a dead listener: let Close return
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on (useful with port 0).
func (s *Server) Addr() string { return s.addr.String() }

// Close stops the server and waits for its goroutines; scrapes in flight
// get a short grace period. It is safe to call more than once.
func (s *Server) Close() error {
	s.cancel()
	<-s.done
	return nil
}
