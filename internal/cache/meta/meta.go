package meta

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Kind is what a name is.
type Kind uint8

// Kinds of entries.
const (
	KindNone Kind = iota // negative entry: nothing by that name
	KindFile
	KindDir
	KindSymlink
	KindFifo   // special files: only their metadata tells them
	KindSocket // from files (see vfs)
	KindChar
	KindBlock
)

// Entry is a cached stat result.
type Entry struct {
	Kind    Kind
	Info    objstore.ObjectInfo // for files and symlinks
	Expires time.Time
}

// DirEntry is one name in a listing.
type DirEntry struct {
	Name string
	Kind Kind
	// Info is the object's metadata as listed (files); it lacks user
	// metadata, so a zero-size object may still be a symlink.
	Info objstore.ObjectInfo
	// Mark is set on the entry of a name this mount created (not listed):
	// the write-back's upload mark then (writeback.Manager.UploadMark),
	// so that only an upload landed since completes the entry.
	Mark uint64
}

// Listing is a cached directory listing. Its methods are safe for
// concurrent use, so the vfs can patch a cached listing in place when it
// creates or removes a name.
type Listing struct {
	Expires time.Time
	Loaded  time.Time // when it was listed (zero when built by NewListing)

	mu      sync.Mutex          // guards entries, names and natural
	entries map[string]DirEntry // guarded by mu
	// names and natural are the entries' names sorted (by NaturalLess
	// for natural), built on demand, nil after a change; guarded by mu.
	names, natural []string
}

// NewListing returns a listing of entries that expires at exp.
func NewListing(entries []DirEntry, exp time.Time) *Listing {
	l := &Listing{Expires: exp, entries: make(map[string]DirEntry, len(entries))}
	for _, e := range entries {
		if old, ok := l.entries[e.Name]; ok && old.Kind == KindDir {
			continue // a directory shadows a file of the same name
		}
		l.entries[e.Name] = e
	}
	return l
}

// Entries returns the entries sorted by name.
func (l *Listing) Entries() []DirEntry {
	l.mu.Lock()
	out := make([]DirEntry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e)
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns the names sorted, sorted once per version of the
// listing (callers share the slice and must not change it).
func (l *Listing) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = l.namesLocked()
		sort.Strings(l.names)
	}
	return l.names
}

// NaturalNames is Names in natural order (NaturalLess: "f2" before
// "f10").
func (l *Listing) NaturalNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.natural == nil {
		l.natural = l.namesLocked()
		sort.Slice(l.natural, func(i, j int) bool { return NaturalLess(l.natural[i], l.natural[j]) })
	}
	return l.natural
}

func (l *Listing) namesLocked() []string {
	names := make([]string, 0, len(l.entries))
	for n := range l.entries {
		names = append(names, n)
	}
	return names
}

// NaturalLess orders names as people number files: runs of digits by
// their value ("f2" < "f10", "0.9" < "0.10"), the rest byte by byte;
// names equal so ("f01", "f1") in byte order.
func NaturalLess(a, b string) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			da, db := strings.TrimLeft(a[si:i], "0"), strings.TrimLeft(b[sj:j], "0")
			if len(da) != len(db) {
				return len(da) < len(db)
			}
			if da != db {
				return da < db
			}
			continue
		}
		if a[i] != b[j] {
			return a[i] < b[j]
		}
		i, j = i+1, j+1
	}
	if ra, rb := len(a)-i, len(b)-j; ra != rb {
		return ra < rb
	}
	return a < b
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Add inserts or replaces a name (a directory is never replaced by a file).
func (l *Listing) Add(e DirEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.entries[e.Name]; ok && old.Kind == KindDir && e.Kind != KindDir {
		return
	}
	if _, ok := l.entries[e.Name]; !ok {
		l.names, l.natural = nil, nil
	}
	l.entries[e.Name] = e
}

// Replace sets name's entry to e when name is listed and cond accepts its
// current entry, and reports whether it did.
func (l *Listing) Replace(name string, cond func(DirEntry) bool, e DirEntry) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.entries[name]
	if !ok || !cond(old) {
		return false
	}
	e.Name = name
	l.entries[name] = e
	return true
}

// Remove deletes a name.
func (l *Listing) Remove(name string) {
	l.mu.Lock()
	delete(l.entries, name)
	l.names, l.natural = nil, nil
	l.mu.Unlock()
}

// Has reports whether name is listed, and its kind.
func (l *Listing) Has(name string) (DirEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[name]
	return e, ok
}

