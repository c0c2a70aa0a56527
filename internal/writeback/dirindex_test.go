package writeback

import (
	"maps"
	"testing"

	"github.com/ferry-fs/ferry/pkg/objstore/faulty"
)

// TestDirIndex: the directory index follows creates, renames, removes and
// files dropped once durable; HasUnder and List answer from it.
func TestDirIndex(t *testing.T) {
	e := newEnv(t)
	g := e.gate(func(op, key string) bool { return op == faulty.OpPut }) // files stay staged
	e.setFaults(faulty.Config{Stall: g.stall})
	m := e.open(e.config())
	want := func(step string, dirs map[string]int) {
		t.Helper()
		got := map[string]int{}
		m.mu.Lock()
		for k, n := range m.dirs {
			if k.scheme != "s3" || k.bucket != "bkt" {
				t.Errorf("%s: directory %v of another bucket", step, k)
			}
			got[k.dir] = n
		}
		m.mu.Unlock()
		if !maps.Equal(got, dirs) {
			t.Fatalf("%s: directories %v, want %v", step, got, dirs)
		}
		for d, n := range dirs {
			if !m.HasUnder("s3", "bkt", d) || len(m.List("s3", "bkt", d)) != n {
				t.Fatalf("%s: HasUnder/List of %q disagree with %d files", step, d, n)
			}
		}
	}
	writeFile(t, m, "a/b/c", []byte("1"))
	writeFile(t, m, "a/d", []byte("2"))
	writeFile(t, m, "x", []byte("3"))
	want("created", map[string]int{"a/": 2, "a/b/": 1})
	if m.HasUnder("s3", "bkt", "q/") || m.List("s3", "bkt", "a/b/c/") != nil || m.HasUnder("s3", "other", "a/") {
		t.Fatal("files found under directories that hold none")
	}
	if !m.HasUnder("s3", "bkt", "a/b") || len(m.List("s3", "bkt", "")) != 3 {
		t.Fatal("prefixes that are not directories: the scan missed files")
	}
	if err := m.Rename(tgt("a/b/c"), tgt("y/z/c")); err != nil {
		t.Fatal(err)
	}
	want("renamed", map[string]int{"a/": 1, "y/": 1, "y/z/": 1})
	writeFile(t, m, "y/z/c", []byte("4")) // replaces the renamed file
	want("replaced", map[string]int{"a/": 1, "y/": 1, "y/z/": 1})
	m.Remove(tgt("a/d"))
	want("removed", map[string]int{"y/": 1, "y/z/": 1})
	g.release()
	drain(t, m)
	waitFor(t, "the durable files to be dropped", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.files) == 0
	})
	want("durable", map[string]int{})
}
