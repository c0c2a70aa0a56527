package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestDirReadahead reads a tree of small objects through a real mount
// on each backend, as find -exec cat and as a reader of a tenth of the
// files in random order, with directory readahead on and off: the
// bytes are right either way; in order, the exit summary shows files
// predicted and read from the cache, nothing wasted, and the reads cost
// one GET per file and no HEAD; in random order, the predicted bytes
// never read stay below the bytes read.
func TestDirReadahead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *s3env) {
		const dirs, per = 3, 60
		type object struct {
			key  string
			body []byte
		}
		var objs []object // in find order
		for d := range dirs {
			for i := range per {
				objs = append(objs, object{fmt.Sprintf("tree/d%d/f%03d", d, i), []byte(strings.Repeat(fmt.Sprintf("%s %d %d\n", e.scheme, d, i), 50+i))})
			}
		}
		objs = append(objs, object{"tree/z.txt", []byte("last\n")})
		var all []byte
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, o := range objs {
			all = append(all, o.body...)
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				e.put(o.key, o.body)
			})
		}
		wg.Wait()
		sum := sha256.Sum256(all)
		want := hex.EncodeToString(sum[:])
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		for _, mode := range []string{"on", "off"} {
			r := e.run(fmt.Sprintf(`set -e
cd %[1]s
curl -sf %[2]s > %[3]s/m0
find tree -type f -exec cat {} + | sha256sum | cut -d' ' -f1 > %[3]s/sum
curl -sf %[2]s > %[3]s/m1`, e.path(""), metricsURL, out),
				"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port), "--dir-readahead="+mode)
			if r.code != 0 {
				t.Fatalf("%s: exit %d:\n%s", mode, r.code, tailStr(r.stderr, 4000))
			}
			got, _ := os.ReadFile(filepath.Join(out, "sum"))
			if strings.TrimSpace(string(got)) != want {
				t.Errorf("%s: find -exec cat read other bytes (sha256 %s, want %s)", mode, got, want)
			}
			s := parseSummary(t, r.stderr)
			if mode == "off" {
				if _, ok := s["dir_readahead.files"]; ok {
					t.Errorf("off: the summary reports directory readahead: %v", s)
				}
				continue
			}
			if s["dir_readahead.files"] < float64(len(objs))/2 || s["dir_readahead.hit_bytes"] <= 0 || s["dir_readahead.wasted_bytes"] != 0 {
				t.Errorf("on: summary %v, want most files predicted, hits, nothing wasted", s)
			}
			m0, m1 := backendOps(t, filepath.Join(out, "m0")), backendOps(t, filepath.Join(out, "m1"))
			t.Logf("in order: files %v, predicted %v, hit %v, wasted %v bytes; %v GETs, %v HEADs, %v LISTs", s["dir_readahead.files"],
				s["dir_readahead.predicted_bytes"], s["dir_readahead.hit_bytes"], s["dir_readahead.wasted_bytes"],
				m1["NewReader"]-m0["NewReader"], m1["Stat"]-m0["Stat"], m1["List"]-m0["List"])
			if gets := m1["NewReader"] - m0["NewReader"]; gets != float64(len(objs)) {
				t.Errorf("on: %v GETs for %d files, want one each", gets, len(objs))
			}
			if heads := m1["Stat"] - m0["Stat"]; heads > dirs+1 { // the directories' markers
				t.Errorf("on: %v HEADs, want at most one per directory", heads)
			}
		}
		// A tenth of the files of a directory in random order, after a
		// listing of it.
		r := e.run(fmt.Sprintf(`cd %s && python3 -c '
import os, random
names = sorted(os.listdir("tree/d1"))
random.seed(7)
n = 0
for name in random.sample(names, len(names) // 10):
    with open("tree/d1/" + name, "rb") as f:
        n += len(f.read())
print(n)'`, e.path("")))
		if r.code != 0 {
			t.Fatalf("random reads: exit %d:\n%s", r.code, tailStr(r.stderr, 4000))
		}
		var read float64
		fmt.Sscan(r.stdout, &read)
		s := parseSummary(t, r.stderr)
		t.Logf("random: read %v bytes, predicted %v, wasted %v", read, s["dir_readahead.predicted_bytes"], s["dir_readahead.wasted_bytes"])
		if read <= 0 || s["dir_readahead.wasted_bytes"] > read {
			t.Errorf("random reads of %v bytes: summary %v, want at most that many predicted bytes wasted", read, s)
		}
	})
}

// backendOps returns the backend requests by op of a /metrics scrape.
func backendOps(t *testing.T, file string) map[string]float64 {
	t.Helper()
	b, err := os.ReadFile(file)
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
