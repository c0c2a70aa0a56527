package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/ferry-fs/ferry/internal/nextflow"
	"github.com/ferry-fs/ferry/internal/vfs"
	"github.com/ferry-fs/ferry/pkg/objstore"
)

// ErrCompaction is wrapped by the before-drain error when some declared
// output symlink could not be replaced by its data: Nextflow would then
// read a link object instead of the output.
var ErrCompaction = errors.New("symlink compaction failed")

// beforeDrain stops the tracer (the task has exited) and compacts the
// work dir's output symlinks.
func (n *Nextflow) beforeDrain(ctx context.Context, mountPoint string) error {
	if n.tracer != nil {
		n.tracer.Stop()
	}
	if !n.env.Enabled() || !n.env.CompactSymlinks {
		return nil
	}
	return n.compact(ctx, mountPoint)
}

// compact reads the output patterns of <work>/.command.run through the
// store and materializes every symlink of the work dir that matches one
// (and every symlink below a matching directory); other links stay links.
// The work dirs of a job array's tasks, listed in the array's header, are
// compacted the same way, each with its own .command.run.
func (n *Nextflow) compact(ctx context.Context, mountPoint string) error {
	d := n.getDeps()
	h, done, errs := compactDir(ctx, d, n.env.WorkDir, mountPoint)
	for _, uri := range h.ArrayWorkDirs {
		loc, ok := nextflow.ParseURI(uri)
		if !ok {
			d.log.Warn("array work dir is not an object-store URI: not compacted", "uri", uri)
			continue
		}
		_, dn, de := compactDir(ctx, d, loc, mountPoint)
		done += dn
		errs = append(errs, de...)
	}
	if done > 0 || len(errs) > 0 {
		d.log.Info("symlink compaction", "materialized", done, "failed", len(errs))
	}
	for _, e := range errs {
		d.log.Error(e.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrCompaction, errors.Join(errs...))
	}
	return nil
}

// compactDir compacts one work dir; it returns the dir's header, the
// number of links materialized and the failures.
func compactDir(ctx context.Context, d nextflowDeps, work nextflow.Location, mountPoint string) (nextflow.Header, int, []error) {
	st, err := d.resolve(ctx, work.Scheme, work.Bucket)
	if err != nil {
		return nextflow.Header{}, 0, []error{err}
	}
	run := work.Child(nextflow.CommandRun)
	h, err := nextflow.ReadHeader(ctx, st, run.Key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		d.log.Debug("nothing to compact: no " + run.String())
		return h, 0, nil
	case err != nil:
		return h, 0, []error{fmt.Errorf("reading %s: %w", run, err)}
	case len(h.Outputs) == 0:
		return h, 0, nil
	}
	m, err := nextflow.NewMatcher(h.Outputs)
	if err != nil {
		return h, 0, []error{fmt.Errorf("output patterns of %s: %w", run, err)}
	}
	c := &compaction{fs: d.fs, m: m, work: work.Rel(), mountPoint: mountPoint}
	c.walk(ctx, "", false)
	return h, c.done, c.errs
}

// compaction is one walk of a work dir.
type compaction struct {
	fs         *vfs.FS
	m          *nextflow.Matcher
	work       string // mount-relative work dir
	mountPoint string
	done       int
	errs       []error
}

// walk visits the directory dir (relative to the work dir); all means dir
// is (inside) a matching output directory.
func (c *compaction) walk(ctx context.Context, dir string, all bool) {
	ents, err := c.fs.Readdir(ctx, path.Join(c.work, dir))
	if err != nil {
		c.errs = append(c.errs, fmt.Errorf("listing %s: %w", path.Join(c.work, dir), err))
		return
	}
	for _, e := range ents {
		rel := path.Join(dir, e.Name)
		if dir == "" && e.Name == nextflow.FusionDir {
			continue
		}
		match := all || c.m.Match(rel)
		switch e.Kind {
		case vfs.KindDir:
			if match || c.m.Descend(rel) {
				c.walk(ctx, rel, match)
			}
		default:
			if match {
				c.visit(ctx, rel)
			}
		}
	}
}

// visit materializes rel if it is a symlink. A listing shows durable
// links as plain objects, so the kind is asked for each matching name.
func (c *compaction) visit(ctx context.Context, rel string) {
	p := path.Join(c.work, rel)
	a, err := c.fs.Getattr(ctx, p)
	if err != nil {
		c.errs = append(c.errs, fmt.Errorf("stat %s: %w", p, err))
		return
	}
	if a.Kind != vfs.KindSymlink {
		return
	}
	if err := c.fs.Materialize(ctx, p, c.mountPoint); err != nil {
		c.errs = append(c.errs, err)
		return
	}
	c.done++
}

// afterDrain uploads the task's .command.log, .fusion/trace.json and
// ferry's .fusion.log to the work dir, straight through the store.
func (n *Nextflow) afterDrain(ctx context.Context) error {
	if !n.env.Enabled() {
		return nil
	}
	d := n.getDeps()
	var errs []error
	if err := n.cmdLog.Close(); err != nil {
		errs = append(errs, fmt.Errorf("command log: %w", err))
	}
	tracePath := filepath.Join(n.dir, "trace.json")
	if err := writeTrace(n.tracer, tracePath); err != nil {
		errs = append(errs, fmt.Errorf("trace: %w", err))
	}
	work := n.env.WorkDir
	st, err := d.resolve(ctx, work.Scheme, work.Bucket)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	uploads := []struct{ local, name string }{
		{local: n.cmdLog.Path(), name: nextflow.CommandLog},
		{local: tracePath, name: nextflow.TraceFile},
		{local: n.LogFile(), name: nextflow.FusionLog}, // last: holds the most
	}
	for _, u := range uploads {
		if _, err := os.Stat(u.local); err != nil {
			continue // e.g. no JSON log configured
		}
		key := work.Child(u.name).Key
		opts := objstore.PutOptions{Tags: n.env.Tags.Tags(key)}
		if _, err := nextflow.UploadFile(ctx, st, key, u.local, opts); err != nil {
			errs = append(errs, fmt.Errorf("upload %s: %w", work.Child(u.name), err))
		}
	}
	return errors.Join(errs...)
}

func writeTrace(t *nextflow.Tracer, p string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if err := t.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// uploadSummary stores the exit summary as $FUSION_WORK/.fusion/summary.json.
func (n *Nextflow) uploadSummary(ctx context.Context, sum []byte) error {
	if !n.env.Enabled() || len(sum) == 0 {
		return nil
	}
	local := filepath.Join(n.dir, "summary.json")
	if err := os.WriteFile(local, sum, 0o600); err != nil {
		return err
	}
	work := n.env.WorkDir
	st, err := n.getDeps().resolve(ctx, work.Scheme, work.Bucket)
	if err != nil {
		return err
	}
	key := work.Child(".fusion/summary.json").Key
	_, err = nextflow.UploadFile(ctx, st, key, local, objstore.PutOptions{Tags: n.env.Tags.Tags(key)})
	return err
}
