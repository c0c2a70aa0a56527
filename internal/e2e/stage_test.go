package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/testenv"
)

// stageRun is a Nextflow-shaped .command.run whose nxf_main waits for
// $STAGE_GO (a local file the test creates) before nxf_stage runs, so the
// test can look at the cache before the task touches its inputs.
// %[1]s is the work dir, %[2]s the staging commands.
const stageRun = `#!/bin/bash
NXF_CHDIR=%[1]s
### ---
### name: 'ALIGN (sample 1)'
### outputs:
### - 'result.txt'
### ...
set -e
set -u
on_exit() { exit_status=${nxf_main_ret:=$?}; printf -- $exit_status > %[1]s/.exitcode; exit $exit_status; }
nxf_launch() { /bin/bash -ue %[1]s/.command.sh; }
nxf_stage() {
    true
    # stage input files
%[2]s
}
nxf_main() {
    trap on_exit EXIT
    [[ "${NXF_CHDIR:-}" ]] && cd "$NXF_CHDIR"
    touch %[1]s/.command.begin
    while [ ! -e "$STAGE_GO" ]; do sleep 0.05; done
    nxf_stage
    (set -o pipefail; (nxf_launch | tee .command.out) 3>&1 1>&2 2>&3 | tee .command.err) 3>&1 1>&2 2>&3 &
    pid=$!; wait $pid || nxf_main_ret=$?
}
nxf_main
`

// stageTask is one staged Nextflow task run through "fusion".
type stageTask struct {
	e      *s3env
	work   string // work dir key
	inputs map[string][]byte
	env    []string // extra environment
	goFile string
	cmd    *exec.Cmd
	out    syncBuffer // ferry's and the task's output
}

// syncBuffer is a bytes.Buffer that the process's output goroutine and
// the test may use at once.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newStageTask(e *s3env, stage, script string, inputs map[string][]byte) *stageTask {
	k := &stageTask{e: e, work: "work/5a/9e77c1", inputs: inputs, goFile: filepath.Join(e.t.TempDir(), "go")}
	for key, data := range inputs {
		e.put(key, data)
	}
	wd := e.path(k.work)
	e.put(k.work+"/.command.run", []byte(fmt.Sprintf(stageRun, wd, stage)))
	e.put(k.work+"/.command.sh", []byte(script))
	return k
}

// start launches "fusion bash <work>/.command.run" with a 1 GiB cache.
func (k *stageTask) start(ctx context.Context) {
	t := k.e.t
	fusion := filepath.Join(t.TempDir(), "fusion")
	if err := os.Symlink(ferryBin, fusion); err != nil {
		t.Fatal(err)
	}
	wd := k.e.path(k.work)
	k.cmd = exec.CommandContext(ctx, fusion, fusion, "bash", wd+"/.command.run")
	k.cmd.Env = append(append(append([]string{}, k.e.env...), k.env...),
		"FERRY_MOUNT_POINT="+k.e.mnt, "FUSION_CACHE_LOCATION="+k.e.cache, "FUSION_CACHE_SIZE=1024M",
		"FUSION_WORK="+wd, "STAGE_GO="+k.goFile, "FUSION_LOG_LEVEL=debug")
	k.cmd.Stdout, k.cmd.Stderr = &k.out, &k.out
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// release lets the task run and waits for it; it returns the exit code.
func (k *stageTask) release() int {
	if err := os.WriteFile(k.goFile, nil, 0o644); err != nil {
		k.e.t.Fatal(err)
	}
	k.cmd.Wait()
	return k.cmd.ProcessState.ExitCode()
}

// cached returns how many bytes of key the cache directory holds, seen
// by a second block cache on the same directory (as another ferry on the
// node would).
func (k *stageTask) cached(c *block.Cache, key string) int64 {
	info, err := k.e.stat(key)
	if err != nil {
		k.e.t.Fatal(err)
	}
	return c.Cached(block.Ref{StoreID: k.e.scheme + "/" + k.e.bucket, Key: key, Version: info.Version, Size: info.Size})
}

// summary reads the "stage" object of .fusion/summary.json (nil if none).
func (k *stageTask) summary() map[string]float64 {
	var sum struct {
		Stage map[string]float64 `json:"stage"`
	}
	if err := json.Unmarshal(k.e.mustGet(k.work+"/.fusion/summary.json"), &sum); err != nil {
		k.e.t.Fatalf("summary.json: %v", err)
	}
	return sum.Stage
}

// TestNextflowStaging: the inputs named by nxf_stage (symlinks, a copy, a
// directory, names with spaces and parentheses, an index) are in the
// cache before the task reads them; the parts staging cannot follow (a
// missing input, a $variable, a path outside the mount) are skipped and
// the task runs as usual; the summary and /metrics say what was staged.
// On each backend (the versions of listed and stat'ed objects must match
// what the task's opens see).
func TestNextflowStaging(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testNextflowStaging)
}

