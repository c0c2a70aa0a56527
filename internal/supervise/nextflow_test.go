package supervise

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/meta"
	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/nextflow"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/internal/writeback"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// nfEnv is the stack below the mount on a mem bucket s3://bkt, with a
// Nextflow contract whose work dir is s3://bkt/work/ab/cdef.
type nfEnv struct {
	t     *testing.T
	st    *mem.Store
	fs    *vfs.FS
	wb    *writeback.Manager
	nf    *Nextflow
	hooks Hooks
	logs  *bytes.Buffer
	// ord, when set before use, is the store seen by the stack.
	ord *orderStore
}

const nfWork = "/fusion/s3/bkt/work/ab/cdef"

func newNFEnv(t *testing.T, env map[string]string) *nfEnv {
	t.Helper()
	e := &nfEnv{t: t, st: mem.New(mem.Options{Bucket: "bkt"}), logs: &bytes.Buffer{}}
	cfg := config.Defaults()
	cfg.CacheDir = t.TempDir()
	cfg.MaxMountRetries = 2
	nf, err := NewNextflow(NextflowConfig{Getenv: func(k string) string { return env[k] }, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nf.Close(); err != nil {
			t.Error(err)
		}
	})
	nf.wait.Initial = time.Millisecond
	e.nf = nf
	e.hooks = nf.hooks(Hooks{})
	resolve := func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
		if scheme == "s3" && bucket == "bkt" {
			if e.ord != nil {
				return e.ord, nil
			}
			return e.st, nil
		}
		return nil, objstore.ErrNoBucket
	}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.wb, err = writeback.New(context.Background(), writeback.Config{
		Dir: filepath.Join(cfg.CacheDir, "writeback"), MinFreeBytes: -1, Logger: log,
		OrderLast: e.hooks.OrderLast, PutOptions: e.hooks.PutOptions,
	}, resolve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.wb.Close() })
	mc, err := meta.New(meta.Config{StatTTL: time.Minute, ListTTL: time.Minute, NegativeTTL: time.Minute, MaxEntries: 10000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mc.Close)
	e.fs = vfs.New(vfs.Options{}, vfs.Deps{Resolve: resolve, Writeback: e.wb, Meta: mc, Logger: log})
	t.Cleanup(e.fs.Close)
	nf.setDeps(nextflowDeps{fs: e.fs, resolve: resolve, log: log})
	return e
}

func (e *nfEnv) put(key, body string) {
	e.t.Helper()
	if _, err := e.st.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *nfEnv) get(key string) (string, map[string]string, bool) {
	e.t.Helper()
	rd, err := e.st.NewReader(context.Background(), key, 0, -1, objstore.ReadOptions{})
	if errors.Is(err, objstore.ErrNotFound) {
		return "", nil, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b), rd.Info().Metadata, true
}

