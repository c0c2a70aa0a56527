package writeback

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

func rec(id, state string, size int64) *record {
	return &record{V: recordVersion, ID: id, State: state, Target: tgt("k/" + id), Size: size}
}

// reopen closes j and scans its directory again, as New does.
func reopen(t *testing.T, j *journal) (*journal, map[string]*record, int) {
	t.Helper()
	dir, sync := j.dir, j.sync
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	j2, err := openJournal(dir, sync)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j2.close() })
	recs, bad, err := j2.scan()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*record{}
	for _, r := range recs {
		got[r.ID] = r
	}
	return j2, got, bad
}

func TestJournal(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			j, err := openJournal(t.TempDir(), sync)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := j.scan(); err != nil {
				t.Fatal(err)
			}
			j.compactMin = 1 << 10 // compact as soon as it is worth it
			for i := range 200 {
				id := fmt.Sprintf("f%d", i%7)
				if err := j.write(rec(id, stateOpen, int64(i))); err != nil {
					t.Fatal(err)
				}
				if err := j.write(rec(id, stateClosed, int64(i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.remove("f3"); err != nil {
				t.Fatal(err)
			}
			st, _ := os.Stat(j.logPath())
			if st.Size() > 8<<10 {
				t.Errorf("log of %d bytes for 6 live records: not compacted", st.Size())
			}
			// A line cut by a crash at the end is skipped.
			f, _ := os.OpenFile(j.logPath(), os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString(`{"v":1,"id":"f9","state":"clo`)
			f.Close()
			_, got, bad := reopen(t, j)
			if bad != 1 {
				t.Errorf("%d unreadable lines, want 1", bad)
			}
			var ids []string
			for id, r := range got {
				ids = append(ids, id)
				if r.State != stateClosed {
					t.Errorf("%s: state %s", id, r.State)
				}
			}
			slices.Sort(ids)
			if want := []string{"f0", "f1", "f2", "f4", "f5", "f6"}; !slices.Equal(ids, want) {
				t.Errorf("records %v, want %v", ids, want)
			}
			if got["f6"].Size != 195 {
				t.Errorf("f6 size %d: the last record does not win", got["f6"].Size)
			}
		})
	}
}

// TestScanDeletesOrphans: data files without a record (spares, or files
// whose record never made it) and temporary files are removed.
func TestScanDeletesOrphans(t *testing.T) {
	dir := t.TempDir()
	j, _ := openJournal(dir, false)
	j.scan()
	j.write(rec("kept", stateClosed, 1))
	for _, name := range []string{"kept.data", "orphan.data", "journal.log.tmp"} {
		os.WriteFile(dir+"/"+name, []byte("x"), 0o600)
	}
	reopen(t, j)
	for name, want := range map[string]bool{"kept.data": true, "orphan.data": false, "journal.log.tmp": false} {
		if _, err := os.Stat(dir + "/" + name); (err == nil) != want {
			t.Errorf("%s exists %v, want %v", name, err == nil, want)
		}
	}
}

// TestSyncJournalRecovery runs a crash and recovery with SyncJournal.
func TestSyncJournalRecovery(t *testing.T) {
	e := newEnv(t)
	e.setFaults(stallUploads())
	cfg := e.config()
	cfg.SyncJournal = true
	m1 := e.open(cfg)
	writeFile(t, m1, "s/a", pattern(5000, 1))
	writeFile(t, m1, "s/b", pattern(5*testPart, 2))
	m1.Close()
	e.setFaults(faulty.Config{})
	m2 := e.open(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m2.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	e.wantObject("s/a", pattern(5000, 1))
	e.wantObject("s/b", pattern(5*testPart, 2))
}
