package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-fs/ferry/internal/cache/block"
	"github.com/ferry-fs/ferry/internal/config"
	"github.com/ferry-fs/ferry/internal/metrics"
	"github.com/ferry-fs/ferry/internal/nextflow"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// Input staging of a Nextflow task: from the moment the mount is up, read
// the task's .command.run (and .command.stage, and for a job array the
// child's .command.run) through the store, collect the inputs its
// staging section links or copies in, and hand them to the block cache's
// Stager, which fetches them in the background. Nothing here can fail the
// task: what cannot be read, parsed, found or fetched is logged once and
// skipped.

const (
	// smallInput: inputs up to this size are staged early and whole.
	smallInput = 16 << 20
	// maxStageObjects bounds the objects staged for one task (directory
	// inputs can hold many).
	maxStageObjects = 10000
	// stageStats is how many inputs are stat'ed (or listed) at once.
	stageStats = 16
)

// indexSuffixes mark index-like inputs, staged early and whole: the
// indexes of BAM/CRAM/VCF/FASTA files, sequence dictionaries, bgzip
// indexes.
var indexSuffixes = []string{".bai", ".crai", ".csi", ".tbi", ".fai", ".idx", ".dict", ".gzi"}

func indexLike(key string) bool {
	k := strings.ToLower(key)
	for _, s := range indexSuffixes {
		if strings.HasSuffix(k, s) {
			return true
		}
	}
	return false
}

// StageSummary is the "stage" object of the exit summary.
type StageSummary struct {
	Inputs  int `json:"inputs"`  // objects found to stage
	Staged  int `json:"staged"`  // staged whole
	Cached  int `json:"cached"`  // cached whole already (nothing fetched)
	Stopped int `json:"stopped"` // staging stopped: the task read past it
	// Skipped counts what was not staged: commands or paths the parser
	// did not follow, inputs outside the mount, missing or denied inputs.
	Skipped     int   `json:"skipped"`
	StagedBytes int64 `json:"staged_bytes"` // fetched before the task read them
	HitBytes    int64 `json:"hit_bytes"`    // of those, read by the task without waiting
	WastedBytes int64 `json:"wasted_bytes"` // of those, never read
	CachedBytes int64 `json:"cached_bytes"` // of the inputs found cached whole
	// Seconds runs from the mount to the last input handled; 0 when the
	// task ended first.
	Seconds float64 `json:"seconds"`
}

// staging is the input staging of one task. A nil *staging is valid and
// does nothing.
type staging struct {
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{} // closed when plan returns
	t0     time.Time

	mu      sync.Mutex    // guards the fields below
	stager  *block.Stager // nil until planned
	skipped int
	final   *StageSummary // set by stop
}

// stageDeps is what staging needs of the running stack.
type stageDeps struct {
	cfg     config.Config
	blocks  *block.Cache
	resolve func(ctx context.Context, scheme, bucket string) (objstore.Store, error)
	log     *slog.Logger
	getenv  func(string) string
}

// stagingWanted reports whether argv is a .command.run to stage for, and
// its location: --stage-inputs on, or auto with FUSION_WORK set.
func stagingWanted(cfg config.Config, argv []string, nf *Nextflow) (nextflow.Location, bool) {
	mode, err := config.ParseSwitch(cfg.StageInputs)
	if err != nil || mode == config.StageOff || (mode == config.StageAuto && !nf.Env().Enabled()) {
		return nextflow.Location{}, false
	}
	return nextflow.LaunchScript(argv, cfg.MountPoint)
}

// startStaging starts staging the inputs of the task argv in the
// background, when it is wanted; it returns nil otherwise.
func startStaging(ctx context.Context, st *stack, argv []string, nf *Nextflow) *staging {
	run, ok := stagingWanted(st.cfg, argv, nf)
	if !ok {
		return nil
	}
	s := newStaging(ctx, stageDeps{cfg: st.cfg, blocks: st.blocks, resolve: st.stores.resolve, log: st.log, getenv: os.Getenv}, run)
	st.obs.stage.Store(s)
	return s
}

func newStaging(ctx context.Context, d stageDeps, run nextflow.Location) *staging {
	ctx, cancel := context.WithCancel(ctx)
	s := &staging{log: d.log, cancel: cancel, done: make(chan struct{}), t0: time.Now()}
	go func() { // owner: s; stop waits for it
		defer close(s.done)
		s.plan(ctx, d, run)
	}()
	return s
}

