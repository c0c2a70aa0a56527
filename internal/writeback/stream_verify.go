package writeback

import (
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Streaming a file the kernel writes (external writes). Ferry does not
// see where such writes land, so a part streamed while the file was open
// may have been rewritten after it was sent. Streaming runs for such a
// file as for any other (parts go once the file's size has moved past
// them: a sequential writer's output leaves while it is written), and
// each streamed part carries the CRC-32C of exactly the bytes its upload
// sent (summingReader). The close (finishStream, after the last writer
// ended) reads the streamed parts back from the staging file, through
// the attempt's guard, and sends again every part whose bytes differ:
// the object is the file's final content, and a sequential writer costs
// one read of its file from the page cache instead of its whole upload
// after the close.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// summingReader is an upload's source that sums what the upload read.
// An upload reads its source in order from the start, and again from the
// start on a retry: a read at offset 0 starts the sum over, and any other
// pattern leaves it unusable (the part is then sent again at the close).
type summingReader struct {
	r    io.ReaderAt
	mu   sync.Mutex // guards the fields below (a source may be read concurrently)
	crc  uint32
	next int64 // the offset the sum has reached
	bad  bool  // read out of order since the last start
}

func (s *summingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.r.ReadAt(p, off)
	s.mu.Lock()
	defer s.mu.Unlock()
	if off == 0 {
		s.crc, s.next, s.bad = 0, 0, false
	}
	if off != s.next {
		s.bad = true
	}
	if !s.bad && n > 0 {
		s.crc = crc32.Update(s.crc, castagnoli, p[:n])
		s.next += int64(n)
	}
	return n, err
}

// FileRange lets a driver send the part from the staging file after one
// read through ReadAt (objstore.FileRange): the sum is then that read's,
// and the request carries the same checksum, so the server stores
// exactly the summed bytes or nothing.
func (s *summingReader) FileRange() (*os.File, int64) {
	f, off, _ := objstore.SourceFile(s.r)
	return f, off
}

// result returns the sum of the last pass, and whether that pass read
// all size bytes in order.
func (s *summingReader) result(size int64) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crc, !s.bad && s.next == size
}

// verifyParts returns the streamed parts (those done and not in sent)
// whose bytes in rd differ from what their upload sent, or that have no
// usable sum. rd is the attempt's guarded staging file: a change during
// the comparison fails it (errStagedChanged).
func (s *stream) verifyParts(rd io.ReaderAt, parts []span, sent map[int]bool) ([]int, error) {
	type check struct {
		n      int
		sum    uint32
		summed bool
	}
	var checks []check
	s.f.mu.Lock()
	for i := range parts {
		if p := s.parts[i+1]; p != nil && p.done && !sent[i+1] {
			checks = append(checks, check{i + 1, p.sum, p.summed})
		}
	}
	s.f.mu.Unlock()
	buf := make([]byte, 256<<10)
	var changed []int
	for _, c := range checks {
		p := parts[c.n-1]
		ok := c.summed
		if ok {
			var crc uint32
			for off := p.Off; off < p.End; {
				k := min(p.End-off, int64(len(buf)))
				m, err := rd.ReadAt(buf[:k], off)
				if int64(m) < k {
					if err == nil {
						err = io.ErrUnexpectedEOF
					}
					return nil, err
				}
				crc = crc32.Update(crc, castagnoli, buf[:k])
				off += k
			}
			ok = crc == c.sum
		}
		if !ok {
			changed = append(changed, c.n)
		}
	}
	if len(changed) > 0 {
		s.f.m.log.Debug("writeback: streamed parts written again after they were sent; sending them again", "key", s.key, "parts", changed)
	}
	return changed, nil
}
