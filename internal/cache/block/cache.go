package block

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/hsm"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// ErrClosed is returned by every operation on a closed Cache (and by a
// closed Reader).
var ErrClosed = errors.New("block: cache closed")

// Ref names one object version to read. Size and Version come from a Stat
// (or a listing) of the object: blocks are keyed by all of StoreID, Key,
// Version and Size, so a new version never sees an old version's blocks.
type Ref struct {
	Store   objstore.Store
	StoreID string // names the store in cache keys, e.g. "s3/bucket"
	Key     string
	Version string // fetches are conditional on it (ReadOptions.IfVersion)
	Size    int64
}

// Cache is the on-disk block cache with its fetch workers and evictor. All
// methods are safe for concurrent use.
type Cache struct {
	cfg        Config
	log        *slog.Logger
	partBlocks int64 // blocks per readahead GET
	nworkers   int
	maxIdle    int // idle object files kept open (objfile.go)

	ctx     context.Context    // canceled by Close; fetches run under it
	cancel  context.CancelFunc //
	wg      sync.WaitGroup     // workers, evictor and fills
	kick    chan struct{}      // wakes the evictor (capacity 1)
	scratch sync.Pool          // *[]byte of one checksum chunk
	st      counters
	// lastIOWarn is when a cache write failure was last logged (unix ns).
	lastIOWarn atomic.Int64
	// statfsFailing: the evictor's last statfs failed (logged once);
	// used by the evictor's goroutine only.
	statfsFailing bool
	// noClaims: the file system refused an OFD lock; fetches go unclaimed
	// (see claim.go).
	noClaims atomic.Bool
	// waker wakes waits for other processes' fetches (claimwake.go); it
	// has its own lock.
	waker claimWaker
	// stagers are the running input Stagers (stage.go), copied on write
	// under stagersMu, loaded without a lock by every read.
	stagers   atomic.Pointer[[]*Stager]
	stagersMu sync.Mutex
	// watch is the data files handed out as passthrough backing files,
	// checked for damage every few seconds (watch.go).
	watch watchSet
	// hsm is the pre-content listener of cold passthrough (cold.go); nil
	// when off.
	hsm atomic.Pointer[hsm.Listener]
	// coldMu guards cold (the coldFiles of this process, by the file they
	// fill). Taken before a coldFile's mu and before mu, never after.
	coldMu sync.Mutex
	cold   map[*objFile]*coldFile
	// pred runs directory-readahead fetches and keeps their ledger
	// (predict.go); it has its own lock.
	pred predictor

	// mu guards every field below, the refs, idleEl and gone fields of
	// every objFile, and the mutable fields of every job and flight. Never
	// held during I/O on the store; Reader.mu is never taken while holding
	// it.
	mu       sync.Mutex
	cond     sync.Cond // on mu; signaled when a job is queued or on Close
	closed   bool
	index    map[objID]*entry    // object files known on disk (for size accounting and eviction)
	bytes    int64               // allocated bytes of indexed objects
	orphaned int64               // allocated bytes of evicted objects still held open (freed at their last release)
	stamps   uint64              // count of index additions (entry.stamp)
	files    map[objID]*objFile  // open object files
	idle     list.List           // of *objFile in files with refs == 0, most recent first
	inflight map[blockID]*flight // blocks being fetched
	queue    [nPrio]list.List    // of *job not started yet, by priority
	fills    map[objID]fillState // objects being warmed in the background or warmed whole at a time
	stuck    map[objID]time.Time // objects whose claims another process held too long, and when (claim.go)
	// smallCond (on mu) wakes the small workers (workers.go); smallIdle
	// counts those waiting on it and not signaled yet.
	smallCond sync.Cond
	smallIdle int
}

