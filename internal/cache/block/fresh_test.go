package block

import "testing"

// TestFreshBlocks: blocks another process fetches after this one found
// them absent are taken as verified (no check), unless their range has a
// hole where noHoleAt looks; blocks present before this process looked
// are checked.
func TestFreshBlocks(t *testing.T) {
	const bs = 256 << 10
	const nblocks = 4
	tests := []struct {
		name       string
		lookFirst  bool                          // this process finds the records absent before the other fetches
		damage     func(t *testing.T, o *object) // after the other's fetch
		wantFresh  int64                         // blocks taken unchecked
		wantBad    bool                          // a corruption found and refetched
		wantGetsOf func(fetched int64) (ok bool) // bytes this process fetched
	}{
		{name: "watched absent", lookFirst: true, wantFresh: nblocks,
			wantGetsOf: func(n int64) bool { return n == 0 }},
		{name: "watched absent, a hole punched since", lookFirst: true, wantFresh: nblocks - 1, wantBad: true,
			damage:     func(t *testing.T, o *object) { punch(t, o.dataPath(), 2*bs, bs) },
			wantGetsOf: func(n int64) bool { return n == bs }},
		{name: "watched absent, a block's first page punched since", lookFirst: true, wantFresh: nblocks - 1, wantBad: true,
			damage:     func(t *testing.T, o *object) { punch(t, o.dataPath(), bs, pageSize) },
			wantGetsOf: func(n int64) bool { return n == bs }},
		{name: "watched absent, a block's last page punched since", lookFirst: true, wantFresh: nblocks - 1, wantBad: true,
			damage:     func(t *testing.T, o *object) { punch(t, o.dataPath(), 3*bs-pageSize, pageSize) },
			wantGetsOf: func(n int64) bool { return n == bs }},
		{name: "present before this process looked", wantFresh: 0,
			wantGetsOf: func(n int64) bool { return n == 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{BlockSize: bs, ReadaheadMax: bs}
			f := newFixture(t, nblocks*bs, cfg)
			cfg.Dir = f.cache.cfg.Dir
			o := f.cache.object(f.ref)
			if tt.lookFirst {
				of, err := f.cache.openObj(o, true)
				if err != nil {
					t.Fatal(err)
				}
				if of.loadAll(f.cache) {
					t.Fatal("blocks present before any fetch")
				}
				defer f.cache.release(of)
			}
			other := f.open(cfg)
			ro := other.Open(f.ref)
			f.readAll(ro, bs, f.data)
			ro.Close()
			other.Close()
			if tt.damage != nil {
				tt.damage(t, o)
			}
			f.store.reset()
			r := f.cache.Open(f.ref)
			defer r.Close()
			f.readAll(r, 100_000, f.data)
			st := f.cache.Stats()
			if st.FreshBlocks != tt.wantFresh {
				t.Errorf("fresh blocks %d, want %d", st.FreshBlocks, tt.wantFresh)
			}
			if (st.Corruptions > 0) != tt.wantBad {
				t.Errorf("corruptions %d, want some: %v", st.Corruptions, tt.wantBad)
			}
			if _, n, _ := f.store.stats(); !tt.wantGetsOf(n) {
				t.Errorf("this process fetched %d bytes", n)
			}
		})
	}
}
