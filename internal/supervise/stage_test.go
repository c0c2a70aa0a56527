package supervise

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/nextflow"
	"github.com/ferry-fs/ferry/pkg/objstore"
	"github.com/ferry-fs/ferry/pkg/objstore/mem"
)

// denyStore refuses Stat and reads of the keys in deny.
type denyStore struct {
	objstore.Store
	deny map[string]bool
}

func (s *denyStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if s.deny[key] {
		return objstore.ObjectInfo{}, &objstore.Error{Provider: "mem", Op: "Stat", Key: key, Status: 403, Kind: objstore.ErrPermission}
	}
	return s.Store.Stat(ctx, key)
}

// stageWorld is a mem bucket "b", a block cache and the deps of staging.
type stageWorld struct {
	t     *testing.T
	store *denyStore
	cache *block.Cache
	log   bytes.Buffer
	env   map[string]string
}

func newStageWorld(t *testing.T) *stageWorld {
	t.Helper()
	w := &stageWorld{t: t, store: &denyStore{Store: mem.New(mem.Options{Bucket: "b"}), deny: map[string]bool{}}, env: map[string]string{}}
	c, err := block.New(block.Config{Dir: t.TempDir(), MaxBytes: 1 << 30, MinFreeBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w.cache = c
	return w
}

func (w *stageWorld) put(key string, data []byte) {
	w.t.Helper()
	if _, err := w.store.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *stageWorld) deps() stageDeps {
	cfg := config.Defaults()
	cfg.MountPoint = "/fusion"
	return stageDeps{
		cfg: cfg, blocks: w.cache, log: slog.New(slog.NewTextHandler(&w.log, &slog.HandlerOptions{Level: slog.LevelInfo})),
		getenv: func(k string) string { return w.env[k] },
		resolve: func(ctx context.Context, scheme, bucket string) (objstore.Store, error) {
			if scheme != "s3" || bucket != "b" {
				return nil, fmt.Errorf("no bucket %s/%s: %w", scheme, bucket, objstore.ErrNoBucket)
			}
			return w.store, nil
		},
	}
}

// cached returns how many bytes of key the cache holds.
func (w *stageWorld) cached(key string) int64 {
	info, err := w.store.Store.Stat(context.Background(), key)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.cache.Cached(block.Ref{Store: w.store, StoreID: "s3/b", Key: key, Version: info.Version, Size: info.Size})
}

// stage runs staging for the .command.run at key to the end.
func (w *stageWorld) stage(key string) *StageSummary {
	w.t.Helper()
	s := newStaging(context.Background(), w.deps(), nextflow.Location{Scheme: "s3", Bucket: "b", Key: key})
	<-s.done
	if s.stager != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.stager.Wait(ctx); err != nil {
			w.t.Fatal(err)
		}
	}
	s.stop()
	s.stop()
	sum := s.summary()
	if sum == nil {
		w.t.Fatal("no summary after stop")
	}
	return sum
}

func runScript(stage string) []byte {
	return []byte("#!/bin/bash\nNXF_CHDIR=/fusion/s3/b/work/ab/cd\n### ---\n### name: 'T (1)'\n### ...\nset -e\n" +
		"nxf_stage() {\n    true\n    # stage input files\n" + stage + "}\n\nnxf_main() {\n    nxf_stage\n}\n")
}

func TestStagingPlan(t *testing.T) {
	w := newStageWorld(t)
	inputs := map[string]int{
		"data/my sample (1).bam": 3<<20 + 1, "data/my sample (1).bam.bai": 5000, "ref/genome/chr1.fa": 2 << 20,
		"ref/genome/chr1.fa.fai": 100, "ref/genome/sub/x.dict": 10, "data/copied.vcf.gz": 20 << 20, "chunks/c1.fq": 1000,
		"chunks/c2.fq": 2000, "data/denied.txt": 10, "data/unused.txt": 77,
	}
	for k, n := range inputs {
		w.put(k, bytes.Repeat([]byte{byte(n)}, n))
	}
	w.store.deny["data/denied.txt"] = true
	w.put("work/ab/cd/.command.run", runScript(`    rm -f my\ sample\ \(1\).bam
    ln -s /fusion/s3/b/data/my\ sample\ \(1\).bam my\ sample\ \(1\).bam
    ln -s /fusion/s3/b/data/my\ sample\ \(1\).bam.bai my\ sample\ \(1\).bam.bai
    ln -s /fusion/s3/b/ref/genome genome
    cp -fRL /fusion/s3/b/data/copied.vcf.gz copied.vcf.gz
    ln -s /fusion/s3/b/data/missing.txt missing.txt
    ln -s /fusion/s3/b/data/denied.txt denied.txt
    ln -s /fusion/s3/b/data/my\ sample\ \(1\).bam again.bam
    ln -s $HOME/x x
    ln -s /etc/hostname hostname
    ln -s /fusion/gs/other/x x2
    bash /fusion/s3/b/work/ab/cd/.command.stage
`))
	w.put("work/ab/cd/.command.stage", []byte("rm -f c1.fq\nln -s /fusion/s3/b/chunks/c1.fq c1.fq\nln -s /fusion/s3/b/chunks/c2.fq c2.fq\nln -s /fusion/s3/b/chunks/*.fq .\n"))
	sum := w.stage("work/ab/cd/.command.run")
	var total int64
	for k, n := range inputs {
		want := int64(n)
		if k == "data/denied.txt" || k == "data/unused.txt" {
			want = 0
		} else {
			total += int64(n)
		}
		if got := w.cached(k); got != want {
			t.Errorf("%s: %d bytes cached, want %d", k, got, want)
		}
	}
	// Skipped: $HOME, the glob in .command.stage, /etc/hostname, the
	// other bucket, missing.txt, denied.txt.
	if sum.Inputs != 8 || sum.Staged != 8 || sum.Skipped != 6 || sum.StagedBytes != total || sum.WastedBytes != total || sum.Seconds <= 0 {
		t.Errorf("summary %+v, want 8 inputs staged (%d bytes), 6 skipped", *sum, total)
	}
	for _, want := range []string{"missing.txt", "denied.txt", "permission", "not followed", "count=2"} {
		if !strings.Contains(w.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, w.log.String())
		}
	}
}

