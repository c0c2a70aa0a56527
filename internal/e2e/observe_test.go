package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestObserveMetricsAndSummary runs a task that reads one object and
// writes another with --metrics-addr, scrapes /metrics while the task is
// still running, and checks the ferry_ families are there and move, then
// that the exit summary on stderr matches what the task did.
func TestObserveMetricsAndSummary(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	in := randBytes(t, 12<<20+7)
	e.put("obs/in", in)
	out := randBytes(t, 9<<20+3)
	src := writeTemp(t, "out.bin", out)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	gate := t.TempDir() // the task says "ready" here and waits for "go"
	ready, goOn := filepath.Join(gate, "ready"), filepath.Join(gate, "go")
	script := fmt.Sprintf(`set -e
cat %s > /dev/null
cp %s %s
touch %s
i=0; while [ ! -e %s ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done`,
		e.path("obs/in"), src, e.path("obs/out"), ready, goOn)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ferryBin, "run", "--mount-point", e.mnt, "--cache-dir", e.cache,
		"--metrics-addr", addr, "--", "sh", "-c", script)
	cmd.Env = e.srv.Env()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owner: this test, which reads exited

	// Wait for the task to have read and written, then scrape.
	var metrics string
	for deadline := time.Now().Add(90 * time.Second); ; {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("ferry exited before the task was ready: %v\nstderr:\n%s", err, se.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task never got ready\nstderr:\n%s", se.String())
		}
	}
	metrics, err = scrape("http://" + addr + "/metrics")
	os.WriteFile(goOn, nil, 0o644) // let the task end whatever happened
	if err != nil {
		<-exited
		t.Fatalf("scrape /metrics: %v\nstderr:\n%s", err, se.String())
	}
	if err := <-exited; err != nil {
		t.Fatalf("ferry run: %v\nstderr:\n%s", err, se.String())
	}

	// /metrics: at least 10 ferry_ families, and the byte counters moved.
	fams, values := parseMetrics(metrics)
	if fams < 10 {
		t.Errorf("only %d ferry_ families in /metrics:\n%s", fams, metrics)
	}
	for name, atLeast := range map[string]float64{
		"ferry_backend_read_bytes_total":  float64(len(in)),
		"ferry_backend_requests_total":    1,
		"ferry_cache_miss_bytes_total":    1,
		"ferry_cache_fetched_bytes_total": float64(len(in)),
		"ferry_fuse_ops_total":            1,
	} {
		if values[name] < atLeast {
			t.Errorf("%s = %v, want at least %v", name, values[name], atLeast)
		}
	}
	moved := false
	for name, v := range values {
		moved = moved || (strings.Contains(name, "bytes") && v > 0)
	}
	if !moved {
		t.Error("no ferry_*bytes* metric moved")
	}

	// The exit summary: one JSON line on stderr matching the task.
	s := parseSummary(t, se.String())
	t.Logf("%d ferry_ families; exit summary: %v", fams, s)
	checks := []struct {
		field string
		ok    func(float64) bool
		want  string
	}{
		{"exit_code", func(v float64) bool { return v == 0 }, "0"},
		{"bytes_uploaded", func(v float64) bool { return v == float64(len(out)) }, strconv.Itoa(len(out))},
		{"objects_uploaded", func(v float64) bool { return v == 1 }, "1"},
		{"bytes_read", func(v float64) bool { return v >= float64(len(in)) && v <= 2*float64(len(in)) }, "about " + strconv.Itoa(len(in))},
		{"bytes_downloaded", func(v float64) bool { return v >= float64(len(in)) }, ">= " + strconv.Itoa(len(in))},
		{"wall_seconds", func(v float64) bool { return v > 0 }, "> 0"},
		{"task_seconds", func(v float64) bool { return v > 0 && v <= s["wall_seconds"] }, "in (0, wall]"},
		{"drain_seconds", func(v float64) bool { return v >= 0 && v <= s["wall_seconds"] }, "in [0, wall]"},
		{"efficiency", func(v float64) bool { return v >= 0 && v < 2 }, "in [0, 2)"},
		{"errors", func(v float64) bool { return v == 0 }, "0"},
		{"not_durable_files", func(v float64) bool { return v == 0 }, "0"},
	}
	s["bytes_read"] = s["bytes_read_cache"] + s["bytes_read_network"]
	if s["passthrough_cold_files"] >= 1 && s["bytes_passthrough"] >= float64(len(in)) && s["bytes_read"] > 0 {
		// Read through a cold passthrough open: ferry saw the reads of the
		// file until it was whole; the kernel read the rest unasked.
		s["bytes_read"] = max(s["bytes_read"], s["bytes_passthrough"])
	}
	for _, c := range checks {
		v, ok := s[c.field]
		if !ok || !c.ok(v) {
			t.Errorf("summary %s = %v (present %v), want %s", c.field, v, ok, c.want)
		}
	}
	if got := e.mustGet("obs/out"); sha(got) != sha(out) {
		t.Error("obs/out in the bucket differs from what the task wrote")
	}
}

