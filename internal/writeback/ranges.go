package writeback

import "sort"

// span is the half-open byte range [Off, End).
type span struct{ Off, End int64 }

// rangeSet is a sorted list of disjoint, non-adjacent spans. Methods that
// modify it return the new set; the zero value is empty.
type rangeSet []span

// add returns s ∪ [off, end).
func (s rangeSet) add(off, end int64) rangeSet {
	if off >= end {
		return s
	}
	n := len(s)
	if n == 0 || s[n-1].End < off { // the common case: appending
		return append(s, span{off, end})
	}
	i := sort.Search(n, func(i int) bool { return s[i].End >= off })
	j := i
	for j < n && s[j].Off <= end {
		off = min(off, s[j].Off)
		end = max(end, s[j].End)
		j++
	}
	if i == j { // no overlap: insert
		s = append(s, span{})
		copy(s[i+1:], s[i:])
		s[i] = span{off, end}
		return s
	}
	s[i] = span{off, end}
	return append(s[:i+1], s[j:]...)
}

// cut returns s ∩ [0, limit).
func (s rangeSet) cut(limit int64) rangeSet {
	i := sort.Search(len(s), func(i int) bool { return s[i].End > limit })
	if i < len(s) && s[i].Off < limit {
		s[i].End = limit
		i++
	}
	return s[:i]
}

// overlaps reports whether s has a byte in [off, end).
func (s rangeSet) overlaps(off, end int64) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i].End > off })
	return i < len(s) && s[i].Off < end
}

// covers reports whether every byte of [off, end) is in s.
func (s rangeSet) covers(off, end int64) bool {
	if off >= end {
		return true
	}
	i := sort.Search(len(s), func(i int) bool { return s[i].End > off })
	return i < len(s) && s[i].Off <= off && s[i].End >= end
}

// gaps returns the sub-ranges of [off, end) that are not in s.
func (s rangeSet) gaps(off, end int64) []span {
	var out []span
	i := sort.Search(len(s), func(i int) bool { return s[i].End > off })
	for ; off < end && i < len(s) && s[i].Off < end; i++ {
		if s[i].Off > off {
			out = append(out, span{off, s[i].Off})
		}
		off = max(off, s[i].End)
	}
	if off < end {
		out = append(out, span{off, end})
	}
	return out
}

// clone returns an independent copy of s.
func (s rangeSet) clone() rangeSet { return append(rangeSet(nil), s...) }

// pairs encodes s for the journal.
func (s rangeSet) pairs() [][2]int64 {
	if len(s) == 0 {
		return nil
	}
	out := make([][2]int64, len(s))
	for i, r := range s {
		out[i] = [2]int64{r.Off, r.End}
	}
	return out
}

// rangesFromPairs decodes a journal range list, normalizing it.
func rangesFromPairs(p [][2]int64) rangeSet {
	var s rangeSet
	for _, r := range p {
		s = s.add(r[0], r[1])
	}
	return s
}
