package writeback

import (
	"os"
	"slices"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestSharedStagingRoot: two managers run on one staging root at once,
// each in a directory of its own. When one stops with files staged (as a
// killed ferry does), a manager started later on the root takes them over
// and uploads them (aborting the multipart upload it recorded), while the
// other one, still running, keeps its own. Managers that stop with
// nothing staged leave nothing behind.
func TestSharedStagingRoot(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.StreamAfter = -1
	e.setFaults(stallUploads())
	dead := e.open(cfg) // its uploads hang until it stops
	e.setFaults(faulty.Config{})
	live := e.open(cfg)
	if dead.j.dir == live.j.dir {
		t.Fatalf("both managers stage in %s", dead.j.dir)
	}
	small, big := pattern(1000, 1), pattern(5*testPart+3, 2)
	writeFile(t, dead, "dead/small", small)
	writeFile(t, dead, "dead/big", big) // multipart: its upload is journaled
	waitFor(t, "the multipart upload to start", func() bool { return e.mem.PendingUploads() >= 1 })
	mine := pattern(2000, 3)
	writeFile(t, live, "live/a", mine)
	drain(t, live)
	e.wantObject("live/a", mine)
	deadDir := dead.j.dir
	dead.Close() // as a kill would: its staging stays

	next := e.open(cfg)
	drain(t, next)
	e.wantObject("dead/small", small)
	e.wantObject("dead/big", big)
	if n := e.mem.PendingUploads(); n != 0 {
		t.Errorf("%d multipart uploads left pending", n)
	}
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("the stopped manager's staging dir is still there: %v", err)
	}
	// The running manager was left alone, and goes on working.
	again := pattern(3000, 4)
	writeFile(t, live, "live/b", again)
	drain(t, live)
	e.wantObject("live/b", again)
	assertStagingEmpty(t, live)
	assertStagingEmpty(t, next)
	live.Close()
	next.Close()
	if left := stagingRootEntries(t, e.dir); len(left) != 0 {
		t.Errorf("staging root holds %v after every manager stopped with nothing staged", left)
	}
}

// TestAdoptLegacyStaging: a staging directory of an older ferry, which
// staged in the root itself, is taken over like a dead manager's.
func TestAdoptLegacyStaging(t *testing.T) {
	e := newEnv(t)
	j, err := openJournal(e.dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.scan(); err != nil {
		t.Fatal(err)
	}
	data := pattern(1500, 5)
	if err := os.WriteFile(j.dataPath("old-1"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := &record{V: recordVersion, ID: "old-1", Seq: 1, State: stateClosed, Target: tgt("legacy/f"), Size: int64(len(data)), Mode: 0o644}
	if err := j.write(r); err != nil {
		t.Fatal(err)
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	m := e.manager()
	drain(t, m)
	e.wantObject("legacy/f", data)
	assertStagingEmpty(t, m)
	m.Close()
	if left := stagingRootEntries(t, e.dir); len(left) != 0 {
		t.Errorf("staging root holds %v", left)
	}
}

// stagingRootEntries lists the root's entries other than its setup lock
// and the node's foreground page.
func stagingRootEntries(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Name() != setupLockName && e.Name() != nodeFGName {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}
