package faulty

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Operation names, as passed to Config.Fail and Config.Stall and used as
// keys of Config.FailRate and Config.StallRate. OpRead is one Read of a
// body returned by NewReader.
const (
	OpStat         = "Stat"
	OpNewReader    = "NewReader"
	OpRead         = "Read"
	OpList         = "List"
	OpPut          = "Put"
	OpCopy         = "Copy"
	OpDelete       = "Delete"
	OpCreateUpload = "CreateUpload"
	OpAbortUpload  = "AbortUpload"
	OpUploadPart   = "UploadPart"
	OpCopyPart     = "CopyPart"
	OpComplete     = "Complete"
	OpAbort        = "Abort"
	// AnyOp as a rate key applies to every operation without its own key.
	AnyOp = "*"
)

// Forever, returned by Config.Stall or set as Config.StallFor, stalls a
// call until its context is done.
const Forever = time.Duration(math.MaxInt64)

// ErrInjected is wrapped by every error this package makes up.
var ErrInjected = errors.New("faulty: injected failure")

// ErrTransport is a plain transport failure (no HTTP status): retryable,
// and neither throttling nor a sentinel.
var ErrTransport = &transportError{}

type transportError struct{}

func (*transportError) Error() string { return "faulty: connection reset by peer (injected)" }
func (*transportError) Unwrap() error { return ErrInjected }

// Throttled returns a 503 SlowDown *objstore.Error for op and key, wrapping
// objstore.ErrThrottled and ErrInjected.
func Throttled(op, key string) error {
	return &objstore.Error{Provider: "faulty", Op: op, Key: key, Status: 503, Code: "SlowDown",
		Kind: objstore.ErrThrottled, Err: ErrInjected}
}

// ServerError returns a 500 InternalError *objstore.Error for op and key,
// wrapping ErrInjected: retryable, not throttling.
func ServerError(op, key string) error {
	return &objstore.Error{Provider: "faulty", Op: op, Key: key, Status: 500, Code: "InternalError", Err: ErrInjected}
}

// Config chooses the faults. The zero value injects none.
type Config struct {
	// Seed seeds the random source of the rates.
	Seed uint64
	// FailRate maps an operation (or AnyOp) to the probability in [0, 1]
	// that a call fails with Err.
	FailRate map[string]float64
	// Err is the error of rate-based failures; nil means Throttled(op, key).
	Err error
	// StallRate maps an operation (or AnyOp) to the probability in [0, 1]
	// that a call stalls for StallFor before it proceeds.
	StallRate map[string]float64
	// StallFor is how long a rate-based stall lasts; 0 means Forever.
	StallFor time.Duration
	// Fail, when set, is called before every call; a non-nil error is
	// returned instead of calling the inner store.
	Fail func(op, key string) error
	// Stall, when set, is called before every call; a positive duration
	// delays the call that long, or until its context is done (the call
	// then fails with the context's error).
	Stall func(op, key string) time.Duration
	// Cut, when set, is called when NewReader opens a body: n >= 0 ends the
	// body after n bytes with err (io.EOF for a silent truncation, nil
	// meaning ErrTransport); n < 0 leaves the body whole.
	Cut func(key string, off, length int64) (n int64, err error)
}

// Store wraps an inner store and injects the faults of its Config. It
// always implements objstore.Multipart; CreateUpload and AbortUpload fail
// with an error wrapping objstore.ErrUnsupported when the inner store does
// not implement it.
type Store struct {
	inner objstore.Store
	cfg   Config

	// mu guards rng, calls and injected.
	mu       sync.Mutex
	rng      *rand.Rand
	calls    map[string]int
	injected map[string]int
}

var (
	_ objstore.Store     = (*Store)(nil)
	_ objstore.Multipart = (*Store)(nil)
)

// New wraps inner with the faults of cfg.
func New(inner objstore.Store, cfg Config) *Store {
	return &Store{
		inner:    inner,
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		calls:    make(map[string]int),
		injected: make(map[string]int),
	}
}

// Unwrap returns the inner store.
func (s *Store) Unwrap() objstore.Store { return s.inner }

// Calls returns how many times op was called (including failed calls).
func (s *Store) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

// Injected returns how many calls of op failed with an injected error or
// were stalled.
func (s *Store) Injected(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injected[op]
}

// rate returns the configured probability of op in m.
func rate(m map[string]float64, op string) float64 {
	if r, ok := m[op]; ok {
		return r
	}
	return m[AnyOp]
}