// task plays what .command.run does in the work dir, through the vfs.
func (e *nfEnv) task() {
	e.t.Helper()
	ctx := context.Background()
	w := "s3/bkt/work/ab/cdef"
	for _, l := range []struct{ link, target string }{
		{link: w + "/sample.txt", target: "/fusion/s3/bkt/inputs/sample.txt"}, // staged input (ln -sfn)
		{link: w + "/ref.txt", target: "/fusion/s3/bkt/inputs/ref.txt"},       // staged input, not an output
		{link: w + "/out.txt", target: "sample.txt"},                          // output re-emitting an input
		{link: w + "/results", target: "/fusion/s3/bkt/inputs/dir"},           // directory output
	} {
		if err := e.fs.Symlink(ctx, l.link, l.target); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.fs.Mkdir(ctx, w+"/sub"); err != nil {
		e.t.Fatal(err)
	}
	if err := e.fs.Symlink(ctx, w+"/sub/a.csv", "../ref.txt"); err != nil {
		e.t.Fatal(err)
	}
	for name, body := range map[string]string{".exitcode": "0", "real.txt": "made here"} {
		h, err := e.fs.Create(ctx, w+"/"+name, 0o644, vfs.OpenFlags{Write: true})
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := h.Write([]byte(body), 0); err != nil {
			e.t.Fatal(err)
		}
		if err := h.Release(); err != nil {
			e.t.Fatal(err)
		}
	}
}

const nfCommandRun = `#!/bin/bash
NXF_CHDIR=/fusion/s3/bkt/work/ab/cdef
### ---
### name: 'FORWARD (1)'
### outputs:
### - 'out.txt'
### - 'results'
### - 'sub/*.csv'
### - 'real.txt'
### ...
set -e
`

func TestNextflowTaskLifecycle(t *testing.T) {
	e := newNFEnv(t, map[string]string{nextflow.VarWork: nfWork, nextflow.VarTags: nextflow.DefaultTags})
	ctx := context.Background()
	e.put("work/ab/cdef/.command.run", nfCommandRun)
	e.put("work/ab/cdef/.command.sh", "echo hi")
	e.put("inputs/sample.txt", "SAMPLE")
	e.put("inputs/ref.txt", "REF")
	e.put("inputs/dir/x", "X")
	e.put("inputs/dir/y/z", "Z")

	if code, ok := e.nf.prepare(ctx, []string{"bash", nfWork + "/.command.run"}); !ok {
		t.Fatalf("prepare = %d", code)
	}
	stdout, stderr := &bytes.Buffer{}, &bytes.Buffer{}
	taskOut, taskErr := e.nf.taskOutput(stdout, stderr)
	io.WriteString(taskOut, "hello\n")
	io.WriteString(taskErr, "oops\n")
	e.task()

	// What finish does: before-drain hook, stop, drain, after-drain hook.
	if err := e.hooks.BeforeDrain(ctx, "/fusion"); err != nil {
		t.Fatalf("BeforeDrain: %v\n%s", err, e.logs)
	}
	e.wb.Stop()
	if err := e.wb.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.hooks.AfterDrain(ctx, "/fusion"); err != nil {
		t.Fatalf("AfterDrain: %v\n%s", err, e.logs)
	}

	meta := map[string]string{"nextflow.io/metadata": "true"}
	temp := map[string]string{"nextflow.io/temporary": "true"}
	tests := []struct {
		key      string
		body     string // "" = only check presence
		link     bool   // still a symlink object
		tags     map[string]string
		notExist bool
	}{
		{key: "work/ab/cdef/out.txt", body: "SAMPLE"},
		{key: "work/ab/cdef/results/x", body: "X"},
		{key: "work/ab/cdef/results/y/z", body: "Z"},
		{key: "work/ab/cdef/results", notExist: true},
		{key: "work/ab/cdef/sub/a.csv", body: "REF"},
		{key: "work/ab/cdef/sample.txt", link: true},
		{key: "work/ab/cdef/ref.txt", link: true},
		{key: "work/ab/cdef/real.txt", body: "made here", tags: temp},
		{key: "work/ab/cdef/.exitcode", body: "0", tags: meta},
		{key: "work/ab/cdef/.command.log", body: "hello\noops\n", tags: meta},
		{key: "work/ab/cdef/.fusion/trace.json", tags: temp},
	}
	for _, tc := range tests {
		body, md, ok := e.get(tc.key)
		switch {
		case tc.notExist:
			if ok {
				t.Errorf("%s should not exist", tc.key)
			}
			continue
		case !ok:
			t.Errorf("%s is missing", tc.key)
			continue
		case tc.body != "" && body != tc.body:
			t.Errorf("%s = %q, want %q", tc.key, body, tc.body)
		}
		if _, isLink := md[vfs.SymlinkMeta]; isLink != tc.link {
			t.Errorf("%s: symlink object = %v, want %v", tc.key, isLink, tc.link)
		}
		if tc.tags != nil {
			if got, _ := e.st.Tags(tc.key); !equalMaps(got, tc.tags) {
				t.Errorf("%s tags = %v, want %v", tc.key, got, tc.tags)
			}
		}
	}
	if stdout.String() != "hello\n" || stderr.String() != "oops\n" {
		t.Errorf("echo: stdout %q stderr %q", stdout, stderr)
	}
	trace, _, _ := e.get("work/ab/cdef/.fusion/trace.json")
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trace), &doc); err != nil || doc["proc"] == nil || string(doc["gpu"]) != "{}" {
		t.Errorf("trace.json = %s (%v)", trace, err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestNextflowPrepare(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		argv     []string
		present  bool
		wantCode int
		wantOK   bool
	}{
		{name: "script present", env: map[string]string{nextflow.VarWork: nfWork},
			argv: []string{"bash", nfWork + "/.command.run"}, present: true, wantOK: true},
		{name: "script never appears", env: map[string]string{nextflow.VarWork: nfWork},
			argv: []string{"bash", nfWork + "/.command.run"}, wantCode: ExitNoCommand},
		{name: "bucket unknown", env: map[string]string{nextflow.VarWork: nfWork},
			argv: []string{"bash", "/fusion/s3/nope/w/.command.run"}, wantCode: ExitStartFailure},
		{name: "not the launcher", env: map[string]string{nextflow.VarWork: nfWork},
			argv: []string{"sh", "-c", "true"}, wantOK: true},
		{name: "not a nextflow task", env: map[string]string{},
			argv: []string{"bash", nfWork + "/.command.run"}, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newNFEnv(t, tc.env)
			if tc.present {
				e.put("work/ab/cdef/.command.sh", "true")
			}
			code, ok := e.nf.prepare(context.Background(), tc.argv)
			if code != tc.wantCode || ok != tc.wantOK {
				t.Fatalf("prepare = %d, %v; want %d, %v\n%s", code, ok, tc.wantCode, tc.wantOK, e.logs)
			}
		})
	}
}

