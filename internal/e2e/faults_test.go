package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore"
)

// testSeed returns the seed named by the environment variable env, or a
// fresh one; the test logs it so that a failure reproduces.
func testSeed(t *testing.T, env string) int64 {
	t.Helper()
	if s := os.Getenv(env); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", env, s, err)
		}
		return n
	}
	return time.Now().UnixNano()
}

// TestFaultProxyKinds checks the fault proxy itself: requests pass with the
// client's Host (so SigV4 holds), and each fault reaches the S3 driver as
// the failure it imitates.
func TestFaultProxyKinds(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	data := randBytes(t, 300<<10)
	e.put("k", data)
	ctx := context.Background()
	for _, tc := range []struct {
		kind    faultKind
		wantErr string // in the error of opening or reading the body; "" for none
	}{
		{kind: faultNone},
		{kind: faultSlowDown, wantErr: "SlowDown"},
		{kind: faultInternal, wantErr: "InternalError"},
		{kind: faultResetRequest, wantErr: "reset"},
		{kind: faultResetResponse, wantErr: "reset"},
		{kind: faultTruncate, wantErr: "EOF"},
		{kind: faultStall},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			rate := 1.0
			if tc.kind == faultNone {
				rate = 0
			}
			p := newFaultProxy(t, faultProxyOptions{Upstream: e.srv.Endpoint, Rate: rate, Kinds: []faultKind{tc.kind}})
			st := e.newStore(p.URL)
			t0 := time.Now()
			var got []byte
			r, err := st.NewReader(ctx, "k", 0, -1, objstore.ReadOptions{})
			if err == nil {
				got, err = readAllErr(r)
			}
			if tc.wantErr == "" {
				if err != nil || sha(got) != sha(data) {
					t.Fatalf("read through the proxy: %d bytes, %v", len(got), err)
				}
				if tc.kind == faultStall && time.Since(t0) < 2*time.Second {
					t.Errorf("a stalled read took only %v", time.Since(t0))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
			}
			if !objstore.Retryable(err) {
				t.Errorf("%v is not retryable", err)
			}
		})
	}
}

