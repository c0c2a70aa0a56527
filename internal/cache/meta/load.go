package meta

import (
	"errors"
	"sync"
	"time"
)

// ErrTooBig is what a capped listing load returns when the directory has
// more entries than the cap: the caller asks per name instead. The cache
// remembers the directory as too big for the listing TTL (TooBig).
var ErrTooBig = errors.New("meta: directory too big to list for lookups")

// maxTooBig bounds the directories remembered as too big.
const maxTooBig = 1024

// flight is one load of a directory's listing; callers for the same
// directory wait on done and share its result.
type flight struct {
	done  chan struct{}
	ls    *Listing
	err   error
	stale bool // the directory changed during the load: do not cache; guarded by loads.mu
}

// loads deduplicates listing loads and remembers directories too big to
// list for lookups.
type loads struct {
	mu      sync.Mutex           // guards flights and tooBig
	flights map[string]*flight   // in-progress loads by dir (and mode); guarded by mu
	tooBig  map[string]time.Time // dir -> until when it counts as too big; guarded by mu
}

// LoadList returns a fresh cached listing of dir when ok(listing) accepts
// it, else loads it with load (the entries as listed) and caches it.
// Concurrent callers for the same dir and capped share one load: a lookup
// storm in a directory costs one paginated listing, not one per name.
// A load during which the directory changes (AddEntry, RemoveEntry,
// ForgetList, Clear) is returned to the callers that started it but not
// cached; callers that come after the change start a new load.
// capped tells loads that may stop early with ErrTooBig apart from full
// ones (readdir), so that a readdir never gets ErrTooBig from a lookup's
// load.
func (c *Cache) LoadList(dir string, capped bool, ok func(*Listing) bool, load func() ([]DirEntry, error)) (*Listing, error) {
	if ls, found := c.List(dir); found && (ok == nil || ok(ls)) {
		return ls, nil
	}
	key := dir
	if capped {
		key = "\x00capped\x00" + dir
	}
	c.ld.mu.Lock()
	if f := c.ld.flights[key]; f != nil {
		c.ld.mu.Unlock()
		<-f.done
		return f.ls, f.err
	}
	f := &flight{done: make(chan struct{})}
	c.ld.flights[key] = f
	c.ld.mu.Unlock()

	ents, err := load()
	c.ld.mu.Lock()
	stale := f.stale
	if c.ld.flights[key] == f {
		delete(c.ld.flights, key)
	}
	if errors.Is(err, ErrTooBig) && !stale {
		if len(c.ld.tooBig) >= maxTooBig {
			clear(c.ld.tooBig)
		}
		c.ld.tooBig[dir] = c.cfg.Now().Add(c.cfg.ListTTL)
	}
	if err == nil {
		// Cached under mu, so that a change either marked this load
		// stale or comes after and patches the cached listing.
		if stale {
			f.ls = NewListing(ents, c.cfg.Now().Add(c.cfg.ListTTL))
		} else {
			f.ls = c.PutList(dir, ents)
		}
	}
	c.ld.mu.Unlock()
	f.err = err
	close(f.done)
	return f.ls, f.err
}

// TooBig reports whether a capped load of dir found it too big within
// the listing TTL.
func (c *Cache) TooBig(dir string) bool {
	c.ld.mu.Lock()
	defer c.ld.mu.Unlock()
	until, ok := c.ld.tooBig[dir]
	if ok && c.cfg.Now().After(until) {
		delete(c.ld.tooBig, dir)
		return false
	}
	return ok
}

// Touch records that something below dir changed (a name in a
// subdirectory went away, which may hide that subdirectory): a load of
// dir in progress is not cached.
func (c *Cache) Touch(dir string) { c.changed(dir) }

// changed marks loads of dir in progress as stale (their result is not
// cached) and detaches them, so that later callers load again.
func (c *Cache) changed(dir string) {
	c.ld.mu.Lock()
	defer c.ld.mu.Unlock()
	for _, key := range []string{dir, "\x00capped\x00" + dir} {
		if f := c.ld.flights[key]; f != nil {
			f.stale = true
			delete(c.ld.flights, key)
		}
	}
	delete(c.ld.tooBig, dir)
}

// changedAll marks every load in progress as stale.
func (c *Cache) changedAll() {
	c.ld.mu.Lock()
	defer c.ld.mu.Unlock()
	for key, f := range c.ld.flights {
		f.stale = true
		delete(c.ld.flights, key)
	}
	clear(c.ld.tooBig)
}

// AddEntry records that e appeared in dir: the cached listing, if any, is
// patched, and a load in progress is not cached.
func (c *Cache) AddEntry(dir string, e DirEntry) {
	c.changed(dir)
	if ls, ok := c.List(dir); ok {
		ls.Add(e)
	}
}

// RemoveEntry records that name left dir (see AddEntry).
func (c *Cache) RemoveEntry(dir, name string) {
	c.changed(dir)
	if ls, ok := c.List(dir); ok {
		ls.Remove(name)
	}
}