// TestPrefetchThenRun warms the cache with "ferry prefetch" (no mount:
// it lists and reads the bucket directly), then runs a task on the same
// cache directory and checks from its summary that every byte it read
// came from the cache.
func TestPrefetchThenRun(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	a, b := randBytes(t, 6<<20+1), randBytes(t, 3<<20)
	e.put("ref/a.fa", a)
	e.put("ref/b.fa", b)
	e.put("ref/c.txt", []byte("not prefetched"))
	e.put("idx/x.bai", randBytes(t, 100_000))

	r := e.ferry(2*time.Minute, "prefetch", "--mount-point", e.mnt, "--cache-dir", e.cache,
		e.path("ref")+"/*.fa", "s3://"+e.bucket+"/idx")
	if r.code != 0 {
		t.Fatalf("ferry prefetch exited %d\nstderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "prefetch done") || !strings.Contains(r.stderr, "files=3") {
		t.Errorf("prefetch did not report 3 files:\n%s", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "s3")); err == nil {
		t.Error("prefetch mounted something")
	}

	res := e.run(fmt.Sprintf("sha256sum %s %s %s", e.path("ref/a.fa"), e.path("ref/b.fa"), e.path("idx/x.bai")))
	if res.code != 0 {
		t.Fatalf("ferry run exited %d\nstderr:\n%s", res.code, res.stderr)
	}
	for _, want := range []string{sha(a), sha(b)} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("wrong content read after prefetch:\n%s", res.stdout)
		}
	}
	s := parseSummary(t, res.stderr)
	t.Logf("prefetch stderr:\n%s\nrun summary: %v", r.stderr, s)
	total := float64(len(a) + len(b) + 100_000)
	// A file read whole from the cache is read by the kernel when the
	// open is a passthrough one (bytes_passthrough), else through ferry.
	if s["bytes_read_network"] != 0 || s["bytes_read_cache"]+s["bytes_passthrough"] < total {
		t.Errorf("after prefetch: %v bytes from the network, %v from cache and %v passed through, want 0 and %v", s["bytes_read_network"], s["bytes_read_cache"], s["bytes_passthrough"], total)
	}

	// Inside a task: prefetch, then read. The task's namespace covers the
	// cache dir, so prefetch reads the file through the mount (its ferry
	// caches it), and the read that follows finds it cached: every byte
	// is fetched once.
	in := randBytes(t, 5<<20+3)
	e.put("inside/big", in)
	res = e.run(fmt.Sprintf("%s prefetch --mount-point %s --cache-dir %s %s && sha256sum %s",
		ferryBin, e.mnt, e.cache, e.path("inside/big"), e.path("inside/big")))
	if res.code != 0 || !strings.Contains(res.stdout, sha(in)) {
		t.Fatalf("prefetch inside a task: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	s = parseSummary(t, res.stderr)
	if s["bytes_downloaded"] < float64(len(in)) || s["bytes_downloaded"] > float64(len(in)) {
		t.Errorf("prefetch inside a task, then a read: %v bytes downloaded, want the file's %d once", s["bytes_downloaded"], len(in))
	}
	if !strings.Contains(res.stderr, "reading the files through the mount") {
		t.Errorf("prefetch inside a task does not say it reads through the mount:\n%s", tailStr(res.stderr, 3000))
	}

	// A path that matches nothing fails with exit 1.
	r = e.ferry(time.Minute, "prefetch", "--mount-point", e.mnt, "--cache-dir", e.cache, e.path("nothing/*.fa"))
	if r.code != 1 || !strings.Contains(r.stderr, "no match") {
		t.Errorf("prefetch of nothing: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// scrape GETs url and returns the body.
func scrape(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return string(body), nil
}

// parseMetrics reads the Prometheus text format: the number of ferry_
// families (# TYPE lines) and, per family, the sum of its samples
// (histograms: of their _count).
func parseMetrics(text string) (families int, sums map[string]float64) {
	sums = map[string]float64{}
	types := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "ferry_") {
			families++
			types[f[2]] = f[3]
			continue
		}
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "ferry_") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			if j := strings.LastIndexByte(line, '}'); j >= 0 {
				rest = strings.TrimSpace(line[j+1:])
			}
			name = name[:i]
		}
		if base, ok := strings.CutSuffix(name, "_count"); ok && types[base] == "histogram" {
			name = base
		} else if types[name] == "" {
			continue // _bucket and _sum lines
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil {
			sums[name] += v
		}
	}
	return families, sums
}

// parseSummary finds the exit summary (the last stderr line that is a
// JSON object of type ferry.summary) and returns its numeric fields,
// those of its objects as "object.field".
func parseSummary(t *testing.T, stderr string) map[string]float64 {
	t.Helper()
	lines := strings.Split(stderr, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["type"] != "ferry.summary" {
			continue
		}
		out := map[string]float64{}
		for k, v := range m {
			switch v := v.(type) {
			case float64:
				out[k] = v
			case map[string]any:
				for k2, v2 := range v {
					if f, ok := v2.(float64); ok {
						out[k+"."+k2] = f
					}
				}
			}
		}
		return out
	}
	t.Fatalf("no exit summary (a JSON line of type ferry.summary) on stderr:\n%s", stderr)
	return nil
}