func TestNextflowHooks(t *testing.T) {
	var nilNF *Nextflow
	base := Hooks{OrderLast: func(k string) bool { return k == "x/last" }}
	if h := nilNF.hooks(base); h.PutOptions != nil || !h.OrderLast("x/last") {
		t.Fatal("a nil Nextflow must return the base hooks")
	}
	if o, e := nilNF.taskOutput(nil, io.Discard); o != nil || e != io.Discard {
		t.Fatal("a nil Nextflow must not wrap the task's output")
	}
	if code, ok := nilNF.prepare(context.Background(), []string{"true"}); !ok || code != 0 {
		t.Fatal("a nil Nextflow must not stop the task")
	}
	if nilNF.Close() != nil || nilNF.LogFile() != "" || nilNF.Env() != nil {
		t.Fatal("nil Nextflow accessors")
	}
	e := newNFEnv(t, map[string]string{nextflow.VarTags: "[*.bam](kind=bam)"})
	h := e.nf.hooks(base)
	tests := []struct {
		key  string
		last bool
		tags map[string]string
	}{
		{key: "work/ab/.exitcode", last: true},
		{key: ".exitcode", last: true},
		{key: "x/last", last: true},
		{key: "work/ab/.exitcode.tmp"},
		{key: "work/ab/a.bam", tags: map[string]string{"kind": "bam"}},
	}
	for _, tc := range tests {
		if got := h.OrderLast(tc.key); got != tc.last {
			t.Errorf("OrderLast(%q) = %v", tc.key, got)
		}
		got := h.PutOptions(writeback.Target{Scheme: "s3", Bucket: "b", Key: tc.key})
		if !equalMaps(got.Tags, tc.tags) {
			t.Errorf("PutOptions(%q).Tags = %v, want %v", tc.key, got.Tags, tc.tags)
		}
	}
	// Without a work dir the drain hooks do nothing.
	if err := h.BeforeDrain(context.Background(), "/fusion"); err != nil {
		t.Fatal(err)
	}
	if err := h.AfterDrain(context.Background(), "/fusion"); err != nil {
		t.Fatal(err)
	}
	if e.nf.LogFile() != "" {
		t.Fatal("no work dir: no log file")
	}
}

