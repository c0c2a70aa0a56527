package supervise

import (
	"log/slog"
	"slices"
	"testing"
)

// TestProcsShare: the ferries sharing a node divide its CPUs, each
// keeping at least one P.
func TestProcsShare(t *testing.T) {
	for _, tc := range []struct{ base, peers, want int }{
		{base: 2, peers: 0, want: 2},
		{base: 2, peers: 1, want: 1},
		{base: 2, peers: 7, want: 1},
		{base: 64, peers: 31, want: 2},
		{base: 64, peers: 23, want: 2},
		{base: 16, peers: 2, want: 5},
	} {
		if got := procsShare(tc.base, tc.peers); got != tc.want {
			t.Errorf("%d CPUs, %d other ferries: %d Ps, want %d", tc.base, tc.peers, got, tc.want)
		}
	}
}

// TestProcsGovAdjust: the governor follows the count of ferries, and
// sets GOMAXPROCS only when the share changes.
func TestProcsGovAdjust(t *testing.T) {
	peers := 0
	var sets []int
	g := &procsGov{base: 8, cur: 8, peers: func() int { return peers }, log: slog.New(slog.DiscardHandler),
		set: func(n int) { sets = append(sets, n) }}
	for _, step := range []struct{ peers, want int }{{0, 8}, {3, 2}, {3, 2}, {7, 1}, {9, 1}, {1, 4}, {0, 8}} {
		peers = step.peers
		g.adjust()
		if g.cur != step.want {
			t.Errorf("%d other ferries: GOMAXPROCS %d, want %d", step.peers, g.cur, step.want)
		}
	}
	if want := []int{2, 1, 4, 8}; !slices.Equal(sets, want) {
		t.Errorf("GOMAXPROCS set to %v, want %v (only on a change)", sets, want)
	}
}