// decide counts the call and draws its faults: the stall duration and the
// failure, either of which may be zero.
func (s *Store) decide(op, key string) (time.Duration, error) {
	var stall time.Duration
	if s.cfg.Stall != nil {
		stall = s.cfg.Stall(op, key)
	}
	var err error
	if s.cfg.Fail != nil {
		err = s.cfg.Fail(op, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	if stall <= 0 {
		if r := rate(s.cfg.StallRate, op); r > 0 && s.rng.Float64() < r {
			stall = s.cfg.StallFor
			if stall <= 0 {
				stall = Forever
			}
		}
	}
	if err == nil {
		if r := rate(s.cfg.FailRate, op); r > 0 && s.rng.Float64() < r {
			err = s.cfg.Err
			if err == nil {
				err = Throttled(op, key)
			}
		}
	}
	if stall > 0 || err != nil {
		s.injected[op]++
	}
	return stall, err
}

// inject applies the faults chosen for one call; a non-nil result is
// returned by the call instead of calling the inner store.
func (s *Store) inject(ctx context.Context, op, key string) error {
	stall, err := s.decide(op, key)
	if stall > 0 {
		if e := sleep(ctx, stall); e != nil {
			return e
		}
	}
	return err
}

// sleep waits d or until ctx is done, returning ctx's error in that case.
func sleep(ctx context.Context, d time.Duration) error {
	if d == Forever {
		<-ctx.Done()
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Caps returns the inner store's Caps.
func (s *Store) Caps() objstore.Caps { return s.inner.Caps() }

// Close closes the inner store; it injects no fault.
func (s *Store) Close() error { return s.inner.Close() }

// Stat is the inner Stat, with faults.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := s.inject(ctx, OpStat, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.inner.Stat(ctx, key)
}

// List is the inner List, with faults (the key is opts.Prefix).
func (s *Store) List(ctx context.Context, opts objstore.ListOptions) (objstore.ListPage, error) {
	if err := s.inject(ctx, OpList, opts.Prefix); err != nil {
		return objstore.ListPage{}, err
	}
	return s.inner.List(ctx, opts)
}

// Put is the inner Put, with faults.
func (s *Store) Put(ctx context.Context, key string, src io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := s.inject(ctx, OpPut, key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.inner.Put(ctx, key, src, size, opts)
}

// Copy is the inner Copy, with faults (the key is dst).
func (s *Store) Copy(ctx context.Context, src, dst string, opts objstore.CopyOptions) (objstore.ObjectInfo, error) {
	if err := s.inject(ctx, OpCopy, dst); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.inner.Copy(ctx, src, dst, opts)
}

// Delete is the inner Delete, with faults.
func (s *Store) Delete(ctx context.Context, key string, opts objstore.DeleteOptions) error {
	if err := s.inject(ctx, OpDelete, key); err != nil {
		return err
	}
	return s.inner.Delete(ctx, key, opts)
}

// NewReader is the inner NewReader, with faults on the open (OpNewReader),
// on each Read (OpRead) and, with Config.Cut, a body cut short.
func (s *Store) NewReader(ctx context.Context, key string, off, length int64, opts objstore.ReadOptions) (objstore.Reader, error) {
	if err := s.inject(ctx, OpNewReader, key); err != nil {
		return nil, err
	}
	r, err := s.inner.NewReader(ctx, key, off, length, opts)
	if err != nil {
		return nil, err
	}
	fr := &reader{s: s, ctx: ctx, key: key, r: r, left: -1}
	if s.cfg.Cut != nil {
		n, cutErr := s.cfg.Cut(key, off, length)
		if n >= 0 {
			if cutErr == nil {
				cutErr = ErrTransport
			}
			fr.left, fr.cutErr = n, cutErr
		}
	}
	return fr, nil
}

// reader is a body with faults. It is used by one goroutine at a time, as
// io.Reader requires.
type reader struct {
	s      *Store
	ctx    context.Context
	key    string
	r      objstore.Reader
	left   int64 // bytes before the cut, or -1 for no cut
	cutErr error
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.s.inject(r.ctx, OpRead, r.key); err != nil {
		return 0, err
	}
	if r.left == 0 {
		return 0, r.cutErr
	}
	if r.left > 0 && int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	if r.left > 0 {
		r.left -= int64(n)
	}
	return n, err
}

func (r *reader) Close() error { return r.r.Close() }

func (r *reader) Info() objstore.ObjectInfo { return r.r.Info() }