func readAllErr(r objstore.Reader) ([]byte, error) {
	defer r.Close()
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// faultWorkload is a task of mixed reads and writes, run both on a local
// directory (the reference) and on the mount: $R is the root, $S holds
// the local sources. It prints checksums of what it reads, relative to $R,
// so the two outputs must be equal.
const faultWorkload = `set -e
cd "$R"
sha256sum in/big1 in/big2 in/app.bin
mkdir -p out/small out/big
cp "$S/l1" out/big/l1
cp "$S/l2" out/big/l2
i=0
while [ $i -lt 200 ]; do
  tail -c +$((i * 17 + 1)) "$S/s" | head -c $((i * 53 + 1)) > out/small/f$i
  i=$((i + 1))
done
sha256sum out/big/l1
mv out/big/l1 out/big/l1.renamed
cat "$S/tail" >> out/big/l2
cat "$S/tail" >> in/app.bin
printf 'PATCH' | dd of=in/big2 bs=1 seek=1000000 conv=notrunc 2>/dev/null
cp in/big1 out/copy-of-big1
mv in/small3 out/moved3
i=0
while [ $i -lt 50 ]; do mv out/small/f$i out/small/g$i; i=$((i + 1)); done
echo more >> out/small/f120
mv out/small out/smalls
ls out/smalls | wc -l
sha256sum in/big2 out/big/l2 in/app.bin out/copy-of-big1
sha256sum out/smalls/g7 out/smalls/f199 out/moved3
`

// faultInputs puts the workload's inputs in the bucket and in ref/in, and
// writes its local sources; it returns the sources dir.
func faultInputs(t *testing.T, e *s3env, ref string, rng *rand.Rand) string {
	t.Helper()
	in := map[string][]byte{
		"in/big1":    seededBytes(rng, 20<<20+rng.Intn(4<<20)),
		"in/big2":    seededBytes(rng, 24<<20+rng.Intn(8<<20)),
		"in/app.bin": seededBytes(rng, 6<<20+13),
	}
	for i := 0; i < 6; i++ {
		in[fmt.Sprintf("in/small%d", i)] = seededBytes(rng, 100+rng.Intn(5000))
	}
	for k, b := range in {
		e.put(k, b)
		p := filepath.Join(ref, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := t.TempDir()
	for name, n := range map[string]int{"l1": 20<<20 + rng.Intn(8<<20), "l2": 16<<20 + rng.Intn(8<<20), "s": 64 << 10, "tail": 3<<20 + 77} {
		if err := os.WriteFile(filepath.Join(src, name), seededBytes(rng, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

func seededBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// runReference runs script under sh with R=ref and S=src and returns its
// stdout.
func runReference(t *testing.T, script, ref, src string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "R="+ref, "S="+src)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	return string(out)
}

// TestFaultsWorkload runs a mixed workload through a proxy that gives 10 %
// of the requests a fault (503 SlowDown, 500, resets on either side, cut
// bodies, multi-second stalls): ferry must exit 0, the task must read
// correct bytes, and the bucket must end byte-identical to a local replay;
// in every read mode (readmode_test.go).
// FERRY_FAULT_SEED reproduces the choice of faults (which request gets
// which still depends on timing); FERRY_FAULT_KINDS=truncate,stall narrows
// them when chasing a failure.
func TestFaultsWorkload(t *testing.T) {
	t.Parallel()
	for _, m := range readModes {
		t.Run("reads "+m, func(t *testing.T) {
			t.Parallel()
			faultsWorkload(t, m)
		})
	}
}

// faultsWorkload is TestFaultsWorkload in read mode m.
func faultsWorkload(t *testing.T, m string) {
	seed := testSeed(t, "FERRY_FAULT_SEED")
	t.Logf("FERRY_FAULT_SEED=%d", seed)
	rng := rand.New(rand.NewSource(seed))
	e := newS3Env(t)
	ref := t.TempDir()
	src := faultInputs(t, e, ref, rng)
	want := runReference(t, faultWorkload, ref, src)

	kinds := faultKindsFromEnv(t)
	p := newFaultProxy(t, faultProxyOptions{Upstream: e.srv.Endpoint, Rate: 0.10, Seed: seed, Kinds: kinds})
	e.extra = []string{"AWS_S3_ENDPOINT=" + p.URL}
	t0 := time.Now()
	r := e.run(`R="`+e.path("")+`" S="`+src+`"`+"\n"+faultWorkload, append([]string{"--part-size", "8MiB"}, readModeFlags(m)...)...)
	p.setEnabled(false)
	t.Logf("ferry exited %d after %v; faults: %s", r.code, time.Since(t0).Round(time.Millisecond), faultSummary(p.stats()))
	if r.code != 0 {
		t.Fatalf("ferry exited %d (seed %d)\nstdout:\n%s\nstderr:\n%s", r.code, seed, r.stdout, tailStr(r.stderr, 6000))
	}
	if r.stdout != want {
		t.Errorf("the task's reads differ from the reference (seed %d)\nmount:\n%s\nreference:\n%s", seed, r.stdout, want)
	}
	tree, err := readTree(ref)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := compareBucket(e, tree, ""); len(diffs) > 0 {
		t.Errorf("bucket differs from the reference (seed %d):\n%s", seed, strings.Join(diffs, "\n"))
	}
	if ups, _ := liveUploads(t, e); len(ups) > 0 {
		t.Errorf("multipart uploads left behind:\n%s", strings.Join(ups, "\n"))
	}
	st := p.stats()
	for k := faultSlowDown; k < numFaultKinds && kinds == nil; k++ {
		if st[k.String()] == 0 {
			t.Errorf("no %s fault was injected: the workload proves less than it claims", k)
		}
	}
}

// TestFaultsOutage cuts the network for several seconds while uploads are
// in flight and the task keeps working on what it staged (stat after the
// kernel's 1 s entry cache expired, new files, the rename of a file not
// uploaded yet): nothing is lost, ferry exits 0.
func TestFaultsOutage(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	rng := rand.New(rand.NewSource(testSeed(t, "FERRY_FAULT_SEED")))
	src := t.TempDir()
	files := map[string][]byte{}
	for name, n := range map[string]int{"before-big": 14<<20 + 3, "before-small": 4000, "during-big": 9<<20 + 1, "during-small": 700, "after": 2<<20 + 5} {
		files[name] = seededBytes(rng, n)
		if err := os.WriteFile(filepath.Join(src, name), files[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in := seededBytes(rng, 5<<20+9)
	e.put("in/data", in)
	p := slowUploads(t, e, 2048) // 2 MB/s: the big uploads are in flight
	e.extra = []string{"AWS_S3_ENDPOINT=" + p.Endpoint}
	g := newGate(t)
	script := g.prologue() + fmt.Sprintf(`cd %[1]s
mkdir -p out
ls out > /dev/null
cp %[2]s/before-big out/before-big
cp %[2]s/before-small out/before-small
touch %[3]s
%[4]s
sleep 1.5
stat -c %%s out/before-big
cp %[2]s/during-big out/during-big
cp %[2]s/during-small out/during-small.tmp
mv out/during-small.tmp out/during-small
sha256sum out/before-big
touch %[5]s
%[6]s
mv out/before-small out/before-small.moved
cp %[2]s/after out/after
sha256sum in/data
`, e.path(""), src, g.path("ready"), g.shWait("down"), g.path("wrote"), g.shWait("back"))
	done := e.startRun(script, "--part-size", "5MiB", "--log-file", g.path("ferry.log"))
	g.wait(t, "ready", 90*time.Second, done)
	p.SetEnabled(t, false)
	down := time.Now()
	g.set(t, "down")
	g.wait(t, "wrote", 60*time.Second, done)
	time.Sleep(time.Until(down.Add(6 * time.Second)))
	p.SetEnabled(t, true)
	g.set(t, "back")
	r := <-done
	if r.code != 0 {
		t.Fatalf("ferry exited %d after a 6 s outage\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, tailStr(r.stderr, 6000))
	}
	for _, w := range []string{sha(files["before-big"]) + "  out/before-big", sha(in) + "  in/data"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("the task read wrong bytes: want %q in\n%s", w, r.stdout)
		}
	}
	for key, name := range map[string]string{"out/before-big": "before-big", "out/before-small.moved": "before-small", "out/during-big": "during-big", "out/during-small": "during-small", "out/after": "after"} {
		got, err := e.get(key)
		if err != nil || sha(got) != sha(files[name]) {
			t.Errorf("%s not intact after the outage: %d bytes, %v", key, len(got), err)
		}
	}
	for _, k := range []string{"out/before-small", "out/during-small.tmp"} {
		if _, err := e.stat(k); err == nil {
			t.Errorf("%s still exists after its rename", k)
		}
	}
	if ups, _ := liveUploads(t, e); len(ups) > 0 {
		t.Errorf("multipart uploads left behind:\n%s", strings.Join(ups, "\n"))
	}
}

// TestFaultsPermanentOutage cuts the network for good before the drain:
// ferry exits 174 naming every path not made durable; a second run on
// the same cache dir, with the network back, makes them all durable.
func TestFaultsPermanentOutage(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	rng := rand.New(rand.NewSource(testSeed(t, "FERRY_FAULT_SEED")))
	app := seededBytes(rng, 6<<20+1)
	e.put("in/app.bin", app)
	e.put("in/clean.txt", []byte("clean object\n"))
	src := t.TempDir()
	want := map[string][]byte{}
	for name, n := range map[string]int{"big.bin": 11<<20 + 7, "small-1.txt": 100, "small-2.txt": 5000, "small-3.txt": 70000, "moved-src.txt": 3000, "tail": 1 << 20} {
		b := seededBytes(rng, n)
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		switch name {
		case "tail":
			want["in/app.bin"] = append(append([]byte{}, app...), b...)
		case "moved-src.txt":
			want["out/moved-dst.txt"] = b
		default:
			want["out/"+name] = b
		}
	}
	p := slowUploads(t, e, 64)
	e.extra = []string{"AWS_S3_ENDPOINT=" + p.Endpoint}
	g := newGate(t)
	script := g.prologue() + fmt.Sprintf(`cd %[1]s
mkdir -p out
for f in big.bin small-1.txt small-2.txt small-3.txt; do cp %[2]s/$f out/$f; done
cp %[2]s/moved-src.txt out/moved-src.txt
mv out/moved-src.txt out/moved-dst.txt
cat %[2]s/tail >> in/app.bin
ln -s small-1.txt out/link-1
touch %[3]s
%[4]s
`, e.path(""), src, g.path("ready"), g.shWait("go"))
	done := e.startRun(script, "--drain-timeout", "8s", "--max-retries", "2", "--part-size", "5MiB", "--log-file", g.path("ferry.log"))
	g.wait(t, "ready", 90*time.Second, done)
	p.SetEnabled(t, false)
	g.set(t, "go")
	var r result
	select {
	case r = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("ferry did not give up within 3 minutes of an 8 s drain timeout")
	}
	if r.code != 174 {
		t.Fatalf("exit %d, want 174\nstderr:\n%s", r.code, tailStr(r.stderr, 6000))
	}
	// Every path not durable now must be named.
	notDurable := 0
	for key, b := range want {
		if got, err := e.get(key); err == nil && sha(got) == sha(b) {
			continue
		}
		notDurable++
		if !strings.Contains(r.stderr, key) {
			t.Errorf("%s is not durable and ferry's log does not name it", key)
		}
	}
	if info, err := e.stat("out/link-1"); err != nil || info.Metadata["ferry-symlink"] != "small-1.txt" {
		notDurable++
		if !strings.Contains(r.stderr, "out/link-1") {
			t.Errorf("symlink out/link-1 is not durable (%v) and ferry's log does not name it", err)
		}
	}
	if notDurable == 0 {
		t.Fatalf("everything was durable before the outage: the test proves nothing")
	}
	t.Logf("%d paths not durable after the first run", notDurable)
	if t.Failed() {
		t.Logf("stderr:\n%s", tailStr(r.stderr, 6000))
	}
	e.extra = nil
	r2 := e.run("true")
	if r2.code != 0 {
		t.Fatalf("second run exited %d\n%s", r2.code, tailStr(r2.stderr, 6000))
	}
	for key, b := range want {
		if got, err := e.get(key); err != nil || sha(got) != sha(b) {
			t.Errorf("%s not intact after the second run: %d bytes, %v", key, len(got), err)
		}
	}
	if info, err := e.stat("out/link-1"); err != nil || info.Metadata["ferry-symlink"] != "small-1.txt" {
		t.Errorf("symlink out/link-1 after the second run: %+v, %v", info.Metadata, err)
	}
	if _, err := e.stat("out/moved-src.txt"); err == nil {
		t.Errorf("out/moved-src.txt exists after its rename")
	}
	if ups, _ := liveUploads(t, e); len(ups) > 0 {
		t.Errorf("multipart uploads left behind:\n%s", strings.Join(ups, "\n"))
	}
}