func TestStagingArray(t *testing.T) {
	w := newStageWorld(t)
	w.put("in/a.txt", bytes.Repeat([]byte("a"), 1000))
	w.put("in/b.txt", bytes.Repeat([]byte("b"), 2000))
	w.put("work/arr/.command.run", []byte("#!/bin/bash\n### ---\n### name: 'T (array)'\n### array:\n###   index-name: SLURM_ARRAY_TASK_ID\n"+
		"###   index-start: 1\n###   work-dirs:\n###   - s3://b/work/t1\n###   - s3://b/work/t\\ 2\n### ...\nnxf_stage() {\n    true\n}\n"))
	w.put("work/t1/.command.run", runScript("    ln -s /fusion/s3/b/in/a.txt a.txt\n"))
	w.put("work/t 2/.command.run", runScript("    ln -s /fusion/s3/b/in/b.txt b.txt\n"))
	w.env["SLURM_ARRAY_TASK_ID"] = "2"
	sum := w.stage("work/arr/.command.run")
	if w.cached("in/a.txt") != 0 || w.cached("in/b.txt") != 2000 || sum.Inputs != 1 || sum.StagedBytes != 2000 {
		t.Errorf("array task 2 staged %d/%d bytes of a/b: %+v", w.cached("in/a.txt"), w.cached("in/b.txt"), *sum)
	}
	w.env["SLURM_ARRAY_TASK_ID"] = "9"
	if sum := w.stage("work/arr/.command.run"); sum.Inputs != 0 || !strings.Contains(w.log.String(), "outside") {
		t.Errorf("index out of range: %+v\n%s", *sum, w.log.String())
	}
}

// TestStagingNeverFails: a missing, unreadable or malformed script, and a
// script without staging, leave staging off with a log line at most.
func TestStagingNeverFails(t *testing.T) {
	w := newStageWorld(t)
	w.put("w/bad/.command.run", runScript("    ln -s '/fusion/s3/b/x x\n"))
	w.put("w/none/.command.run", []byte("#!/bin/bash\necho no staging\n"))
	w.put("w/junk/.command.run", []byte{0, 1, 2, 255, '\n', '}', '{'})
	w.put("w/denied/.command.run", runScript(""))
	w.store.deny["w/denied/.command.run"] = true
	for _, k := range []string{"w/missing/.command.run", "w/bad/.command.run", "w/none/.command.run", "w/junk/.command.run", "w/denied/.command.run"} {
		w.log.Reset()
		sum := w.stage(k)
		if *sum != (StageSummary{}) {
			t.Errorf("%s: %+v", k, *sum)
		}
		if n := strings.Count(w.log.String(), "\n"); n > 2 {
			t.Errorf("%s: %d log lines:\n%s", k, n, w.log.String())
		}
	}
}

func TestStagingWanted(t *testing.T) {
	cfg := config.Defaults()
	work := &Nextflow{env: &nextflow.Env{Work: "/fusion/s3/b/w"}}
	plain := &Nextflow{env: &nextflow.Env{}}
	launcher := []string{"bash", "/fusion/s3/b/w/.command.run"}
	tests := []struct {
		mode string
		nf   *Nextflow
		argv []string
		want bool
	}{
		{config.StageAuto, work, launcher, true},
		{config.StageAuto, plain, launcher, false},
		{config.StageAuto, nil, launcher, false},
		{config.StageOn, nil, launcher, true},
		{config.StageOn, work, []string{"sh", "-c", "echo"}, false},
		{config.StageOff, work, launcher, false},
		{"bogus", work, launcher, false},
	}
	for _, tc := range tests {
		cfg.StageInputs = tc.mode
		if _, got := stagingWanted(cfg, tc.argv, tc.nf); got != tc.want {
			t.Errorf("mode %s, nextflow %v, argv %v: %v, want %v", tc.mode, tc.nf.Env().Enabled(), tc.argv, got, tc.want)
		}
	}
	var s *staging // nil: staging off
	s.stop()
	if s.summary() != nil || s.snapshot().StagedBytes != 0 {
		t.Error("a nil staging reports something")
	}
}