func testNextflowStaging(t *testing.T, e *s3env) {
	inputs := map[string][]byte{
		"data/sample 1 (a).bam":     randBytes(t, 12<<20+5),
		"data/sample 1 (a).bam.bai": randBytes(t, 300<<10),
		"ref/genome/chr1.fa":        randBytes(t, 5<<20),
		"ref/genome/chr1.fa.fai":    randBytes(t, 1000),
		"data/copied.txt":           randBytes(t, 2<<20),
	}
	p := func(key string) string {
		return strings.NewReplacer(" ", `\ `, "(", `\(`, ")", `\)`).Replace(e.path(key))
	}
	stage := strings.Join([]string{
		`    rm -f sample\ 1\ \(a\).bam`,
		`    ln -s ` + p("data/sample 1 (a).bam") + ` sample\ 1\ \(a\).bam`,
		`    ln -s ` + p("data/sample 1 (a).bam.bai") + ` sample\ 1\ \(a\).bam.bai`,
		`    ln -s ` + p("ref/genome") + ` genome`,
		`    cp -fRL ` + p("data/copied.txt") + ` copied.txt`,
		`    ln -s ` + p("data/missing.txt") + ` missing.txt`,
		`    ln -s ${NXF_CHDIR}/../../../data/copied.txt via_var.txt`,
		`    ln -s /etc/hostname hostname`,
	}, "\n")
	script := "#!/bin/bash -ue\nsha256sum 'sample 1 (a).bam' 'sample 1 (a).bam.bai' genome/chr1.fa genome/chr1.fa.fai copied.txt via_var.txt > result.txt\n"
	k := newStageTask(e, stage, script, inputs)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	k.env = []string{fmt.Sprintf("FERRY_METRICS_ADDR=127.0.0.1:%d", port)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k.start(ctx)
	c, err := block.New(block.Config{Dir: filepath.Join(e.cache, "blocks"), MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var total int64
	for key, data := range inputs {
		total += int64(len(data))
		deadline := time.Now().Add(time.Minute)
		for k.cached(c, key) != int64(len(data)) {
			if time.Now().After(deadline) || k.cmd.ProcessState != nil {
				t.Fatalf("%s: %d of %d bytes cached before the task reads it\n%s", key, k.cached(c, key), len(data), tailStr(k.out.String(), 4000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// /metrics counts them as staged.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		m, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			t.Fatal(err)
		}
		if _, v := parseMetrics(m); v["ferry_stage_staged_bytes_total"] == float64(total) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("ferry_stage_staged_bytes_total = %v, want %d", v["ferry_stage_staged_bytes_total"], total)
		}
	}
	if code := k.release(); code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, tailStr(k.out.String(), 4000))
	}
	result := string(e.mustGet(k.work + "/result.txt"))
	for name, key := range map[string]string{"sample 1 (a).bam": "data/sample 1 (a).bam", "genome/chr1.fa": "ref/genome/chr1.fa", "copied.txt": "data/copied.txt"} {
		if !strings.Contains(result, sha(inputs[key])+"  "+name) {
			t.Errorf("result.txt lacks the sum of %s:\n%s", name, result)
		}
	}
	sum := k.summary()
	if sum["inputs"] != 5 || sum["staged"] != 5 || sum["staged_bytes"] != float64(total) || sum["skipped"] != 3 {
		t.Errorf("stage summary %v, want 5 inputs staged (%d bytes), 3 skipped", sum, total)
	}
	// The task reads every staged input whole: each staged byte is a hit.
	if sum["hit_bytes"] != sum["staged_bytes"] || sum["wasted_bytes"] != 0 {
		t.Errorf("hits %v, wasted %v, staged %v: want every staged byte hit", sum["hit_bytes"], sum["wasted_bytes"], sum["staged_bytes"])
	}
	log := k.out.String()
	for _, want := range []string{"data/missing.txt", "not followed", "outside the mount"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not mention %q:\n%s", want, tailStr(log, 4000))
		}
	}
}

// denyingProxy answers HEAD and GET of keys ending in suffix with 403
// AccessDenied, and forwards everything else to upstream.
func denyingProxy(t *testing.T, upstream, suffix string) string {
	t.Helper()
	up, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(up)
		pr.Out.Host = pr.In.Host // SigV4 signs it
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, suffix) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			writeS3Error(w, r, http.StatusForbidden, "AccessDenied", "denied by the test")
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestNextflowStagingFailures: staging never fails a task, and can be
// turned off.
func TestNextflowStagingFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stage string
		env   func(e *s3env) []string
		ready func(k *stageTask, c *block.Cache) bool // staging got as far as the case needs
		check func(t *testing.T, k *stageTask, sum map[string]float64)
	}{
		{
			name: "denied input and commands the parser does not follow",
			stage: "    ln -s %[1]s/in/denied.bin denied.bin\n    ln -s %[1]s/in/ok.bin ok.bin\n" +
				"    ls %[1]s/in | grep -q ok && true\n    for f in %[1]s/in/ok*; do ln -sf $f glob_$(basename $f); done",
			env: func(e *s3env) []string {
				return []string{"AWS_S3_ENDPOINT=" + denyingProxy(t, e.srv.Endpoint, "/in/denied.bin")}
			},
			ready: func(k *stageTask, c *block.Cache) bool { return k.cached(c, "in/ok.bin") == 1<<20 },
			check: func(t *testing.T, k *stageTask, sum map[string]float64) {
				if sum["inputs"] != 1 || sum["staged_bytes"] != 1<<20 || sum["skipped"] < 2 {
					t.Errorf("stage summary %v, want ok.bin staged, the rest skipped", sum)
				}
				if !strings.Contains(k.out.String(), "denied.bin") || !strings.Contains(k.out.String(), "permission denied") {
					t.Errorf("the log does not name the denied input:\n%s", tailStr(k.out.String(), 4000))
				}
			},
		},
		{
			name:  "staging section bash runs but the parser cannot read",
			stage: "    ln -s %[1]s/in/ok.bin ok.bin\n    echo 'a \"quote' > /dev/null\ncat <<'EOF' >/dev/null\nit's a here-document\nEOF",
			ready: func(k *stageTask, _ *block.Cache) bool { return strings.Contains(k.out.String(), "input staging off") },
			check: func(t *testing.T, k *stageTask, sum map[string]float64) {
				if sum["inputs"] != 0 || !strings.Contains(k.out.String(), "input staging off") {
					t.Errorf("stage summary %v; want staging off with a log line\n%s", sum, tailStr(k.out.String(), 4000))
				}
			},
		},
		{
			name:  "FERRY_STAGE_INPUTS=off",
			stage: "    ln -s %[1]s/in/ok.bin ok.bin",
			env:   func(*s3env) []string { return []string{"FERRY_STAGE_INPUTS=off"} },
			check: func(t *testing.T, k *stageTask, sum map[string]float64) {
				if sum != nil {
					t.Errorf("staging ran although turned off: %v", sum)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newS3Env(t)
			e.put("in/denied.bin", randBytes(t, 1000))
			stage := fmt.Sprintf(tc.stage, e.path(""))
			k := newStageTask(e, stage, "#!/bin/bash -ue\ncat ok.bin | wc -c > result.txt\nexit 7\n", map[string][]byte{"in/ok.bin": randBytes(t, 1<<20)})
			if tc.env != nil {
				k.env = tc.env(e)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			k.start(ctx)
			if tc.ready != nil {
				c, err := block.New(block.Config{Dir: filepath.Join(e.cache, "blocks"), MaxBytes: 1 << 30})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				for deadline := time.Now().Add(time.Minute); !tc.ready(k, c); time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("staging did not get there\n%s", tailStr(k.out.String(), 4000))
					}
				}
			}
			if code := k.release(); code != 7 {
				t.Fatalf("exit %d, want the task's 7\n%s", code, tailStr(k.out.String(), 4000))
			}
			if got := strings.TrimSpace(string(e.mustGet(k.work + "/result.txt"))); got != "1048576" {
				t.Errorf("result.txt = %q", got)
			}
			tc.check(t, k, k.summary())
		})
	}
}