// Len returns the number of entries.
func (l *Listing) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Config sets the TTLs and the size bound.
type Config struct {
	StatTTL     time.Duration
	ListTTL     time.Duration
	NegativeTTL time.Duration
	MaxEntries  int64 // default 200,000
	Now         func() time.Time
}

// Cache is the stat and listing cache. Safe for concurrent use.
type Cache struct {
	cfg   Config
	stats *ristretto.Cache[string, *Entry]
	lists *ristretto.Cache[string, *Listing]
	ld    loads // listing loads in progress, directories too big (load.go)
}

// New builds a cache.
func New(cfg Config) (*Cache, error) {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = 200_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	st, err := ristretto.NewCache(&ristretto.Config[string, *Entry]{
		// Counters sized to the entry bound, not 10×: the sketch is
		// allocated up front and dominated an idle mount's memory.
		NumCounters: cfg.MaxEntries * 2, MaxCost: cfg.MaxEntries, BufferItems: 64,
	})
	if err != nil {
		return nil, err
	}
	ls, err := ristretto.NewCache(&ristretto.Config[string, *Listing]{
		NumCounters: 20_000, MaxCost: cfg.MaxEntries, BufferItems: 64,
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	c := &Cache{cfg: cfg, stats: st, lists: ls}
	c.ld.flights = map[string]*flight{}
	c.ld.tooBig = map[string]time.Time{}
	return c, nil
}

// Stat returns a fresh cached entry for key.
func (c *Cache) Stat(key string) (*Entry, bool) {
	e, ok := c.stats.Get(key)
	if !ok || e == nil || c.cfg.Now().After(e.Expires) {
		return nil, false
	}
	return e, true
}

// PutStat caches a positive entry.
func (c *Cache) PutStat(key string, kind Kind, info objstore.ObjectInfo) {
	if c.cfg.StatTTL <= 0 {
		return
	}
	c.stats.SetWithTTL(key, &Entry{Kind: kind, Info: info, Expires: c.cfg.Now().Add(c.cfg.StatTTL)}, 1, c.cfg.StatTTL)
}

// PutStatWait is PutStat whose entry Stat sees once it returns (a
// PutStat may show a moment later: the cache buffers its writes).
func (c *Cache) PutStatWait(key string, kind Kind, info objstore.ObjectInfo) {
	c.PutStat(key, kind, info)
	c.stats.Wait()
}

// PutNegative caches "no such name".
func (c *Cache) PutNegative(key string) {
	if c.cfg.NegativeTTL <= 0 {
		return
	}
	c.stats.SetWithTTL(key, &Entry{Kind: KindNone, Expires: c.cfg.Now().Add(c.cfg.NegativeTTL)}, 1, c.cfg.NegativeTTL)
}

// Forget drops the stat entry of key. An entry put before may still sit
// in ristretto's buffer of sets, to be stored after Del's immediate part
// (and deleted again only when Del's own buffered delete is applied); Wait
// applies both, so that no earlier entry of key (a negative one from the
// lookup before a create) shows after Forget returns.
func (c *Cache) Forget(key string) {
	c.stats.Del(key)
	c.stats.Wait()
}

// List returns a fresh cached listing of dir.
func (c *Cache) List(dir string) (*Listing, bool) {
	l, ok := c.lists.Get(dir)
	if !ok || l == nil || c.cfg.Now().After(l.Expires) {
		return nil, false
	}
	return l, true
}

// PutList caches a listing of dir built from entries and returns it.
func (c *Cache) PutList(dir string, entries []DirEntry) *Listing {
	now := c.cfg.Now()
	l := NewListing(entries, now.Add(c.cfg.ListTTL))
	l.Loaded = now
	if c.cfg.ListTTL > 0 {
		c.lists.SetWithTTL(dir, l, int64(len(entries)+1), c.cfg.ListTTL)
		c.lists.Wait() // lookups that follow a readdir must see it
	}
	return l
}

// ForgetList drops the listing of dir (and does not cache a load of it
// in progress).
func (c *Cache) ForgetList(dir string) {
	c.changed(dir)
	c.lists.Del(dir)
}

// Clear drops everything (and caches no load in progress).
func (c *Cache) Clear() {
	c.changedAll()
	c.stats.Clear()
	c.lists.Clear()
}

// Close releases the cache.
func (c *Cache) Close() {
	c.stats.Close()
	c.lists.Close()
}
