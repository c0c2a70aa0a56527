package supervise

import (
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// The ferries of one node share its CPUs. With a ferry per task, each
// process would otherwise run the Go scheduler with as many Ps as the
// node (or its container) has CPUs, and a third of their CPU went to the
// runtime's monitor and to threads looking for work (perf: 8 ferries on 2
// cores reading one cold 1 GiB file at once). So every procsEvery a
// ferry counts the others that stage under its cache directory
// (writeback.Manager.NodePeers) and keeps GOMAXPROCS at its share: the
// CPUs it started with, divided by the ferries, at least 1. Those 8
// ferries then used 189-234 ticks of CPU against 228-292, woke the
// monitor 35-40k times against 63-67k, switched context 72-81k times
// against 110-117k, and finished in 2.8-3.2 s against 3.1-3.7 (4
// alternating runs, 2026-12-06). One ferry alone lost nothing with 1 P
// on these 2 cores (cold sequential 1 MiB: 464-498 against 459-488 MiB/s),
// and the bench's 8-task workload (reads, compute, 500 MiB written per
// task) did not change beyond its spread (3 alternating runs: 28.4-31.5
// against 28.2-33.5 s; its write phase 2.7-3.0 against 2.8-3.2 s). A
// GOMAXPROCS set in the environment is left alone.

// procsEvery is how often the share is looked at again.
const procsEvery = 2 * time.Second

// procsShare is the Ps of one of 1+peers ferries sharing base CPUs.
func procsShare(base, peers int) int { return max(1, base/(1+peers)) }

// procsGov keeps GOMAXPROCS at the process's share. Its goroutine is
// owned by the stack (stop waits for it).
type procsGov struct {
	base  int        // GOMAXPROCS at start: the CPUs the runtime found
	peers func() int // other ferries on the node now
	set   func(int)  // runtime.GOMAXPROCS in production
	log   *slog.Logger
	cur   int // Ps now; owned by the goroutine (and by start before it runs)
	quit  chan struct{}
	wg    sync.WaitGroup
}

// startProcs starts the governor, or returns nil when GOMAXPROCS is fixed
// by the environment (fixed) or there is one CPU.
func startProcs(fixed bool, peers func() int, log *slog.Logger) *procsGov {
	base := runtime.GOMAXPROCS(0)
	if fixed || base <= 1 {
		return nil
	}
	g := &procsGov{base: base, peers: peers, log: log, cur: base, quit: make(chan struct{}),
		set: func(n int) { runtime.GOMAXPROCS(n) }}
	g.adjust()
	g.wg.Add(1)
	go g.loop() // owner: the stack; ended by stop
	return g
}

func (g *procsGov) loop() {
	defer g.wg.Done()
	t := time.NewTicker(procsEvery)
	defer t.Stop()
	for {
		select {
		case <-g.quit:
			return
		case <-t.C:
			g.adjust()
		}
	}
}

// adjust sets GOMAXPROCS to the share of the ferries there are now.
func (g *procsGov) adjust() {
	peers := g.peers()
	n := procsShare(g.base, peers)
	if n == g.cur {
		return
	}
	g.set(n)
	g.log.Debug("sharing the node's CPUs with the other ferries on its cache dir", "ferries", 1+peers, "gomaxprocs", n, "cpus", g.base)
	g.cur = n
}

// stop ends the governor (nil: nothing to stop); GOMAXPROCS stays as it
// is.
func (g *procsGov) stop() {
	if g == nil {
		return
	}
	close(g.quit)
	g.wg.Wait()
}
