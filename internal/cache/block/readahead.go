package block

// Sequential detection, per Reader. A read is sequential when it starts
// within seqSlack of the end of the current run (FUSE delivers a stream's
// requests slightly out of order when several are in flight). The window is
// twice the run's length, at least minWindow and at most the Reader's cap,
// so it doubles as a stream goes on; a read elsewhere ends the run, drops
// the window to zero and its queued readahead, and the next read adjacent
// to it starts a new run. The first read of a handle at offset 0 starts a
// run at once (whole-file readers such as cat); when the object fits in
// one GET (at most a part), that first read fetches all of it with one
// GET and no readahead is queued. Readahead is queued in whole blocks, in
// runs of at least min(part, window/2), so GETs stay large.

const (
	seqSlack  = 2 << 20 // how far from the run's end a read still counts as sequential
	minWindow = 4 << 20 // window of a new run
)

// detector is one Reader's sequential-access state. It is a plain value;
// Reader.mu guards it.
type detector struct {
	reads    int64
	runStart int64 // offset where the current run began
	next     int64 // end of the furthest byte read in the run
	window   int64 // readahead window in bytes; 0 during random access
	issued   int64 // readahead is queued up to this block index
}

// raParams are the limits a detector works within.
type raParams struct {
	bs, nblocks int64 // block size and count of the object
	maxWindow   int64 // window cap
	partBlocks  int64 // largest GET, in blocks
}

// raPlan is what a read asks of the fetcher.
type raPlan struct {
	from, to  int64 // queue readahead of blocks [from, to)
	collapsed bool  // a run ended: drop its queued readahead
	random    bool  // this read was not sequential
	whole     bool  // fetch the whole object with this read (one GET)
}

// observe records a read of [off, off+n) and returns the readahead to queue.
func (d *detector) observe(off, n int64, p raParams) raPlan {
	var plan raPlan
	end := off + n
	slack := max(int64(seqSlack), 2*p.bs)
	first := d.reads == 0
	d.reads++
	switch {
	// A read within the run, or ahead of it within its window, is the
	// run too: the kernel's readahead of a FUSE open sends several reads
	// at once, and ferry may take a later one before the earlier ones (a
	// head of a big file through FUSE began a fill of the whole object
	// that way).
	case !first && off >= min(d.next-slack, d.runStart) && off <= d.next+max(slack, d.window):
		d.next = max(d.next, end)
	case first && off <= slack:
		// The start of a file, or near it: the kernel's readahead of a
		// FUSE open sends reads in parallel, and the one at 0 may come
		// second. Taken for a random read, that began a fill of the
		// whole object (FillRandomUpTo) for a head of it.
		d.runStart, d.next, d.issued = 0, end, 0
		if p.nblocks <= p.partBlocks {
			d.window = min(p.maxWindow, p.nblocks*p.bs)
			d.issued = p.nblocks
			plan.whole = true
			return plan
		}
	default:
		plan.collapsed = d.window > 0
		plan.random = true
		d.runStart, d.next, d.window, d.issued = off, end, 0, 0
		return plan
	}
	run := d.next - d.runStart
	d.window = min(p.maxWindow, max(min(int64(minWindow), p.maxWindow), 2*run))
	from := max(d.issued, (d.next+p.bs-1)/p.bs)
	to := min(p.nblocks, (d.next+d.window+p.bs-1)/p.bs)
	if to <= from {
		return plan
	}
	if need := min(p.partBlocks, max(1, d.window/p.bs/2)); to-from >= need || to == p.nblocks {
		plan.from, plan.to = from, to
		d.issued = to
	}
	return plan
}
