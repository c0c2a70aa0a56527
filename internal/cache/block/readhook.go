package block

// How the task's reads reach what fetched ahead of them: the input
// Stagers (stage.go) and directory readahead's ledger (predict.go). The
// Reader reports each read through stageRead.

// register adds s to c's Stagers (copy on write: stageRead loads the
// slice without a lock).
func (c *Cache) register(s *Stager) {
	c.stagersMu.Lock()
	defer c.stagersMu.Unlock()
	var ss []*Stager
	if p := c.stagers.Load(); p != nil {
		ss = append(ss, *p...)
	}
	ss = append(ss, s)
	c.stagers.Store(&ss)
}

// unregister removes s from c's Stagers.
func (c *Cache) unregister(s *Stager) {
	c.stagersMu.Lock()
	defer c.stagersMu.Unlock()
	p := c.stagers.Load()
	if p == nil {
		return
	}
	var kept []*Stager
	for _, x := range *p {
		if x != s {
			kept = append(kept, x)
		}
	}
	if len(kept) == 0 {
		c.stagers.Store(nil)
	} else {
		c.stagers.Store(&kept)
	}
}

// stageRead tells the Stagers of c that the task read [off, off+n) of
// ref, w saying whether and how the read waited for a fetch: it counts
// hits and stops staging an object the task reads past the staged point.
// It costs two atomic loads when nothing is being staged or predicted.
// Directory readahead's ledger (predict.go) is told too.
//
// Wiring (the Reader's side): Reader.read calls it for each block's part
// of a read, with that block's own waitKind (a read spanning a present
// block and a missing one must not take the hit from the present one), and
// with waitFetched for bytes read around the cache; CachedFile calls it on
// success with waitNone; Reader.NotePassthrough (an open whose reads the
// kernel serves from the data file, never seen by ferry) calls it once for
// the whole object with waitNone.
func (c *Cache) stageRead(ref Ref, off, n int64, w waitKind) {
	if n <= 0 {
		return
	}
	if c.pred.watching() {
		c.pred.noteRead(keyOf(ref), off, n, w) // directory readahead (predict.go)
	}
	p := c.stagers.Load()
	if p == nil {
		return
	}
	k := keyOf(ref)
	for _, s := range *p {
		s.noteRead(k, off, n, w)
	}
}
