package e2e

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// TestReadContent checks sha256 through the mount for objects of several
// sizes, sizes shown by stat, and dd reads at random offsets.
func TestReadContent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testReadContent)
}

func testReadContent(t *testing.T, e *s3env) {
	sizes := []int{0, 1, 4095, 4096, 5<<20 + 1, 40<<20 + 3}
	data := map[string][]byte{}
	for _, n := range sizes {
		k := fmt.Sprintf("k/o%d", n)
		data[k] = randBytes(t, n)
		e.put(k, data[k])
	}
	var script strings.Builder
	for _, n := range sizes {
		fmt.Fprintf(&script, "sha256sum %s; stat -c 'size %%s %%n' %s;", e.path(fmt.Sprintf("k/o%d", n)), e.path(fmt.Sprintf("k/o%d", n)))
	}
	// dd at random offsets of the largest object, including the last bytes.
	big := data[fmt.Sprintf("k/o%d", sizes[len(sizes)-1])]
	rng := rand.New(rand.NewSource(1))
	type probe struct{ skip, count int }
	var probes []probe
	for i := 0; i < 12; i++ {
		probes = append(probes, probe{skip: rng.Intn(len(big) / 4096), count: 1 + rng.Intn(40)})
	}
	probes = append(probes, probe{skip: len(big)/4096 - 1, count: 5})
	for i, p := range probes {
		fmt.Fprintf(&script, "echo dd%d $(dd if=%s bs=4096 skip=%d count=%d 2>/dev/null | sha256sum);", i, e.path(fmt.Sprintf("k/o%d", sizes[len(sizes)-1])), p.skip, p.count)
	}
	out := e.mustRun(script.String())
	for _, n := range sizes {
		k := fmt.Sprintf("k/o%d", n)
		if !strings.Contains(out, sha(data[k])+"  "+e.path(k)) {
			t.Errorf("sha256 of %s wrong or missing:\n%s", k, out)
		}
		if !strings.Contains(out, fmt.Sprintf("size %d %s", n, e.path(k))) {
			t.Errorf("stat size of %s wrong:\n%s", k, out)
		}
	}
	for i, p := range probes {
		lo := p.skip * 4096
		hi := min(lo+p.count*4096, len(big))
		want := fmt.Sprintf("dd%d %s", i, sha(big[lo:hi]))
		if !strings.Contains(out, want) {
			t.Errorf("dd probe %d (skip %d count %d) differs", i, p.skip, p.count)
		}
	}
}

// TestListing checks a paginated listing of many keys, marker objects,
// nested prefixes and a key "a" beside keys under "a/".
func TestListing(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	const n = 2500
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			e.put(fmt.Sprintf("d/f%05d", i), []byte(fmt.Sprint(i)))
		}(i)
	}
	wg.Wait()
	e.put("m/", nil)                   // explicit marker, empty dir
	e.put("n/sub/deep/x", []byte("x")) // implied directories
	out := e.mustRun(fmt.Sprintf(`
echo count=$(ls %[1]s/d | wc -l)
echo m=$(ls -A %[1]s/m | wc -l) mtype=$(stat -c %%F %[1]s/m)
echo deep=$(cat %[1]s/n/sub/deep/x)
echo found=$(find %[1]s/n -type f | wc -l)
echo root=$(ls %[1]s | tr '\n' ' ')
ls %[1]s/nope 2>&1; echo nope=$?
`, e.path("")))
	for _, want := range []string{
		fmt.Sprintf("count=%d", n), "m=0 mtype=directory", "deep=x", "found=1",
		"root=d m n", "nope=2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "No such file") {
		t.Errorf("listing a missing dir should say ENOENT:\n%s", out)
	}
}

// TestExitCodes checks that the task's exit code (and 128+signal) comes
// back, and that a missing command is 127.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	tests := []struct {
		script string
		want   int
	}{
		{script: "exit 0", want: 0},
		{script: "exit 7", want: 7},
		{script: "kill -TERM $$", want: 143},
		{script: "kill -KILL $$", want: 137},
	}
	for _, tt := range tests {
		if r := e.run(tt.script); r.code != tt.want {
			t.Errorf("%q: exit %d, want %d\n%s", tt.script, r.code, tt.want, r.stderr)
		}
	}
	r := e.ferry(60*time.Second, "run", "--mount-point", e.mnt, "--cache-dir", e.cache, "--", "/no/such/binary")
	if r.code != 127 {
		t.Errorf("missing binary: exit %d, want 127\n%s", r.code, r.stderr)
	}
	r = e.ferry(60*time.Second, "run", "--mount-point", "relative/mnt", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "absolute") {
		t.Errorf("bad config: exit %d, want 1 with a clear line\n%s", r.code, r.stderr)
	}
}

// TestDeadEndpoint checks that a read against a dead endpoint fails with
// EIO (never ENOENT) and that ferry logs a line naming the path.
func TestDeadEndpoint(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e.extra = []string{fmt.Sprintf("AWS_S3_ENDPOINT=http://127.0.0.1:%d", port), "FERRY_MAX_RETRIES=2", "FERRY_REQUEST_TIMEOUT=5s"}
	r := e.run(fmt.Sprintf("cat %s 2>&1; echo rc=$?", e.path("k/o1")))
	if strings.Contains(r.stdout, "No such file") {
		t.Fatalf("dead endpoint reported as ENOENT:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "Input/output error") {
		t.Fatalf("dead endpoint: want EIO, got:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, e.bucket) {
		t.Errorf("no log line naming the bucket/path:\n%s", r.stderr)
	}
}

// TestObjectBesideDir checks a key "a" beside keys under "a/" (MinIO cannot
// store both, so this runs on GCS and Azure): the directory wins, nothing
// crashes, and the files below stay readable.
func TestObjectBesideDir(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"gs", "az"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, b)
			e.put("a", []byte("file a"))
			e.put("a/inner", []byte("inner"))
			out := e.mustRun(fmt.Sprintf("echo type=$(stat -c %%F %[1]s/a) inner=$(cat %[1]s/a/inner) ls=$(ls %[1]s | tr '\\n' ,)", e.path("")))
			if !strings.Contains(out, "type=directory inner=inner ls=a,") {
				t.Errorf("got %q", out)
			}
		})
	}
}

// TestTreeWalk walks a tree of 30 directories with find, du and ls -R
// through the mount (the walk-ahead lists siblings in the background),
// with a file created and one removed through the mount in directories
// the walk has not reached yet: every walk sees exactly the tree.
func TestTreeWalk(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	for d := range 30 {
		for f := range 5 {
			e.put(fmt.Sprintf("t/d%02d/f%d", d, f), []byte("x"))
		}
	}
	out := e.mustRun(fmt.Sprintf(`
cd %[1]s
echo find1=$(find t -type f | wc -l)
echo new > t/d25/g; rm t/d27/f0
echo find2=$(find t -type f | wc -l)
echo lsr=$(ls -R t | grep -c '^f\|^g')
echo g=$(cat t/d25/g) f0=$(ls t/d27/f0 2>/dev/null | wc -l)
`, e.path("")))
	for _, want := range []string{"find1=150", "find2=150", "lsr=150", "g=new f0=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
