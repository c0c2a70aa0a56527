package writeback

import "github.com/ferry-fs/ferry/pkg/objstore"

// streamTarget is the object size a stream's layout must reach within the
// backend's MaxParts (or its MaxObjectSize when smaller). A larger file
// is not streamed: it is uploaded at close with a uniform layout.
const streamTarget = 5 << 40

// layout maps multipart part numbers (from 1) to byte ranges. A uniform
// layout (tier == 0) has parts of one size, chosen when the object size is
// known (objstore.PartSize). A tiered layout serves streams, whose final
// size is unknown: every tier parts the size doubles (capped at max), the
// tier length chosen so that MaxParts parts reach streamTarget.
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

// streamLayout is the layout of a stream of unknown final size: parts
// start at base and double every tier, with the longest tiers that still
// reach streamTarget (or the backend's MaxObjectSize) in MaxParts parts.
func streamLayout(caps objstore.Caps, base int64) layout {
	mp := maxParts(caps)
	target := int64(streamTarget)
	if caps.MaxObjectSize > 0 {
		target = min(target, caps.MaxObjectSize)
	}
	l := layout{size: max(base, caps.MinPartSize, 1), max: caps.MaxPartSize, maxParts: mp}
	for tiers := 1; tiers <= min(mp, 64); tiers++ {
		l.tier = mp / tiers
		if l.capacity() >= target {
			break
		}
	}
	return l
}

// capacity returns the bytes maxParts parts of l hold.
func (l layout) capacity() int64 {
	if l.tier == 0 {
		return int64(l.maxParts) * l.size
	}
	var total int64
	for t, left := 0, l.maxParts; left > 0; t++ {
		n := min(left, l.tier)
		total += int64(n) * l.partSize(t)
		left -= n
	}
	return total
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
	for ; t > 0 && ps < maxDoubling; t-- {
		ps *= 2
		if l.max > 0 && ps > l.max {
			return max(l.max, l.size)
		}
	}
	return ps
}

// maxDoubling stops part sizes from overflowing without a MaxPartSize.
const maxDoubling = 1 << 50

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
