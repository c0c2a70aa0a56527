package writeback

import "github.com/ferry-fs/ferry/pkg/objstore"

// layout maps multipart part numbers (from 1) to byte ranges. A uniform
// layout (tier == 0) has parts of one size, chosen when the object size is
// known (objstore.PartSize). A tiered layout serves streams, whose final size
// is unknown: every tier parts the size doubles (capped at max), so
// that MaxParts parts reach far beyond the backend's maximum object size.
type layout struct {
	size     int64 // (first-tier) part size
	tier     int   // parts per tier; 0 = uniform
	max      int64 // largest part size (0 = unbounded)
	maxParts int
}

// uniformLayout is the layout of a known-size upload.
func uniformLayout(caps objstore.Caps, base, total int64) layout {
	return layout{size: objstore.PartSize(caps, base, total), maxParts: maxParts(caps)}
}

// streamLayout is the layout of a stream of unknown final size: ten tiers
// of MaxParts/10 parts each.
func streamLayout(caps objstore.Caps, base int64) layout {
	mp := maxParts(caps)
	return layout{
		size:     max(base, caps.MinPartSize, 1),
		tier:     max(mp/10, 1),
		max:      caps.MaxPartSize,
		maxParts: mp,
	}
}

func maxParts(caps objstore.Caps) int {
	if caps.MaxParts > 0 {
		return caps.MaxParts
	}
	return 10000
}

// partSize is the size of every part of tier t.
func (l layout) partSize(t int) int64 {
	ps := l.size
	for ; t > 0; t-- {
		if l.max > 0 && ps*2 > l.max {
			break
		}
		ps *= 2
	}
	return ps
}

// part returns the range of part n (n ≥ 1), before clipping to the object.
func (l layout) part(n int) span {
	if l.tier == 0 {
		off := int64(n-1) * l.size
		return span{off, off + l.size}
	}
	var off int64
	t := 0
	for ; n > l.tier; n -= l.tier {
		off += int64(l.tier) * l.partSize(t)
		t++
	}
	ps := l.partSize(t)
	off += int64(n-1) * ps
	return span{off, off + ps}
}

// index returns the number of the part holding byte off.
func (l layout) index(off int64) int {
	if l.tier == 0 {
		return int(off/l.size) + 1
	}
	n := 1
	for t := 0; ; t++ {
		ps := l.partSize(t)
		width := int64(l.tier) * ps
		if off < width {
			return n + int(off/ps)
		}
		off -= width
		n += l.tier
	}
}

// parts returns the ranges of the parts of an object of total bytes, the
// last one clipped; ok is false when that takes more than maxParts parts.
func (l layout) parts(total int64) (ps []span, ok bool) {
	for n := 1; ; n++ {
		p := l.part(n)
		if p.Off >= total {
			return ps, len(ps) <= l.maxParts
		}
		if n > l.maxParts {
			return nil, false
		}
		p.End = min(p.End, total)
		ps = append(ps, p)
	}
}