func TestNewNextflowErrors(t *testing.T) {
	cfg := config.Defaults()
	cfg.CacheDir = t.TempDir()
	for name, env := range map[string]map[string]string{
		"bad tags":     {nextflow.VarTags: "[*](nope)"},
		"bad work dir": {nextflow.VarWork: "/data/x"},
	} {
		if _, err := NewNextflow(NextflowConfig{Getenv: func(k string) string { return env[k] }, Config: cfg}); err == nil {
			t.Errorf("%s: NewNextflow should fail", name)
		}
	}
	env := map[string]string{nextflow.VarWork: nfWork}
	nf, err := NewNextflow(NextflowConfig{Getenv: func(k string) string { return env[k] }, Environ: []string{"FUSION_WHAT=1"}, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	nf.LogEnv(slog.New(slog.NewTextHandler(&logs, nil)))
	if !strings.Contains(logs.String(), "FUSION_WHAT") {
		t.Errorf("unknown variable not logged: %s", logs.String())
	}
	dir := filepath.Dir(nf.LogFile())
	if err := nf.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("private dir left behind: %v", err)
	}
}

func TestNextflowCompaction(t *testing.T) {
	const run = "### ---\n### outputs:\n### - 'gone.txt'\n### - 'ok.txt'\n### ...\n"
	tests := []struct {
		name    string
		env     map[string]string
		run     string // .command.run ("" = none)
		wantErr error
		okData  bool // ok.txt holds data after the hook
	}{
		{name: "a dangling output fails, the others are done", env: map[string]string{nextflow.VarWork: nfWork},
			run: run, wantErr: ErrCompaction, okData: true},
		{name: "compaction turned off", env: map[string]string{nextflow.VarWork: nfWork, nextflow.VarCompactSymlink: "false"},
			run: run},
		{name: "no .command.run", env: map[string]string{nextflow.VarWork: nfWork}},
		{name: "bad output pattern", env: map[string]string{nextflow.VarWork: nfWork},
			run: "### ---\n### outputs:\n### - '[x'\n### ...\n", wantErr: ErrCompaction},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newNFEnv(t, tc.env)
			ctx := context.Background()
			if tc.run != "" {
				e.put("work/ab/cdef/.command.run", tc.run)
			}
			e.put("inputs/sample.txt", "SAMPLE")
			for link, target := range map[string]string{"gone.txt": "missing", "ok.txt": "/fusion/s3/bkt/inputs/sample.txt"} {
				if err := e.fs.Symlink(ctx, "s3/bkt/work/ab/cdef/"+link, target); err != nil {
					t.Fatal(err)
				}
			}
			err := e.hooks.BeforeDrain(ctx, "/fusion")
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("BeforeDrain = %v, want %v", err, tc.wantErr)
			}
			a, err := e.fs.Getattr(ctx, "s3/bkt/work/ab/cdef/ok.txt")
			if err != nil || (a.Kind == vfs.KindFile) != tc.okData {
				t.Fatalf("ok.txt = %+v, %v; want data %v", a, err, tc.okData)
			}
		})
	}
}

// TestNextflowCompactionJobArray: FUSION_WORK is the array's dir; each
// task's work dir listed in its header is compacted with its own outputs.
func TestNextflowCompactionJobArray(t *testing.T) {
	e := newNFEnv(t, map[string]string{nextflow.VarWork: "/fusion/s3/bkt/work/arr/ay"})
	ctx := context.Background()
	e.put("work/arr/ay/.command.run", "### ---\n### array:\n###   index-name: AWS_BATCH_JOB_ARRAY_INDEX\n###   index-start: 0\n"+
		"###   work-dirs:\n###   - s3://bkt/work/ab/cdef\n###   - s3://bkt/work/ab/none\n###   - file:///local\n### ...\n")
	e.put("work/ab/cdef/.command.run", "### ---\n### outputs:\n### - 'ok.txt'\n### ...\n")
	e.put("inputs/sample.txt", "SAMPLE")
	if err := e.fs.Symlink(ctx, "s3/bkt/work/ab/cdef/ok.txt", "/fusion/s3/bkt/inputs/sample.txt"); err != nil {
		t.Fatal(err)
	}
	if err := e.hooks.BeforeDrain(ctx, "/fusion"); err != nil {
		t.Fatalf("BeforeDrain: %v\n%s", err, e.logs)
	}
	if body, md, _ := e.get("work/ab/cdef/ok.txt"); body != "SAMPLE" || md[vfs.SymlinkMeta] != "" {
		t.Fatalf("ok.txt = %q %v", body, md)
	}
}