// New opens (creating if needed) the cache in cfg.Dir and starts its fetch
// workers and evictor. Blocks already in Dir (left by an earlier process
// or written by a concurrent one) are served when they match and pass
// their checksums.
func New(cfg Config) (*Cache, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		cfg:        cfg,
		log:        cfg.Logger,
		partBlocks: cfg.PartSize / cfg.BlockSize,
		nworkers:   cfg.workers(),
		maxIdle:    idleBound(nofile()),
		ctx:        ctx,
		cancel:     cancel,
		kick:       make(chan struct{}, 1),
		index:      map[objID]*entry{},
		files:      map[objID]*objFile{},
		inflight:   map[blockID]*flight{},
		fills:      map[objID]fillState{},
		cold:       map[*objFile]*coldFile{},
		stuck:      map[objID]time.Time{},
	}
	chunk := chunkSize(cfg.BlockSize)
	c.scratch.New = func() any { b := make([]byte, chunk); return &b }
	c.cond.L = &c.mu
	c.smallCond.L = &c.mu
	if free, _, err := diskSpace(cfg.Dir); err == nil {
		c.st.free.Store(free)
	}
	c.wg.Add(2*c.nworkers + 1)
	for range c.nworkers {
		go c.worker(false) // owner: c (wg); returns on Close
		go c.worker(true)  // owner: c (wg); returns on Close
	}
	go c.evictLoop()
	c.wg.Add(1)
	go c.watchLoop()
	return c, nil
}

// Config returns the configuration in effect, defaults filled in.
func (c *Cache) Config() Config { return c.cfg }

// Open returns a Reader of ref with its own sequential detector. Opening is
// cheap and does no I/O.
func (c *Cache) Open(ref Ref) *Reader {
	c.st.readers.Add(1)
	return &Reader{c: c, o: c.object(ref)}
}

func (c *Cache) object(ref Ref) *object {
	return newObject(c.cfg.Dir, c.cfg.BlockSize, ref)
}

// Cached returns how many bytes of ref are in the cache now (blocks whose
// records are valid; their data is checked when read).
func (c *Cache) Cached(ref Ref) int64 {
	o := c.object(ref)
	f, _ := c.openObj(o, false)
	if f == nil {
		return 0
	}
	defer c.release(f)
	if f.loadAll(c) {
		return o.ref.Size
	}
	var n int64
	for idx := range o.nblocks {
		if f.blocks[idx].Load() != nil {
			n += o.blockLen(idx)
		}
	}
	return n
}

// Close stops the fetch workers and the evictor and closes every block
// file. Reads in progress fail with ErrClosed; the blocks stay on disk for
// the next process.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.log.Debug("block cache: closing", "stats", fmt.Sprintf("%+v", c.Stats()))
	c.mu.Lock()
	for p := range c.queue {
		for c.queue[p].Len() > 0 {
			j := c.queue[p].Remove(c.queue[p].Front()).(*job)
			j.el = nil
			c.failLocked(j, j.first, ErrClosed)
		}
	}
	c.cond.Broadcast()
	c.smallCond.Broadcast()
	c.mu.Unlock()
	c.cancel()
	c.closeWaker()
	c.wg.Wait()
	c.sweepCold(true)
	c.mu.Lock()
	files := c.files
	c.files = map[objID]*objFile{}
	c.idle.Init()
	c.mu.Unlock()
	for _, f := range files {
		f.closeFiles()
	}
	return nil
}

// counters are the cumulative statistics behind Stats.
type counters struct {
	hits, misses              atomic.Int64
	bytesCache, bytesNet      atomic.Int64
	fetched, prefetched       atomic.Int64
	fetches, getsInFlight     atomic.Int64
	evictions, evictedBytes   atomic.Int64
	corruptions, freshBlocks  atomic.Int64
	free, windowSum, memInUse atomic.Int64
	readers, collapses        atomic.Int64
	direct, claimWaits        atomic.Int64
	verifiedBytes             atomic.Int64
	ptOpens, ptBytes          atomic.Int64
	coldOpens, coldFiles      atomic.Int64
}

