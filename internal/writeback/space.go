package writeback

import (
	"fmt"
	"sync"
	"syscall"
)

// spaceChunk bounds how many bytes may be written between two statfs calls.
const spaceChunk = 64 << 20

// spaceBudget enforces Config.MinFreeBytes without a statfs per write: it
// hands out at most spaceChunk bytes per free-space probe.
type spaceBudget struct {
	free func() (int64, error)
	min  int64 // < 0 disables the check

	mu     sync.Mutex // guards budget
	budget int64      // bytes that may still be written before the next probe
}

func statfsFree(dir string) func() (int64, error) {
	return func() (int64, error) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return 0, err
		}
		return int64(st.Bavail) * st.Bsize, nil
	}
}

// headroom reports whether the staging disk has more than n bytes free
// above the floor (true when the floor is off or free space unknown).
func (s *spaceBudget) headroom(n int64) bool {
	if s.min < 0 {
		return true
	}
	avail, err := s.free()
	return err != nil || avail-s.min > n
}

// reserve accounts for n bytes about to be written. It returns an error
// wrapping syscall.ENOSPC when the write would leave less than min free.
func (s *spaceBudget) reserve(n int64) error {
	if s.min < 0 || n <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.budget >= n {
		s.budget -= n
		return nil
	}
	avail, err := s.free()
	if err != nil {
		return nil // unknown: let the write itself report a full disk
	}
	b := min(avail-s.min, max(spaceChunk, n))
	if b < n {
		s.budget = 0
		return fmt.Errorf("writeback: staging disk has %d bytes free, keeping %d: %w", avail, s.min, syscall.ENOSPC)
	}
	s.budget = b - n
	return nil
}