// TestNextflowStagingArray: in a job array, ferry stages the inputs of the
// array task its container runs (the index variable picks the child's
// .command.run), not those of the other tasks.
func TestNextflowStagingArray(t *testing.T) {
	t.Parallel()
	e := newS3Env(t)
	inputs := map[string][]byte{"in/t0.bin": randBytes(t, 3<<20), "in/t1.bin": randBytes(t, 4<<20+1)}
	k := newStageTask(e, "", "", inputs) // the array's own work dir stages nothing
	var dirs, uris []string
	for i := range 2 {
		key := fmt.Sprintf("work/c%d/child%d", i, i)
		wd := e.path(key)
		dirs = append(dirs, wd)
		uris = append(uris, fmt.Sprintf("%s://%s/%s", e.scheme, e.bucket, key))
		e.put(key+"/.command.run", []byte(fmt.Sprintf(stageRun, wd,
			fmt.Sprintf("    ln -s %s t%d.bin", e.path(fmt.Sprintf("in/t%d.bin", i)), i))))
		e.put(key+"/.command.sh", []byte(fmt.Sprintf("#!/bin/bash -ue\nwc -c < t%d.bin > result.txt\n", i)))
	}
	header := "### name: 'ALIGN (array)'\n### array:\n###   index-name: AWS_BATCH_JOB_ARRAY_INDEX\n###   index-start: 0\n###   work-dirs:\n" +
		"###   - " + uris[0] + "\n###   - " + uris[1] + "\n"
	wd := e.path(k.work)
	e.put(k.work+"/.command.run", []byte(strings.Replace(fmt.Sprintf(stageRun, wd, ""), "### name: 'ALIGN (sample 1)'\n", header, 1)))
	e.put(k.work+"/.command.sh", []byte("#!/bin/bash -ue\narray=( "+strings.Join(dirs, " ")+" )\n"+
		"export nxf_array_task_dir=${array[AWS_BATCH_JOB_ARRAY_INDEX]}\nbash $nxf_array_task_dir/.command.run 2>&1 > $nxf_array_task_dir/.command.log\n"))
	k.env = []string{"AWS_BATCH_JOB_ARRAY_INDEX=1"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k.start(ctx)
	c, err := block.New(block.Config{Dir: filepath.Join(e.cache, "blocks"), MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for deadline := time.Now().Add(time.Minute); k.cached(c, "in/t1.bin") != 4<<20+1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the array task's input was not staged\n%s", tailStr(k.out.String(), 4000))
		}
	}
	if code := k.release(); code != 0 {
		t.Fatalf("exit %d\n%s", code, tailStr(k.out.String(), 4000))
	}
	if got := strings.TrimSpace(string(e.mustGet("work/c1/child1/result.txt"))); got != "4194305" {
		t.Errorf("child 1 result.txt = %q", got)
	}
	if sum := k.summary(); sum["inputs"] != 1 || sum["staged_bytes"] != 4<<20+1 {
		t.Errorf("stage summary %v, want only t1.bin", sum)
	}
	if k.cached(c, "in/t0.bin") != 0 {
		t.Error("the other array task's input was staged")
	}
}
