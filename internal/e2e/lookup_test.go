package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestLookupStormCostsPages runs a task that stats every name of a
// directory of 2,500 objects (and 200 names it lacks) with no listing
// first, then reads every file with parallel cats, scraping /metrics
// around each phase: the stats cost O(pages) requests, not one per name,
// and the reads one GET per file (size and version come from the listing,
// so no HEAD).
func TestLookupStormCostsPages(t *testing.T) {
	t.Parallel()
	const n, missing = 2500, 200
	e := newS3Env(t)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				e.put(fmt.Sprintf("storm/f%05d", i), []byte(fmt.Sprintf("file %05d\n", i)))
			}
		})
	}
	wg.Wait()
	names := make([]string, 0, n+missing)
	for i := range n {
		names = append(names, fmt.Sprintf("f%05d", i))
	}
	for i := range missing {
		names = append(names, fmt.Sprintf("none%d", i))
	}
	list := writeTemp(t, "names", []byte(strings.Join(names, "\n")+"\n"))
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	m := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	r := e.run(fmt.Sprintf(`set -e
cd %[1]s
curl -sf %[2]s > %[3]s/m0
xargs stat -c '%%s' < %[4]s > %[3]s/sizes 2>/dev/null || true
curl -sf %[2]s > %[3]s/m1
head -n %[5]d %[4]s | xargs -P 8 -n 100 cat > %[3]s/bytes
curl -sf %[2]s > %[3]s/m2`, e.path("storm"), m, out, list, n), "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, tailStr(r.stderr, 4000))
	}
	sizes, _ := os.ReadFile(filepath.Join(out, "sizes"))
	if got := len(lines(string(sizes))); got != n {
		t.Errorf("stat printed %d sizes, want %d", got, n)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "bytes")); len(b) != n*len("file 00000\n") {
		t.Errorf("cat read %d bytes, want %d", len(b), n*len("file 00000\n"))
	}
	// requests per op ("List", "Stat", "NewReader") in a scrape.
	reqs := func(f string) map[string]float64 {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		ops := map[string]float64{}
		for _, l := range lines(string(b)) {
			rest, ok := strings.CutPrefix(l, "ferry_backend_requests_total{")
			if !ok {
				continue
			}
			labels, val, _ := strings.Cut(rest, "} ")
			var v float64
			fmt.Sscan(val, &v)
			for _, kv := range strings.Split(labels, ",") {
				if op, ok := strings.CutPrefix(kv, `op="`); ok {
					ops[strings.TrimSuffix(op, `"`)] += v
				}
			}
		}
		return ops
	}
	m0, m1, m2 := reqs("m0"), reqs("m1"), reqs("m2")
	meta := func(a, b map[string]float64) float64 { return b["List"] + b["Stat"] - a["List"] - a["Stat"] }
	t.Logf("%d stats: %v LISTs and HEADs; %d cats: %v LISTs and HEADs, %v GETs", n+missing, meta(m0, m1), n, meta(m1, m2), m2["NewReader"]-m1["NewReader"])
	// 3 pages, 3 lookups before the directory is listed (a LIST and a
	// HEAD each), the lookups of storm itself, a margin for retries.
	if got := meta(m0, m1); got > 20 {
		t.Errorf("%d stats cost %v LISTs and HEADs, want O(pages) (at most 20)", n+missing, got)
	}
	if got := meta(m1, m2); got > 5 {
		t.Errorf("reading %d listed files cost %v LISTs and HEADs, want none", n, got)
	}
	if got := m2["NewReader"] - m1["NewReader"]; got != n {
		t.Errorf("reading %d files cost %v GETs, want one each", n, got)
	}
}
