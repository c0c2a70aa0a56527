package block

import "testing"

func TestDetector(t *testing.T) {
	const MiB = 1 << 20
	p := raParams{bs: MiB, nblocks: 1024, maxWindow: 64 * MiB, partBlocks: 8}
	type step struct {
		off, n    int64
		window    int64 // after the read
		from, to  int64 // readahead queued (blocks)
		collapsed bool
		random    bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "whole-file reader starts a run at once", steps: []step{
			{off: 0, n: 128 << 10, window: 4 * MiB, from: 1, to: 5},
			{off: 128 << 10, n: 128 << 10, window: 4 * MiB}, // nothing new worth a GET
			{off: 256 << 10, n: 2 * MiB, window: 2 * (2*MiB + 256<<10), from: 5, to: 7},
		}},
		{name: "window doubles with the run up to the cap", steps: []step{
			{off: 0, n: 8 * MiB, window: 16 * MiB, from: 8, to: 24},
			{off: 8 * MiB, n: 8 * MiB, window: 32 * MiB, from: 24, to: 48},
			{off: 16 * MiB, n: 16 * MiB, window: 64 * MiB, from: 48, to: 96},
			{off: 32 * MiB, n: 32 * MiB, window: 64 * MiB, from: 96, to: 128},
		}},
		{name: "random access collapses, adjacent reads recover", steps: []step{
			{off: 0, n: 4 * MiB, window: 8 * MiB, from: 4, to: 12},
			{off: 500 * MiB, n: 4096, window: 0, collapsed: true, random: true},
			{off: 200 * MiB, n: 4096, window: 0, random: true},
			{off: 200*MiB + 4096, n: 4096, window: 4 * MiB, from: 201, to: 205},
			{off: 200*MiB + 8192, n: 4 * MiB, window: 2 * (4*MiB + 8192), from: 205, to: 213},
		}},
		{name: "first read near the start starts a run (the read at 0 comes second)", steps: []step{
			{off: 128 << 10, n: 128 << 10, window: 4 * MiB, from: 1, to: 5},
			{off: 0, n: 128 << 10, window: 4 * MiB},
		}},
		{name: "a read ahead within the window, taken before the reads before it, stays sequential", steps: []step{
			{off: 0, n: 512 << 10, window: 4 * MiB, from: 1, to: 5},
			{off: 512 << 10, n: 512 << 10, window: 4 * MiB},
			{off: 4*MiB + 512<<10, n: 512 << 10, window: 10 * MiB, from: 5, to: 15},
			{off: MiB, n: 512 << 10, window: 10 * MiB},
		}},
		{name: "first read elsewhere is random", steps: []step{
			{off: 7 * MiB, n: 4096, random: true},
			{off: 3 * MiB, n: 4096, random: true},
		}},
		{name: "out-of-order reads within the slack stay sequential", steps: []step{
			{off: 0, n: MiB, window: 4 * MiB, from: 1, to: 5},
			{off: 2 * MiB, n: MiB, window: 6 * MiB, from: 5, to: 9},
			{off: MiB, n: MiB, window: 6 * MiB},
			{off: 3 * MiB, n: MiB, window: 8 * MiB}, // 3 blocks < window/2: wait for a bigger GET
			{off: 4 * MiB, n: MiB, window: 10 * MiB, from: 9, to: 15},
		}},
		{name: "tail of the object is queued even when small", steps: []step{
			{off: 1000 * MiB, n: 4096, random: true},
			{off: 1000*MiB + 4096, n: 20 * MiB, window: 2 * (20*MiB + 4096), from: 1021, to: 1024},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d detector
			for i, s := range tt.steps {
				plan := d.observe(s.off, s.n, p)
				if d.window != s.window || plan.from != s.from || plan.to != s.to || plan.collapsed != s.collapsed || plan.random != s.random {
					t.Fatalf("step %d: window %d plan %+v; want window %d plan {from:%d to:%d collapsed:%v random:%v}",
						i, d.window, plan, s.window, s.from, s.to, s.collapsed, s.random)
				}
			}
		})
	}
}

func TestDetectorSmallWindowCap(t *testing.T) {
	// The cap bounds the window below minWindow too.
	p := raParams{bs: 64 << 10, nblocks: 100, maxWindow: 128 << 10, partBlocks: 4}
	var d detector
	d.observe(0, 4096, p)
	if d.window != 128<<10 {
		t.Fatalf("window %d, want the cap", d.window)
	}
}