// plan reads the scripts, finds the inputs and starts the Stager.
func (s *staging) plan(ctx context.Context, d stageDeps, run nextflow.Location) {
	mp := d.cfg.MountPoint
	sc, err := readRunScript(ctx, d, run)
	if err == nil && sc.Array.IndexName != "" {
		var child nextflow.Location
		if child, err = sc.Array.ChildRunScript(d.getenv); err == nil {
			run = child
			sc, err = readRunScript(ctx, d, run)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			d.log.Info("input staging off: cannot read the task's script", "script", run.String(), "err", err.Error())
		}
		return
	}
	stg := sc.Stage
	if stg.StageFile != "" {
		if l, err := nextflow.ParsePath(stg.StageFile, mp); err != nil {
			stg.Skipped = append(stg.Skipped, nextflow.Skipped{Text: stg.StageFile, Reason: "not under the mount"})
		} else if more, err := readStageScript(ctx, d, l, path.Dir(stg.StageFile)); err != nil {
			stg.Skipped = append(stg.Skipped, nextflow.Skipped{Text: stg.StageFile, Reason: err.Error()})
		} else {
			stg.Inputs = append(stg.Inputs, more.Inputs...)
			stg.Skipped = append(stg.Skipped, more.Skipped...)
		}
	}
	skipped := len(stg.Skipped)
	if skipped > 0 {
		first := stg.Skipped[0]
		d.log.Info("input staging: staging commands not followed (the task still runs them)", "count", skipped,
			"first", strings.TrimSpace(fmt.Sprintf("line %d: %s", first.Line, first.Text)), "reason", first.Reason)
		for _, k := range stg.Skipped {
			d.log.Debug("input staging: not followed", "line", k.Line, "text", k.Text, "reason", k.Reason)
		}
	}
	var locs []nextflow.Location
	seen := map[nextflow.Location]bool{}
	for _, in := range stg.Inputs {
		l, err := nextflow.ParsePath(in.Source, mp)
		if err != nil || l.Key == "" {
			d.log.Debug("input staging: input outside the mount ignored", "path", in.Source)
			skipped++
			continue
		}
		if !seen[l] {
			seen[l] = true
			locs = append(locs, l)
		}
	}
	inputs, missing := expandInputs(ctx, d, locs)
	skipped += missing
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skipped = skipped
	if ctx.Err() != nil || len(inputs) == 0 {
		return
	}
	s.stager = d.blocks.Stage(inputs, block.StageOptions{Logger: d.log})
	d.log.Debug("input staging started", "inputs", len(inputs), "skipped", skipped)
}

// readRunScript reads and parses the .command.run at l.
func readRunScript(ctx context.Context, d stageDeps, l nextflow.Location) (nextflow.RunScript, error) {
	rd, err := openScript(ctx, d, l)
	if err != nil {
		return nextflow.RunScript{}, err
	}
	defer rd.Close()
	return nextflow.ParseRunScript(rd, path.Dir(l.Path(d.cfg.MountPoint)))
}

// readStageScript reads and parses the .command.stage at l.
func readStageScript(ctx context.Context, d stageDeps, l nextflow.Location, workDir string) (nextflow.Staging, error) {
	rd, err := openScript(ctx, d, l)
	if err != nil {
		return nextflow.Staging{}, err
	}
	defer rd.Close()
	return nextflow.ParseStageScript(rd, workDir)
}

func openScript(ctx context.Context, d stageDeps, l nextflow.Location) (io.ReadCloser, error) {
	st, err := d.resolve(ctx, l.Scheme, l.Bucket)
	if err != nil {
		return nil, err
	}
	return st.NewReader(ctx, l.Key, 0, -1, objstore.ReadOptions{})
}