// Stats is a snapshot of the cache's counters. Cumulative counters start
// at zero in each process.
type Stats struct {
	Hits             int64 // reads (ReadAt, CachedFile) served without waiting for the network
	Misses           int64 // reads that waited for at least one fetch
	BytesFromCache   int64 // bytes returned by hits, and by misses for blocks already cached
	BytesFromNetwork int64 // bytes returned that had to be fetched first
	BytesFetched     int64 // bytes downloaded from stores
	PrefetchedBytes  int64 // of BytesFetched, downloaded ahead of reads (readahead, Prefetch, fill)
	Fetches          int64 // ranged GETs started
	FetchesInFlight  int64 // ranged GETs running now
	QueuedFetches    int64 // fetches waiting for a worker
	Evictions        int64 // blocks evicted
	EvictedBytes     int64
	Corruptions      int64 // bad blocks found and dropped
	FreshBlocks      int64 // blocks another process fetched while this one watched them absent: taken unchecked (fresh.go)
	Objects          int64 // object files known on disk
	BytesCached      int64 // their allocated size, and that of evicted ones still open
	MaxBytes         int64 // the byte limit in effect
	FreeBytes        int64 // free space of the cache's file system (last sample)
	ReadaheadWindow  int64 // sum of the open Readers' readahead windows
	MemoryInUse      int64 // bytes of fetch buffers allocated (at most Config.MemoryBudget)
	OpenReaders      int64
	DirectBytes      int64 // bytes read around the cache because it could not store them (disk full)
	Collapses        int64 // readahead windows dropped by a non-sequential read
	ClaimWaits       int64 // blocks another process sharing Dir was fetching, waited for instead of fetched
	VerifiedBytes    int64 // bytes of whole files checksummed in full before they backed a passthrough open
	PassthroughOpens int64 // opens whose reads the kernel served from a cache file (Reader.NotePassthrough)
	PassthroughBytes int64 // the sizes of their files: what the kernel may have read without ferry
	ColdOpens        int64 // of PassthroughOpens, those handed a file not yet whole (cold passthrough)
	ColdFiles        int64 // files opened cold that back passthrough opens now (or may: a mapping)
	ColdEvents       int64 // reads of cold files the kernel asked about (pre-content events)
	ColdWaits        int64 // of those, the reads that waited for a fetch
	ColdDenied       int64 // of those, the reads failed with EIO (fetch failed, or ferry no longer knew the file)
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	objs, bytes := int64(len(c.index)), c.bytes+c.orphaned
	var queued int64
	for p := range c.queue {
		queued += int64(c.queue[p].Len())
	}
	c.mu.Unlock()
	s := Stats{
		Hits: c.st.hits.Load(), Misses: c.st.misses.Load(),
		BytesFromCache: c.st.bytesCache.Load(), BytesFromNetwork: c.st.bytesNet.Load(),
		BytesFetched: c.st.fetched.Load(), PrefetchedBytes: c.st.prefetched.Load(),
		Fetches: c.st.fetches.Load(), FetchesInFlight: c.st.getsInFlight.Load(), QueuedFetches: queued,
		Evictions: c.st.evictions.Load(), EvictedBytes: c.st.evictedBytes.Load(),
		Corruptions: c.st.corruptions.Load(), FreshBlocks: c.st.freshBlocks.Load(),
		Objects: objs, BytesCached: bytes, MaxBytes: c.cfg.MaxBytes,
		FreeBytes: c.st.free.Load(), ReadaheadWindow: c.st.windowSum.Load(),
		MemoryInUse: c.st.memInUse.Load(), OpenReaders: c.st.readers.Load(),
		DirectBytes: c.st.direct.Load(), Collapses: c.st.collapses.Load(),
		ClaimWaits: c.st.claimWaits.Load(), VerifiedBytes: c.st.verifiedBytes.Load(),
		PassthroughOpens: c.st.ptOpens.Load(), PassthroughBytes: c.st.ptBytes.Load(),
		ColdOpens: c.st.coldOpens.Load(), ColdFiles: c.st.coldFiles.Load(),
	}
	if l := c.hsm.Load(); l != nil {
		hs := l.Stats()
		s.ColdEvents, s.ColdWaits, s.ColdDenied = hs.Events, hs.Filled, hs.Denied
	}
	return s
}