// expandInputs stats each location (stageStats at a time) and lists the
// directories among them, returning the objects to stage in order (index
// and small files first, then the larger objects of directories, then
// the others as given; the first three groups staged side by side with
// the download budget's parallelism) and how many
// locations were missing or could not be read (each logged once).
func expandInputs(ctx context.Context, d stageDeps, locs []nextflow.Location) ([]block.StageInput, int) {
	found := make([][]block.StageInput, len(locs))
	failed := make([]bool, len(locs))
	sem := make(chan struct{}, stageStats)
	var wg sync.WaitGroup
	for i, l := range locs {
		sem <- struct{}{}
		wg.Add(1)
		go func() { // owner: expandInputs, which waits on wg
			defer wg.Done()
			defer func() { <-sem }()
			objs, st, dir, err := expandInput(ctx, d, l)
			if err != nil {
				failed[i] = true
				if ctx.Err() == nil {
					d.log.Info("input staging skipped an input", "object", l.String(), "reason", skipReason(err), "err", err.Error())
				}
				return
			}
			for _, o := range objs {
				ref := block.Ref{Store: st, StoreID: l.Scheme + "/" + l.Bucket, Key: o.Key, Version: o.Version, Size: o.Size}
				// A directory's objects are staged side by side, whatever their size.
				found[i] = append(found[i], block.StageInput{Ref: ref, Early: dir || indexLike(o.Key) || o.Size <= smallInput})
			}
		}()
	}
	wg.Wait()
	var all []block.StageInput
	missing := 0
	for i := range locs {
		if failed[i] {
			missing++
		}
		all = append(all, found[i]...)
	}
	if len(all) > maxStageObjects {
		d.log.Info("input staging: too many input objects, staging the first ones", "objects", len(all), "limit", maxStageObjects)
		all = all[:maxStageObjects]
	}
	rank := func(in block.StageInput) int {
		switch {
		case in.Early && indexLike(in.Ref.Key):
			return 0
		case in.Early && in.Ref.Size <= smallInput:
			return 1
		case in.Early:
			return 2 // a directory's larger objects
		}
		return 3
	}
	slices.SortStableFunc(all, func(a, b block.StageInput) int { return rank(a) - rank(b) })
	return all, missing
}

// skipReason names the kind of a failure to stat an input.
func skipReason(err error) string {
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return "not found"
	case errors.Is(err, objstore.ErrPermission):
		return "permission denied"
	}
	return "error"
}

// expandInput returns the object at l, or the objects below it when it is
// a directory (dir; directory markers and empty objects left out).
func expandInput(ctx context.Context, d stageDeps, l nextflow.Location) (objs []objstore.ObjectInfo, st objstore.Store, dir bool, err error) {
	st, err = d.resolve(ctx, l.Scheme, l.Bucket)
	if err != nil {
		return nil, nil, false, err
	}
	info, err := st.Stat(ctx, l.Key)
	if err == nil {
		return []objstore.ObjectInfo{info}, st, false, nil
	}
	if !errors.Is(err, objstore.ErrNotFound) {
		return nil, nil, false, err
	}
	all, _, lerr := objstore.ListAll(ctx, st, objstore.ListOptions{Prefix: l.Key + "/"})
	if lerr != nil {
		return nil, nil, false, lerr
	}
	out := files(all)
	if len(out) == 0 {
		return nil, nil, false, err // the Stat's "not found"
	}
	return out, st, true, nil
}

// stop ends the staging (the task exited) and settles its accounting;
// the summary and metrics keep the final figures. Safe on nil and more
// than once.
func (s *staging) stop() {
	if s == nil {
		return
	}
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.final != nil {
		return
	}
	sum := &StageSummary{Skipped: s.skipped}
	if s.stager != nil {
		st := s.stager.Stop()
		fill(sum, st)
		if !st.Finished.IsZero() {
			sum.Seconds = st.Finished.Sub(s.t0).Seconds()
		}
	}
	s.final = sum
	s.log.Info("input staging", "inputs", sum.Inputs, "staged_bytes", sum.StagedBytes, "hit_bytes", sum.HitBytes,
		"wasted_bytes", sum.WastedBytes, "cached_bytes", sum.CachedBytes, "skipped", sum.Skipped)
}

func fill(sum *StageSummary, st block.StageStats) {
	sum.Inputs, sum.Staged, sum.Cached, sum.Stopped = st.Inputs, st.Staged, st.Cached, st.Stopped
	sum.Skipped += st.Failed
	sum.StagedBytes, sum.HitBytes, sum.WastedBytes, sum.CachedBytes = st.StagedBytes, st.HitBytes, st.WastedBytes, st.CachedBytes
}

// summary returns the final figures (nil before stop, or for nil).
func (s *staging) summary() *StageSummary {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.final == nil {
		return nil
	}
	c := *s.final
	return &c
}

// snapshot returns the counters for /metrics: live while staging runs,
// final after stop.
func (s *staging) snapshot() metrics.StageSnapshot {
	if s == nil {
		return metrics.StageSnapshot{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum StageSummary
	switch {
	case s.final != nil:
		sum = *s.final
	case s.stager != nil:
		fill(&sum, s.stager.Stats())
	}
	return metrics.StageSnapshot{StagedBytes: sum.StagedBytes, HitBytes: sum.HitBytes, WastedBytes: sum.WastedBytes}
}
